//! Unit tests of the conformance run: skips, command line, summaries, report paths.
use super::*;

fn case(name: &str, status: &str, message: Option<&str>) -> TestCase {
    TestCase {
        name: name.to_owned(),
        status: status.to_owned(),
        time: 1.0,
        message: message.map(str::to_owned),
    }
}

#[test]
fn skip_regex_is_an_alternation_of_escaped_literals() {
    let re = skip_regex();
    assert_eq!(
        re,
        "should not disrupt a cloud load-balancer's connectivity during rollout|should serve a basic image on each replica with a public image|\\[Alpha\\]|\\[Feature:OffByDefault\\]"
    );
    assert_eq!(
        regex_escape("a.b*(c)|[d]{e}^$\\"),
        r"a\.b\*\(c\)\|\[d\]\{e\}\^\$\\"
    );
    // Every skip has a reason.
    assert!(SKIPS.iter().all(|s| s.reason.len() > 20));
}

#[test]
fn skips_match_spec_names_literally() {
    let lb = "[It] [sig-apps] Deployment should not disrupt a cloud load-balancer's connectivity during rollout [sig-apps]";
    assert!(skip_for(lb).unwrap().reason.contains("cloud provider"));
    // 1.37 names the providers in the text.
    let lb = "[It] [sig-apps] Deployment should not disrupt a cloud load-balancer's connectivity during rollout [Provider:aws,azure,gce] [sig-apps]";
    assert!(skip_for(lb).unwrap().reason.contains("cloud provider"));
    let alpha = "[It] [sig-apps] Deployment x [FeatureGate:Y] [Alpha] [Feature:OffByDefault]";
    assert!(skip_for(alpha).is_some());
    let beta_on = "[It] [sig-apps] Deployment x [FeatureGate:Y] [Beta]";
    assert!(skip_for(beta_on).is_none(), "on-by-default beta gates run");
    assert!(
        skip_for("[It] [sig-apps] Deployment deployment should support rollover [Conformance]")
            .is_none()
    );
}

#[test]
fn e2e_command_line() {
    let args = e2e_args(
        Suite::Deployment,
        Path::new("/c/admin.kubeconfig"),
        Path::new("/cache/bin/kubectl"),
        Path::new("/t/conformance/ours/junit.xml"),
    );
    assert_eq!(
        args,
        [
            "--kubeconfig=/c/admin.kubeconfig",
            "--provider=skeleton",
            "--kubectl-path=/cache/bin/kubectl",
            r"--ginkgo.focus=\[sig-apps\] Deployment ",
            &format!("--ginkgo.skip={}", skip_regex()),
            "--ginkgo.junit-report=/t/conformance/ours/junit.xml",
            "--ginkgo.no-color",
            "--ginkgo.timeout=30m",
        ]
    );
}

#[test]
fn summary_selects_the_deployment_specs_and_judges_them() {
    let cases = vec![
        case("[SynchronizedBeforeSuite]", "passed", None),
        case(
            "[It] [sig-apps] Deployment should not disrupt a cloud load-balancer's connectivity during rollout [sig-apps]",
            "skipped",
            Some("skipped"),
        ),
        case(
            "[It] [sig-apps] Deployment deployment should support rollover [Conformance] [sig-apps, Conformance]",
            "passed",
            None,
        ),
        case(
            "[It] [sig-apps] ReplicaSet should adopt matching pods [sig-apps]",
            "skipped",
            Some("skipped"),
        ),
        case(
            "[It] [sig-apps] DeploymentLike other [sig-apps]",
            "failed",
            Some("x"),
        ),
    ];
    let summary = Summary::from_cases(Suite::Deployment, cases.clone());
    assert_eq!(summary.specs.len(), 2);
    // Sorted by text, whatever order Ginkgo ran them in.
    assert!(summary.specs[0].text().contains("rollover"));
    assert!(summary.specs[1].text().contains("load-balancer"));
    assert!(summary.suite_failures.is_empty());
    assert!(summary.problems().is_empty(), "{:?}", summary.problems());
    let text = summary.render(Contender::Ours, "v1.37.2");
    assert!(
        text.starts_with(
            "[sig-apps] Deployment specs of Kubernetes v1.37.2 with our deployment-controller:\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("PASS     1.0s  deployment should support rollover [Conformance]\n"),
        "{text}"
    );
    assert!(text.contains("SKIP"), "{text}");
    assert!(text.contains("skip list: needs a cloud provider"), "{text}");
    assert!(
        text.contains("passed 1, failed 0, skipped 1 (of 2 specs)"),
        "{text}"
    );

    // A failed spec, a failed suite node, a spec left out without a skip entry.
    let mut bad = cases;
    bad.push(case(
        "[It] [sig-apps] Deployment iterative rollouts should eventually progress [sig-apps]",
        "timedout",
        Some("timed out\nmore"),
    ));
    bad.push(case(
        "[It] [sig-apps] Deployment some new spec [sig-apps]",
        "skipped",
        Some("skipped"),
    ));
    bad.push(case("[SynchronizedAfterSuite]", "failed", Some("cleanup")));
    let summary = Summary::from_cases(Suite::Deployment, bad);
    let problems = summary.problems();
    assert_eq!(problems.len(), 3, "{problems:?}");
    assert!(problems[0].contains("iterative rollouts") && problems[0].contains("timedout"));
    assert!(problems[1].contains("no skip-list entry"));
    let mut interrupted = summary.specs.clone();
    interrupted[0].status = "interrupted".to_owned();
    let after_interrupt = Summary {
        suite: Suite::Deployment,
        specs: interrupted,
        suite_failures: Vec::new(),
    }
    .problems();
    assert!(
        after_interrupt
            .iter()
            .any(|p| p.contains("did not run (the run was interrupted)"))
    );
    assert!(problems[2].contains("SynchronizedAfterSuite"));
    let text = summary.render(Contender::Upstream, "v1.36.5");
    assert!(text.contains("FAIL"), "{text}");
    assert!(text.contains("                 timed out\n"), "{text}");
    assert!(
        text.contains("passed 1, failed 1, skipped 2 (of 4 specs)"),
        "{text}"
    );

    // A spec that skipped itself is fine and shows its own reason.
    let summary = Summary::from_cases(
        Suite::Deployment,
        vec![case(
            "[It] [sig-apps] Deployment x [sig-apps]",
            "skipped",
            Some("skipped - Only supported for providers [aws]"),
        )],
    );
    assert!(summary.problems().is_empty());
    assert!(
        summary
            .render(Contender::Ours, "v1.37.2")
            .contains("Only supported for providers")
    );

    assert_eq!(
        Summary::from_cases(Suite::Deployment, Vec::new())
            .problems()
            .len(),
        1
    );
}

#[test]
fn cli_parses() {
    use clap::Parser;
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: ConformanceArgs,
    }
    let cli = Cli::try_parse_from(["x"]).unwrap();
    assert_eq!(cli.args.controller, Contender::Ours);
    assert_eq!(cli.args.name, "conformance");
    assert!(!cli.args.build_only);
    // `cargo xtask test` runs the defaults, on the release it was given.
    assert_eq!(cli.args.suite, Suite::Deployment);
    let ours = ConformanceArgs::ours(Suite::Deployment, cli.args.kube.release);
    assert_eq!(
        (ours.controller, ours.suite, ours.name, ours.build_only),
        (cli.args.controller, cli.args.suite, cli.args.name, false)
    );
    assert!(std::ptr::eq(ours.kube.release, cli.args.kube.release));
    let cli = Cli::try_parse_from(["x", "--controller", "upstream", "--name", "c2"]).unwrap();
    assert_eq!(cli.args.controller, Contender::Upstream);
    assert_eq!(cli.args.name, "c2");
    assert!(Cli::try_parse_from(["x", "--controller", "both"]).is_err());
    let cli = Cli::try_parse_from(["x", "--kube-version", "1.36"]).unwrap();
    assert_eq!(cli.args.kube.release.kubernetes, "v1.36.5");
    assert!(Cli::try_parse_from(["x", "--kube-version", "1.35"]).is_err());
}

#[test]
fn the_replicaset_suite_selects_its_own_specs() {
    assert_eq!(Suite::Replicaset.focus(), r"\[sig-apps\] ReplicaSet ");
    assert_eq!(
        Suite::Replicaset.our_args(),
        ["--controllers=*,replicaset-controller"]
    );
    let cases = vec![
        case(
            "[It] [sig-apps] ReplicaSet should adopt matching pods on creation and release no longer matching pods [Conformance] [sig-apps, Conformance]",
            "passed",
            None,
        ),
        case("[It] [sig-apps] Deployment x [sig-apps]", "passed", None),
    ];
    let summary = Summary::from_cases(Suite::Replicaset, cases);
    assert_eq!(summary.specs.len(), 1);
    assert!(summary.problems().is_empty());
    let text = summary.render(Contender::Ours, "v1.37.2");
    assert!(
        text.starts_with("[sig-apps] ReplicaSet specs of Kubernetes v1.37.2 with"),
        "{text}"
    );
    assert!(
        text.contains("PASS") && text.contains("  should adopt matching pods"),
        "{text}"
    );
    let none = Summary::from_cases(Suite::Replicaset, Vec::new()).problems();
    assert_eq!(none, ["the report holds no `[sig-apps] ReplicaSet` spec"]);
}

#[test]
fn reports_of_each_release_and_controller_are_kept_apart() {
    let dirs: Vec<std::path::PathBuf> = kctrl_cluster::versions::RELEASES
        .iter()
        .flat_map(|r| {
            [Suite::Deployment, Suite::Replicaset]
                .into_iter()
                .flat_map(move |s| {
                    [
                        out_dir(r, s, Contender::Ours),
                        out_dir(r, s, Contender::Upstream),
                    ]
                })
        })
        .collect();
    for (i, d) in dirs.iter().enumerate() {
        assert!(dirs[i + 1..].iter().all(|o| o != d), "{d:?}");
    }
    let ours = out_dir(
        kctrl_cluster::versions::DEFAULT_RELEASE,
        Suite::Deployment,
        Contender::Ours,
    );
    assert!(ours.ends_with("conformance/v1.37.2/ours"), "{ours:?}");
}
