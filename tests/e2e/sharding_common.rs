//! What the sharding tests with the `ShardedListAndWatch` feature gate (`sharding_gate.rs`) and
//! without it (`sharding.rs`) share: ConfigMaps spread over namespaces, selectors over parts of
//! the hash space, and informers following a shard scope while it changes.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kctrl_client::{
    Api, Client, HashRange, PostParams, ResourceRef, ShardField, ShardSelector, hash_field,
};
use kctrl_e2e::{TestNamespace, labels, rand_suffix, wait_until};
use kctrl_informer::metrics::{InformerId, InformerMetrics};
use kctrl_informer::prometheus::PrometheusInformerMetrics;
use kctrl_informer::{
    DeletedObject, EventHandlerFns, ListWatch, ReflectorOptions, ShardFiltering, ShardScope,
    SharedInformer, SharedInformerOptions,
};
use tokio_util::sync::CancellationToken;

/// The label of every object a test creates; its value is the test's run.
pub(crate) const LABEL: &str = "e2e-sharding";

/// How long a scope change may take to be applied, or an event to arrive.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(30);

/// `namespace/name`, as informers key objects.
pub(crate) fn key(cm: &ConfigMap) -> String {
    format!(
        "{}/{}",
        cm.metadata.namespace.as_deref().unwrap_or_default(),
        cm.metadata.name.as_deref().unwrap_or_default()
    )
}

/// Fails naming what `got` lacks and what it has too many of, unless it equals `want`.
#[track_caller]
pub(crate) fn assert_same(got: &BTreeSet<String>, want: &BTreeSet<String>, what: &str) {
    if got != want {
        let missing: Vec<&String> = want.difference(got).collect();
        let extra: Vec<&String> = got.difference(want).collect();
        panic!(
            "{what}: {} expected, {} got; missing {missing:?}; unexpected {extra:?}",
            want.len(),
            got.len()
        );
    }
}

/// The hash range from `a/n` to `b/n` of the space.
pub(crate) fn part(a: u128, b: u128, n: u128) -> HashRange {
    HashRange::new(((a << 64) / n) as u64, (b << 64) / n).expect("a non-empty part")
}

/// A selector on `field` of the parts `[a/n, b/n)`.
pub(crate) fn selector(field: ShardField, parts: &[(u128, u128)], n: u128) -> ShardSelector {
    ShardSelector::new(field, parts.iter().map(|&(a, b)| part(a, b, n))).expect("a selector")
}

/// Selectors on `field` that together select every hash once: halves, quarters, and three
/// ranges against the two between them.
pub(crate) fn partitions(field: ShardField) -> Vec<Vec<ShardSelector>> {
    vec![
        vec![selector(field, &[(0, 1)], 2), selector(field, &[(1, 2)], 2)],
        (0..4).map(|q| selector(field, &[(q, q + 1)], 4)).collect(),
        vec![
            selector(field, &[(0, 1), (3, 5), (7, 8)], 8),
            selector(field, &[(1, 3), (5, 7)], 8),
        ],
    ]
}

/// The quarter of the hash space `value` falls in.
fn quarter(value: &str) -> usize {
    (hash_field(value) >> 62) as usize
}

/// Names `<letters>-<base>`, the letters chosen so that `per_quarter` of them fall in each
/// quarter of the hash space. The names differ at their start: names differing only in their
/// last characters would all hash into one quarter (see docs/sharding.md).
pub(crate) fn names_across_quarters(base: &str, per_quarter: usize) -> Vec<String> {
    let mut counts = [0; 4];
    let mut names = Vec::new();
    for i in 0.. {
        let mut prefix = String::new();
        let mut k = i;
        loop {
            prefix.insert(0, char::from(b'a' + (k % 26) as u8));
            k /= 26;
            if k == 0 {
                break;
            }
        }
        let name = format!("{prefix}-{base}");
        let q = quarter(&name);
        if counts[q] < per_quarter {
            counts[q] += 1;
            names.push(name);
        }
        if counts.iter().all(|&c| c == per_quarter) {
            break;
        }
    }
    names
}

/// ConfigMaps of one test spread over namespaces that fill every quarter of the namespace
/// hash space, all labelled [`LABEL`]`=<run>`.
pub(crate) struct Fixture {
    /// An admin client without a rate limit.
    pub(crate) client: Client,
    /// The label selector of this fixture's objects (the namespaces' own `kube-root-ca.crt`
    /// ConfigMaps are not).
    pub(crate) label_selector: String,
    /// The namespaces, [`names_across_quarters`].
    pub(crate) namespaces: Vec<TestNamespace>,
    /// Every ConfigMap created, as the server answered (with its uid).
    pub(crate) objects: Vec<ConfigMap>,
}

impl Fixture {
    /// `objects` ConfigMaps over `2 × 4` namespaces (two in each quarter).
    pub(crate) async fn create(client: &Client, objects: usize) -> Self {
        let run = format!("{:08x}", rand_suffix());
        let label_selector = format!("{LABEL}={run}");
        let namespaces: Vec<TestNamespace> =
            futures::stream::iter(names_across_quarters(&format!("shard-{run}"), 2))
                .map(|name| {
                    let client = client.clone();
                    async move { TestNamespace::create_named(&client, &name).await }
                })
                .buffered(8)
                .collect()
                .await;
        let mut fixture = Self {
            client: client.clone(),
            label_selector,
            namespaces,
            objects: Vec::new(),
        };
        let names: Vec<(String, String)> = (0..objects)
            .map(|i| {
                let ns = &fixture.namespaces[i % fixture.namespaces.len()].name;
                (ns.clone(), format!("cm-{i:03}"))
            })
            .collect();
        fixture.objects = futures::stream::iter(names)
            .map(|(ns, name)| fixture.create_object(ns, name))
            .buffer_unordered(32)
            .collect()
            .await;
        fixture
    }

    /// Creates the ConfigMap `namespace/name` with the fixture's label.
    pub(crate) fn create_object(
        &self,
        namespace: String,
        name: String,
    ) -> impl Future<Output = ConfigMap> + use<> {
        let api = Api::<ConfigMap>::namespaced(self.client.clone(), &namespace);
        let (_, run) = self.label_selector.split_once('=').unwrap();
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(name),
                labels: Some(labels(&[(LABEL, run)])),
                ..Default::default()
            },
            ..Default::default()
        };
        async move {
            api.create(&PostParams::default(), &cm)
                .await
                .unwrap_or_else(|e| panic!("creating {}: {e}", key(&cm)))
        }
    }

    /// The keys of the objects `selector` selects by our hash (all for `None`).
    pub(crate) fn expected(&self, selector: Option<&ShardSelector>) -> BTreeSet<String> {
        self.objects
            .iter()
            .filter(|cm| selector.is_none_or(|s| s.matches(&cm.metadata)))
            .map(key)
            .collect()
    }

    /// Deletes the namespaces (and so the objects).
    pub(crate) async fn delete(self) {
        for ns in self.namespaces {
            ns.delete().await;
        }
    }
}

/// Every notification a handler received: `ADD key`, `UPDATE key`, `DELETE key` (or
/// `DELETE? key` for an object the informer stopped following).
#[derive(Clone, Default)]
pub(crate) struct Journal(Arc<Mutex<Vec<String>>>);

impl Journal {
    fn push(&self, s: String) {
        self.0.lock().unwrap().push(s);
    }

    /// The entries so far, sorted, leaving the journal empty.
    pub(crate) fn take(&self) -> Vec<String> {
        let mut v = std::mem::take(&mut *self.0.lock().unwrap());
        v.sort();
        v
    }

    /// How many entries there are (of any kind but `UPDATE`).
    pub(crate) fn len_without_updates(&self) -> usize {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|e| !e.starts_with("UPDATE "))
            .count()
    }

    fn handler(&self) -> EventHandlerFns<ConfigMap> {
        let (a, u, d) = (self.clone(), self.clone(), self.clone());
        EventHandlerFns::new()
            .on_add(move |cm: &Arc<ConfigMap>, _| a.push(format!("ADD {}", key(cm))))
            .on_update(move |_, cm: &Arc<ConfigMap>| u.push(format!("UPDATE {}", key(cm))))
            .on_delete(move |d_obj: &DeletedObject<ConfigMap>| {
                let tag = if d_obj.is_final_state_unknown() {
                    "DELETE?"
                } else {
                    "DELETE"
                };
                d.push(format!("{tag} {}", key(d_obj.object())))
            })
    }
}

/// An informer over the fixture's ConfigMaps in every namespace, following a scope.
pub(crate) struct Follower {
    /// Its name, in its metrics.
    pub(crate) name: &'static str,
    /// The informer.
    pub(crate) informer: SharedInformer<ConfigMap>,
    /// What its handler heard.
    pub(crate) journal: Journal,
    task: tokio::task::JoinHandle<()>,
}

impl Follower {
    /// Starts an informer named `name` (listing with a streaming list when `watch_list`)
    /// following `scope`, and waits until it and its handler have synced.
    pub(crate) async fn start(
        fixture: &Fixture,
        scope: &ShardScope,
        metrics: &PrometheusInformerMetrics,
        name: &'static str,
        watch_list: bool,
        cancel: &CancellationToken,
    ) -> Self {
        let lw = ListWatch::new(Api::<ConfigMap>::all(fixture.client.clone()))
            .labels(fixture.label_selector.clone())
            .shard(scope.clone());
        let informer = SharedInformer::new(
            lw,
            SharedInformerOptions {
                name: name.to_owned(),
                reflector: ReflectorOptions {
                    name: name.to_owned(),
                    use_watch_list: watch_list,
                    ..Default::default()
                },
                metrics: Some(InformerMetrics::new(
                    InformerId::new(name, &ResourceRef::of::<ConfigMap>()),
                    Arc::new(metrics.clone()),
                )),
                ..Default::default()
            },
        );
        let journal = Journal::default();
        let registration = informer.add_event_handler(journal.handler()).unwrap();
        let task = informer.start(cancel.clone());
        tokio::time::timeout(Duration::from_secs(60), informer.synced())
            .await
            .unwrap_or_else(|_| panic!("{name}: synced within 60s"));
        wait_until(
            &format!("{name}: the handler's first adds"),
            TIMEOUT,
            || registration.has_synced(),
        )
        .await;
        Self {
            name,
            informer,
            journal,
            task,
        }
    }

    /// The keys of the cached objects.
    pub(crate) fn cached(&self) -> BTreeSet<String> {
        self.informer
            .store()
            .list()
            .iter()
            .map(|cm| key(cm))
            .collect()
    }

    /// Waits until the handler has heard `n` notifications other than updates, then a moment
    /// more (for any it should not hear), and returns them all, sorted.
    pub(crate) async fn notifications(&self, n: usize) -> Vec<String> {
        wait_until(
            &format!("{}: {n} notifications", self.name),
            TIMEOUT,
            || self.journal.len_without_updates() >= n,
        )
        .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        self.journal.take()
    }

    /// Waits for the informer to stop (after the cancellation).
    pub(crate) async fn stopped(self) {
        let _ = self.task.await;
    }
}

/// The value of `kctrl_informer_shard_client_filtering` for the informer `name`.
pub(crate) fn client_filtering_gauge(
    registry: &prometheus_client::registry::Registry,
    name: &str,
) -> f64 {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
    let series = format!("kctrl_informer_shard_client_filtering{{name=\"{name}\",");
    let line = text
        .lines()
        .find(|l| l.starts_with(&series))
        .unwrap_or_else(|| panic!("no series {series}… in\n{text}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

/// Two informers (a list and a streaming list) over the fixture's objects follow one scope
/// through growth, shrinking, a move, several ranges, a change of field, no selector and back:
/// after `applied`, each caches exactly what the selector selects by our hash, and its handler
/// has heard a delete for every object that left and an add for every one that entered, and
/// nothing about the others. New objects reach the caches only when selected. `filtering` is
/// how the informers must say they apply the selector (the server with the gate, the client
/// without); the gauge says the same.
pub(crate) async fn informers_follow_a_changing_scope(client: Client, filtering: ShardFiltering) {
    let fixture = Fixture::create(&client, 120).await;
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = PrometheusInformerMetrics::new(&mut registry);
    let uid = |parts: &[(u128, u128)]| Some(selector(ShardField::Uid, parts, 8));
    let first = uid(&[(0, 4)]);
    let scope = ShardScope::new(first.clone());
    let cancel = CancellationToken::new();
    let followers = [
        Follower::start(&fixture, &scope, &metrics, "sharded-list", false, &cancel).await,
        Follower::start(
            &fixture,
            &scope,
            &metrics,
            "sharded-watch-list",
            true,
            &cancel,
        )
        .await,
    ];
    let want = fixture.expected(first.as_ref());
    assert!(
        !want.is_empty() && want.len() < fixture.objects.len(),
        "the first scope selects some of the objects, not all: {} of {}",
        want.len(),
        fixture.objects.len()
    );
    let gauge = match filtering {
        ShardFiltering::Client => 1.0,
        _ => 0.0,
    };
    for f in &followers {
        assert_same(&f.cached(), &want, &format!("{}: the first scope", f.name));
        assert_eq!(f.informer.shard_filtering(), filtering, "{}", f.name);
        assert_eq!(
            client_filtering_gauge(&registry, f.name),
            gauge,
            "{}",
            f.name
        );
        let adds: Vec<String> = want.iter().map(|k| format!("ADD {k}")).collect();
        assert_eq!(
            f.journal.take(),
            adds,
            "{}: one add per selected object",
            f.name
        );
    }
    assert_eq!(scope.applied_generation(), Some(1));

    let steps: [(&str, Option<ShardSelector>); 7] = [
        ("grow", uid(&[(0, 6)])),
        ("shrink", uid(&[(0, 2)])),
        ("move", uid(&[(4, 8)])),
        ("several ranges", uid(&[(0, 1), (3, 5), (7, 8)])),
        (
            "namespaces instead of uids",
            Some(selector(ShardField::Namespace, &[(1, 3)], 4)),
        ),
        ("everything", None),
        ("back to the first", first),
    ];
    let mut before = want;
    for (step, selected) in steps {
        let after = fixture.expected(selected.as_ref());
        let generation = scope.set(selected.clone());
        tokio::time::timeout(TIMEOUT, scope.applied(generation))
            .await
            .unwrap_or_else(|_| panic!("{step}: the scope applied within {TIMEOUT:?}"));
        let mut expected: Vec<String> = before
            .difference(&after)
            .map(|k| format!("DELETE? {k}"))
            .chain(after.difference(&before).map(|k| format!("ADD {k}")))
            .collect();
        expected.sort();
        assert!(
            !expected.is_empty() || step == "back to the first",
            "{step}: the step changes the selection"
        );
        let field_changed = step == "namespaces instead of uids";
        for f in &followers {
            assert_same(
                &f.cached(),
                &after,
                &format!("{}: {step}: the cache once applied", f.name),
            );
            let mut heard = f.notifications(expected.len()).await;
            if field_changed {
                // Across fields nothing is known per hash: the whole new selection is listed
                // again, and the objects kept may be heard as updated.
                heard.retain(|e| {
                    e.strip_prefix("UPDATE ").is_none_or(|k| {
                        assert!(before.contains(k) && after.contains(k), "{step}: {e}");
                        false
                    })
                });
            }
            assert_eq!(
                heard, expected,
                "{}: {step}: what the handler heard",
                f.name
            );
            assert_eq!(
                f.informer.shard_filtering(),
                filtering,
                "{}: {step}",
                f.name
            );
        }
        before = after;
    }

    // New objects: only those the scope selects reach the caches. Objects are created until
    // one is selected after at least one that is not; the watch delivers (or the client
    // passes) events in order, so once the last is cached every earlier one was decided.
    let selected = scope.get().expect("the first scope has a selector");
    let ns = fixture.namespaces[0].name.clone();
    let (mut inside, mut outside) = (Vec::new(), Vec::new());
    for i in 0.. {
        let cm = fixture
            .create_object(ns.clone(), format!("new-{i:03}"))
            .await;
        if selected.matches(&cm.metadata) {
            inside.push(key(&cm));
            if !outside.is_empty() {
                break;
            }
        } else {
            outside.push(key(&cm));
        }
    }
    let last = inside.last().unwrap().clone();
    for f in &followers {
        wait_until(&format!("{}: {last} cached", f.name), TIMEOUT, || {
            f.informer.store().get(&last).is_some()
        })
        .await;
        let cached = f.cached();
        for k in &outside {
            assert!(!cached.contains(k), "{}: {k} is outside the scope", f.name);
        }
        let adds: Vec<String> = inside.iter().map(|k| format!("ADD {k}")).collect();
        assert_eq!(
            f.notifications(inside.len()).await,
            adds,
            "{}: the new objects selected",
            f.name
        );
        assert_eq!(
            client_filtering_gauge(&registry, f.name),
            gauge,
            "{}",
            f.name
        );
    }
    cancel.cancel();
    for f in followers {
        f.stopped().await;
    }
    assert_eq!(scope.informers(), 0, "stopped informers leave the scope");
    fixture.delete().await;
}
