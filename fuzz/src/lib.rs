//! Coverage-guided fuzz targets for the parsers that read bytes kctrl does not control: label
//! selectors, int-or-percent values, the watch stream (framing and event decoding), API error
//! `Status` bodies, kubeconfig YAML, exec credential plugin output, Go duration flags, the
//! compact metadata of metadata-only informers and whole objects read from protobuf.
//!
//! Each module holds one target's **property function**, `check(&[u8])`: it feeds the input to
//! the code under test and panics when a property is violated (a panic inside the code under
//! test counts too). The same function runs in three places:
//!
//! * under libFuzzer, in the instrumented build `cargo xtask fuzz` makes (`--cfg fuzzing`);
//! * in `cargo test -p kctrl-fuzz`, which replays every file of `seeds/<target>/` and
//!   `regressions/<target>/` (tests/replay.rs);
//! * in an ordinary build of a target binary, which replays the files or directories named on
//!   its command line: `cargo run -p kctrl-fuzz --bin watch_framer -- crash-1234`.
//!
//! Inputs that are not UTF-8 are skipped by the targets whose input is text.

pub mod exec_credential;
pub mod go_duration;
pub mod int_or_percent;
mod json;
pub mod kubeconfig;
pub mod label_selector;
pub mod object_meta;
pub mod protobuf_objects;
pub mod status;
pub mod watch_event;
pub mod watch_framer;

use std::path::{Path, PathBuf};

/// One fuzz target: its name (binary, seed and regression directory) and property function.
#[derive(Clone, Copy, Debug)]
pub struct Target {
    /// The name of the target's binary and of its `seeds/` and `regressions/` directories.
    pub name: &'static str,
    /// The property function.
    pub check: fn(&[u8]),
}

/// Every fuzz target.
pub const TARGETS: &[Target] = &[
    Target {
        name: "label_selector",
        check: label_selector::check,
    },
    Target {
        name: "int_or_percent",
        check: int_or_percent::check,
    },
    Target {
        name: "watch_framer",
        check: watch_framer::check,
    },
    Target {
        name: "watch_event",
        check: watch_event::check,
    },
    Target {
        name: "status",
        check: status::check,
    },
    Target {
        name: "kubeconfig",
        check: kubeconfig::check,
    },
    Target {
        name: "exec_credential",
        check: exec_credential::check,
    },
    Target {
        name: "go_duration",
        check: go_duration::check,
    },
    Target {
        name: "object_meta",
        check: object_meta::check,
    },
    Target {
        name: "protobuf_objects",
        check: protobuf_objects::check,
    },
];

/// The directory of this package (where `seeds/` and `regressions/` are).
pub fn package_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The files of `dir`, sorted; empty if it does not exist.
pub fn inputs_in(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    if !dir.exists() {
        return Ok(Vec::new());
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// The `main` of a target binary built without libFuzzer: runs `check` on every file named on
/// the command line (a directory stands for its files) and reports each one.
pub fn replay_main(check: fn(&[u8])) -> std::process::ExitCode {
    let mut files = Vec::new();
    for arg in std::env::args_os().skip(1) {
        let path = PathBuf::from(arg);
        if path.is_dir() {
            match inputs_in(&path) {
                Ok(found) => files.extend(found),
                Err(e) => {
                    eprintln!("{}: {e}", path.display());
                    return std::process::ExitCode::FAILURE;
                }
            }
        } else {
            files.push(path);
        }
    }
    if files.is_empty() {
        eprintln!(
            "usage: <target> FILE|DIR...  (replays inputs through the target's properties; \
             `cargo xtask fuzz` runs the fuzzer)"
        );
        return std::process::ExitCode::FAILURE;
    }
    for path in files {
        let data = match std::fs::read(&path) {
            Ok(data) => data,
            Err(e) => {
                eprintln!("{}: {e}", path.display());
                return std::process::ExitCode::FAILURE;
            }
        };
        eprintln!("replaying {} ({} bytes)", path.display(), data.len());
        check(&data);
    }
    eprintln!("all inputs passed");
    std::process::ExitCode::SUCCESS
}

/// Defines a target binary's entry point: libFuzzer's under `--cfg fuzzing`, else
/// [`replay_main`].
#[macro_export]
macro_rules! fuzz_target {
    ($check:path) => {
        #[cfg(fuzzing)]
        libfuzzer_sys::fuzz_target!(|data: &[u8]| $check(data));

        #[cfg(not(fuzzing))]
        fn main() -> std::process::ExitCode {
            $crate::replay_main($check)
        }
    };
}
