//! `cargo xtask bench lanes`: how long a user's change waits while a freshly started
//! Deployment controller works through its initial sync, with our work-queue's priority lanes,
//! without them (`--priority-lanes=false`: one FIFO lane) and with kube-controller-manager's
//! Deployment controller.
//!
//! The cluster holds N Deployments of one replica each, complete. Per run, with no controller
//! running, P of them (spread evenly over the name order) get a new image, so that the initial
//! sync has real work to do (P rollouts at QPS 20) rather than N syncs that write nothing. The
//! contender starts; once its caches are synced the driver changes the image of one more
//! Deployment (the one in the middle of the name order, untouched before: the user's change)
//! and measures the time until that Deployment's new ReplicaSet exists, then waits for every
//! rollout to finish (the drain time) and stops the contender. The three contenders alternate,
//! each alone against the cluster (checked by process id, as in `bench controller`).
//!
//! Without lanes, the changed Deployment's key is already waiting in the queue from the initial
//! list, and a new add of a waiting key does not move it: its sync waits for everything listed
//! before it. With lanes, the initial list went to the low lane and the live event raises the
//! key to the high lane, which is served first.

use std::fmt::Write as _;
use std::fs;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use kctrl_client::versioned::Versioned;
use kctrl_client::{Api, ListParams, Patch, PatchParams, PostParams};

use super::report::{Machine, Spread};
use super::running::start_with;
use super::workload::{concurrently, deployment_with, image_patch, name, wait_complete};
use super::{Env, QPS, SETUP_QPS, Side, admin_client, check_cluster_kcm, prepare};
use xtask_contender::args::KubeVersionArg;
use xtask_report::markdown::Table;

/// Arguments of `cargo xtask bench lanes`.
#[derive(clap::Args)]
pub(crate) struct LanesArgs {
    /// Deployments (one replica each) in the cluster.
    #[arg(long, default_value_t = 2000)]
    deployments: usize,
    /// Of those, how many get a new image while no controller runs before each run: the
    /// rollouts the initial sync has to start.
    #[arg(long, default_value_t = 200)]
    pending: usize,
    /// Rounds; each runs the three contenders once, in rotating order.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Cluster name (see `cargo xtask cluster`); a running cluster of that name is restarted.
    #[arg(long, default_value = "bench-lanes")]
    name: String,
    /// Leave the cluster running at the end.
    #[arg(long)]
    keep: bool,
    /// Do not rewrite docs/benchmarks/lanes.md.
    #[arg(long)]
    no_doc: bool,
    /// Kubernetes release of the cluster and of the kube-controller-manager compared with.
    #[command(flatten)]
    kube: KubeVersionArg,
}

/// The three configurations compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Contender {
    /// Our controller as it ships: two lanes.
    Lanes,
    /// Our controller with `--priority-lanes=false`.
    OneLane,
    /// kube-controller-manager's Deployment controller.
    Upstream,
}

impl Contender {
    const ALL: [Contender; 3] = [Contender::Lanes, Contender::OneLane, Contender::Upstream];

    fn label(self) -> &'static str {
        match self {
            Contender::Lanes => "ours, priority lanes (default)",
            Contender::OneLane => "ours, `--priority-lanes=false`",
            Contender::Upstream => "kube-controller-manager",
        }
    }

    fn slug(self) -> &'static str {
        match self {
            Contender::Lanes => "lanes",
            Contender::OneLane => "one-lane",
            Contender::Upstream => "upstream",
        }
    }

    fn side(self) -> Side {
        match self {
            Contender::Lanes | Contender::OneLane => Side::Ours,
            Contender::Upstream => Side::Upstream,
        }
    }

    fn extra_flags(self) -> &'static [&'static str] {
        match self {
            Contender::OneLane => &["--priority-lanes=false"],
            Contender::Lanes | Contender::Upstream => &[],
        }
    }

    /// Round `round`'s order: rotated, so no contender always goes first.
    fn order(round: usize) -> Vec<Contender> {
        (0..Self::ALL.len())
            .map(|i| Self::ALL[(i + round) % Self::ALL.len()])
            .collect()
    }
}

/// One contender's run.
#[derive(Clone, Debug)]
struct LaneRun {
    contender: Contender,
    /// Seconds from process start to caches synced.
    synced: f64,
    /// Seconds from the user's change to its Deployment's new ReplicaSet.
    wait: f64,
    /// Seconds from process start until every rollout (pending and the user's) is complete.
    drain: f64,
}

/// The indices of the `pending` Deployments out of `n`, spread evenly over the name order,
/// and the index of the user's Deployment (the middle one), which is not among them.
fn choose(n: usize, pending: usize) -> Result<(Vec<usize>, usize)> {
    if n < 2 {
        bail!("--deployments must be at least 2 (got {n})");
    }
    if pending >= n {
        bail!("--pending ({pending}) must be below --deployments ({n})");
    }
    let target = n / 2;
    // Spread over every index but the target's.
    let others: Vec<usize> = (0..n).filter(|&i| i != target).collect();
    let chosen = (0..pending)
        .map(|k| others[k * others.len() / pending.max(1)])
        .collect();
    Ok((chosen, target))
}

pub(crate) fn run(args: LanesArgs) -> Result<()> {
    let (pending, target) = choose(args.deployments, args.pending)?;
    let rounds = args.rounds.max(1);
    // One Pod per Deployment, plus the surge of the rollouts in flight.
    let pods = args.deployments + args.pending + 100;
    let env = prepare(
        &args.name,
        pods,
        args.keep,
        false,
        Duration::from_secs(3600),
        super::resolve_ours(None)?,
        (
            args.kube.release,
            super::Measured::Deployment,
            super::CLUSTER_KCM_QPS,
        ),
    )?;
    let machine = Machine::detect(&env.info.kubernetes_version);
    let mut runs = Vec::new();
    let result = (|| -> Result<()> {
        xtask_contender::rbac::grant_deploy_rbac(&env.info.kubectl, &env.info.admin_kubeconfig)?;
        check_cluster_kcm(&env)?;
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?
            .block_on(measure(
                &env,
                args.deployments,
                &pending,
                target,
                rounds,
                &mut runs,
            ))
    })();
    let machine = machine.finish();
    xtask_contender::fresh::down_unless_kept(&args.name, args.keep);
    if runs.is_empty() {
        return result;
    }
    let incomplete = result.as_ref().err().map(|e| format!("{e:#}"));
    let text = markdown(&runs, &args, rounds, &machine, incomplete.as_deref());
    println!("{text}");
    if !args.no_doc {
        let doc = crate::workspace_root().join("docs/benchmarks/lanes.md");
        fs::write(&doc, &text).with_context(|| format!("writing {}", doc.display()))?;
        eprintln!("wrote {}", doc.display());
    }
    result
}

async fn measure(
    env: &Env,
    n: usize,
    pending: &[usize],
    target: usize,
    rounds: usize,
    runs: &mut Vec<LaneRun>,
) -> Result<()> {
    let client = admin_client(env)?;
    let namespace = format!("{}-lanes-{n}", super::NAMESPACE_PREFIX);
    crate::kube::ensure_namespace(&client, &namespace, &[]).await?;
    let api = Api::<Deployment>::namespaced(client.clone(), &namespace);
    let replica_sets = Api::<ReplicaSet>::namespaced(client.clone(), &namespace);

    eprintln!("preparing {n} Deployments x 1 in {namespace} (ours, QPS {SETUP_QPS:?})…");
    let mut setup = start_with(env, Side::Ours, &format!("lanes-{n}-setup"), SETUP_QPS, &[])?;
    setup.wait_synced(Duration::from_secs(120)).await?;
    let started = Instant::now();
    concurrently(n, {
        let api = api.clone();
        move |i| {
            let api = api.clone();
            async move {
                match api
                    .create(&PostParams::default(), &deployment_with(i, 1)?)
                    .await
                {
                    Ok(_) => Ok(()),
                    Err(e) if e.is_already_exists() => Ok(()),
                    Err(e) => Err(anyhow!("creating {}: {e}", name(i))),
                }
            }
        }
    })
    .await?;
    wait_complete(&api, n, 1, started, env.phase_timeout, &mut setup).await?;
    eprintln!(
        "  {n} Deployments complete after {:.0} s",
        started.elapsed().as_secs_f64()
    );
    setup.stop(env)?;

    for round in 0..rounds {
        for contender in Contender::order(round) {
            let tag = format!("r{round}-{}", contender.slug());
            // The initial sync's work, written while no controller runs.
            let pending_patch = std::sync::Arc::new(Patch::Merge(image_patch(&tag)));
            concurrently(pending.len(), {
                let (api, pending, patch) = (api.clone(), pending.to_vec(), pending_patch);
                move |k| {
                    let (api, patch, i) = (api.clone(), patch.clone(), pending[k]);
                    async move {
                        api.patch(&name(i), &PatchParams::default(), &patch)
                            .await
                            .with_context(|| format!("patching {}", name(i)))?;
                        Ok(())
                    }
                }
            })
            .await?;
            eprintln!(
                "round {}/{rounds}: {} ({} rollouts pending)",
                round + 1,
                contender.label(),
                pending.len()
            );
            let mut c = start_with(
                env,
                contender.side(),
                &format!("lanes-{tag}"),
                QPS,
                contender.extra_flags(),
            )?;
            let synced = c.wait_synced(Duration::from_secs(300)).await?;
            // The user's change.
            let user_tag = format!("{tag}-user");
            let image = format!("registry.k8s.io/pause:{user_tag}");
            let changed = Instant::now();
            api.patch(
                &name(target),
                &PatchParams::default(),
                &Patch::Merge(image_patch(&user_tag)),
            )
            .await
            .with_context(|| format!("patching {}", name(target)))?;
            let selector = ListParams {
                label_selector: Some(format!("app={}", name(target))),
                ..Default::default()
            };
            let wait = loop {
                let sets = replica_sets.list(&selector).await?;
                if sets
                    .items
                    .iter()
                    .any(|rs| template_image(rs) == Some(&image))
                {
                    break changed.elapsed().as_secs_f64();
                }
                if let Some(why) = c.exited() {
                    bail!(why);
                }
                if changed.elapsed() > env.phase_timeout {
                    bail!(
                        "{}: no ReplicaSet with {image} for {} within {:?}",
                        contender.slug(),
                        name(target),
                        env.phase_timeout
                    );
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            };
            eprintln!("  synced {synced:.2} s; the user's change waited {wait:.2} s");
            wait_complete(&api, n, 1, c.spawned(), env.phase_timeout, &mut c).await?;
            let drain = c.spawned().elapsed().as_secs_f64();
            eprintln!("  every rollout complete {drain:.1} s after the start");
            runs.push(LaneRun {
                contender,
                synced,
                wait,
                drain,
            });
            c.stop(env)?;
        }
    }
    Ok(())
}

fn template_image(rs: &ReplicaSet) -> Option<&String> {
    rs.spec
        .get()?
        .template
        .as_ref()?
        .spec
        .as_ref()?
        .containers
        .first()?
        .image
        .as_ref()
}

fn cell(values: &[f64], decimals: usize) -> String {
    match Spread::of(values) {
        Some(s) => format!(
            "{:.d$} ({:.d$}–{:.d$})",
            s.median,
            s.min,
            s.max,
            d = decimals
        ),
        None => "–".into(),
    }
}

fn markdown(
    runs: &[LaneRun],
    args: &LanesArgs,
    rounds: usize,
    machine: &Machine,
    incomplete: Option<&str>,
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Priority lanes: a user's change during the initial sync\n\n\
         Written by `cargo xtask bench lanes --deployments {} --pending {} --rounds {rounds}` on {}. \
         Do not edit by hand; rerun the command. Each cell: median over the rounds (min–max).\n",
        args.deployments,
        args.pending,
        machine.started()
    );
    if let Some(why) = incomplete {
        let _ = writeln!(
            out,
            "**Incomplete run**: it stopped with `{}`; the table holds what was measured before.\n",
            why.replace('`', "'").replace('\n', " ")
        );
    }
    let _ = writeln!(
        out,
        "{} Deployments of one replica are at rest; before each run, with no controller running, \
         {} of them (spread over the name order) get a new image. The controller starts (QPS 20, \
         burst 30, 5 workers); as soon as its caches are synced the image of the Deployment in \
         the middle of the name order changes (the user's change). *User's change waits*: from \
         that patch until its new ReplicaSet exists (polled every 20 ms). *All rollouts done*: \
         from the process start until every Deployment is complete.\n",
        args.deployments, args.pending
    );
    let mut t = Table::new()
        .left("controller")
        .right("user's change waits (s)")
        .right("caches synced (s)")
        .right("all rollouts done (s)")
        .right("runs");
    for contender in Contender::ALL {
        let mine: Vec<&LaneRun> = runs.iter().filter(|r| r.contender == contender).collect();
        let pick = |f: fn(&LaneRun) -> f64| mine.iter().map(|r| f(r)).collect::<Vec<f64>>();
        t.row([
            contender.label().to_string(),
            cell(&pick(|r| r.wait), 2),
            cell(&pick(|r| r.synced), 2),
            cell(&pick(|r| r.drain), 1),
            mine.len().to_string(),
        ]);
    }
    out.push_str(&t.markdown());
    let _ = writeln!(
        out,
        "\nWithout lanes the changed Deployment's key is already in the queue from the initial \
         list, and adding a waiting key again does not move it, so its sync waits for every key \
         listed before it; kube-controller-manager's queue behaves the same way. With lanes the \
         initial list is in the low lane and the live event raises the key to the high lane. \
         The low lane keeps a bounded share of the workers (every fifth get); the last column \
         shows what the reordering costs the initial sync as a whole. Before the controller \
         skipped syncs from a cached Deployment its own write had already replaced (commit \
         1a71fda), the lanes run drew about 100 status-write conflicts per run and drained 13% \
         slower (79.6 s against 70.3 s): with a short high lane, the new ReplicaSet's event had \
         a Deployment synced again before its informer delivered the status the previous sync \
         wrote.\n"
    );
    let _ = writeln!(out, "## Machine\n");
    out.push_str(&machine.table());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_deployments_are_spread_and_spare_the_target() {
        let (pending, target) = choose(10, 4).unwrap();
        assert_eq!(target, 5);
        assert_eq!(pending.len(), 4);
        assert!(!pending.contains(&target));
        assert!(pending.windows(2).all(|w| w[0] < w[1]), "{pending:?}");
        assert_eq!(pending[0], 0);
        assert!(
            *pending.last().unwrap() >= 6,
            "reaches past the target: {pending:?}"
        );
        let (none, _) = choose(10, 0).unwrap();
        assert!(none.is_empty());
        let (all_but_one, target) = choose(10, 9).unwrap();
        assert_eq!(all_but_one.len(), 9);
        assert!(!all_but_one.contains(&target));
    }

    #[test]
    fn bad_sizes_are_refused_with_the_flag_named() {
        assert!(
            choose(1, 0)
                .unwrap_err()
                .to_string()
                .contains("--deployments")
        );
        assert!(
            choose(10, 10)
                .unwrap_err()
                .to_string()
                .contains("--pending")
        );
    }

    #[test]
    fn the_table_is_rendered_as_before() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            lanes: LanesArgs,
        }
        use clap::Parser as _;
        let args = Cli::parse_from(["lanes", "--deployments", "20", "--pending", "4"]).lanes;
        let run = |contender, k: f64| LaneRun {
            contender,
            synced: 1.25 * k,
            wait: 0.5 * k,
            drain: 30.0 * k,
        };
        let runs = vec![
            run(Contender::Lanes, 1.0),
            run(Contender::OneLane, 2.0),
            run(Contender::Lanes, 1.5),
            run(Contender::Upstream, 3.0),
        ];
        let machine = super::super::report::Machine::sample();
        xtask_report::golden::check(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("src/bench/controller/golden/lanes.md"),
            &markdown(&runs, &args, 2, &machine, Some("stopped `early`")),
        );
    }

    #[test]
    fn contenders_rotate() {
        assert_eq!(Contender::order(0), Contender::ALL.to_vec());
        assert_eq!(
            Contender::order(1),
            vec![Contender::OneLane, Contender::Upstream, Contender::Lanes]
        );
        assert_eq!(Contender::OneLane.extra_flags(), ["--priority-lanes=false"]);
        assert_eq!(Contender::Upstream.side(), Side::Upstream);
    }
}
