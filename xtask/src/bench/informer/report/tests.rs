//! Golden tests of the informer benchmark's tables.

use super::*;

fn cell(scale: f64, bytes: Option<f64>) -> Cell {
    Cell {
        runs: 3,
        sync_ms: 900.0 * scale,
        peak_rss: 80.0 * 1024.0 * 1024.0 * scale,
        steady_rss: 60.0 * 1024.0 * 1024.0 * scale,
        client_cpu_s: 1.25 * scale,
        apiserver_cpu_s: f64::NAN,
        bytes_per_object: bytes,
        events_per_sec: 4000.0 / scale,
        patches_per_sec: 4100.0,
    }
}

fn table() -> Table {
    let mib = 1024.0 * 1024.0;
    Table {
        baselines: vec![
            (Impl::Kctrl, Variant::None, 10.0 * mib),
            (Impl::ClientGo, Variant::None, 12.5 * mib),
            (Impl::Kctrl, Variant::ViewProtobuf, 9.0 * mib),
        ],
        groups: vec![
            Group {
                pods: 1000,
                variant: Variant::None,
                cells: vec![
                    (Impl::Kctrl, cell(1.0, Some(5000.0))),
                    (Impl::ClientGo, cell(0.8, Some(4000.0))),
                    (Impl::KubeRs, cell(1.3, None)),
                ],
            },
            Group {
                pods: 1000,
                variant: Variant::ViewProtobuf,
                cells: vec![(Impl::Kctrl, cell(0.5, Some(900.0)))],
            },
            Group {
                pods: 1000,
                variant: Variant::Metadata,
                cells: vec![
                    (Impl::Kctrl, cell(0.4, Some(1500.0))),
                    (Impl::ClientGo, cell(0.3, Some(2000.0))),
                ],
            },
        ],
    }
}

fn golden(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/bench/informer/golden")
        .join(name)
}

#[test]
fn the_tables_are_rendered_as_before() {
    let table = table();
    xtask_report::golden::check(&golden("tables.md"), &text_table(&table));
    xtask_report::golden::check(&golden("targets.md"), &targets(&table));
    let machine = Machine {
        cpus: 2,
        cpu_model: "Test CPU".into(),
        memory: "4 GiB".into(),
        os: "Linux 6.1".into(),
        rustc: "rustc 1.90.0".into(),
        go: "go1.25".into(),
        client_go: "v0.37.2".into(),
        kube_rs: "kube 5.0.0".into(),
        kubernetes: "v1.37.2".into(),
        date: "2026-11-28".into(),
        load_average: "0.50 0.40 0.30".into(),
    };
    let settings = Settings {
        sizes: vec![1000],
        reps: 3,
        quick: false,
        settle_ms: super::super::DEFAULT_SETTLE_MS,
        updates: None,
    };
    let md = markdown(&table, &machine, &settings);
    // The machine table, between the prose sections.
    let from = md.find("\n## Machine").unwrap();
    let to = md.find("\n## Method").unwrap();
    xtask_report::golden::check(&golden("machine.md"), &md[from..to]);
}
