//! Replays every committed input, `seeds/<target>/*` and `regressions/<target>/*`, through its
//! target's property function: the cheap check CI runs on each change, without a fuzzer.

use kctrl_fuzz::{TARGETS, inputs_in, package_dir};

#[test]
fn every_target_has_seeds_and_they_pass() {
    for target in TARGETS {
        let seeds = inputs_in(&package_dir().join("seeds").join(target.name)).unwrap();
        assert!(!seeds.is_empty(), "no seeds for {}", target.name);
        for path in seeds {
            eprintln!("replaying {}", path.display());
            let data = std::fs::read(&path).unwrap();
            (target.check)(&data);
        }
    }
}

#[test]
fn regressions_pass() {
    for target in TARGETS {
        for path in inputs_in(&package_dir().join("regressions").join(target.name)).unwrap() {
            eprintln!("replaying {}", path.display());
            let data = std::fs::read(&path).unwrap();
            (target.check)(&data);
        }
    }
}

#[test]
fn every_target_has_a_binary_and_seed_directory() {
    let manifest = std::fs::read_to_string(package_dir().join("Cargo.toml")).unwrap();
    for target in TARGETS {
        assert!(
            manifest.contains(&format!("name = \"{}\"", target.name)),
            "no [[bin]] for {}",
            target.name
        );
        assert!(
            package_dir()
                .join("fuzz_targets")
                .join(format!("{}.rs", target.name))
                .is_file(),
            "no fuzz_targets/{}.rs",
            target.name
        );
    }
}
