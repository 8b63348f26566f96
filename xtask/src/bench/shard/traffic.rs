//! What kube-apiserver served of the workload resources (Deployments, ReplicaSets, Pods), from
//! its own /metrics: the bytes to ready of `cargo xtask bench shard` (see the module docs of
//! [`super`]).

use std::time::{Duration, Instant};

use anyhow::Result;
use kctrl_cluster::plane::ClusterInfo;
use xtask_contender::parse;

/// What kube-apiserver has served of Deployments, ReplicaSets and Pods since it started.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Traffic {
    /// Bytes written: the sums of `apiserver_watch_events_sizes` and of the LIST
    /// `apiserver_response_sizes`.
    pub(super) bytes: f64,
    /// Write requests (`apiserver_request_total`, subresources included).
    pub(super) writes: f64,
}

/// [`Traffic`] from kube-apiserver's /metrics.
pub(super) fn apiserver_traffic(info: &ClusterInfo) -> Result<Traffic> {
    workload_traffic(&xtask_contender::probe::apiserver_metrics(info)?)
}

/// [`Traffic`] of one scrape.
fn workload_traffic(metrics: &str) -> Result<Traffic> {
    let resource = |s: &parse::Sample| {
        matches!(
            s.labels.get("resource").map(String::as_str),
            Some("deployments" | "replicasets" | "pods")
        )
    };
    let workload =
        |s: &parse::Sample| resource(s) && s.labels.get("subresource").is_none_or(String::is_empty);
    let writes = parse::parse_samples(metrics, "apiserver_request_total")?
        .iter()
        .filter(|s| resource(s) && s.labels.get("verb").is_some_and(|v| parse::is_write(v)))
        .map(|s| s.value)
        .sum();
    let watch = parse::parse_samples(metrics, "apiserver_watch_events_sizes_sum")?;
    let list = parse::parse_samples(metrics, "apiserver_response_sizes_sum")?;
    let is_list = |s: &parse::Sample| s.labels.get("verb").is_some_and(|v| v == "LIST");
    let bytes = watch
        .iter()
        .filter(|s| workload(s))
        .map(|s| s.value)
        .sum::<f64>()
        + list
            .iter()
            .filter(|s| workload(s) && is_list(s))
            .map(|s| s.value)
            .sum::<f64>();
    Ok(Traffic { bytes, writes })
}

/// [`apiserver_traffic`] once its bytes stood still for 2 s (nothing else is being sent, so
/// what follows is the measured side's); after 120 s without that, the last reading, with a
/// warning. A failed reading within the 120 s is retried.
pub(super) async fn quiet_traffic(info: &ClusterInfo) -> Result<Traffic> {
    let started = Instant::now();
    let mut last = apiserver_traffic(info)?;
    let mut still_since = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        // One failed scrape (a loaded apiserver) is not the end of the run: poll again, and
        // let the 120 s bound decide.
        let now = match apiserver_traffic(info) {
            Ok(now) => now,
            Err(e) if started.elapsed() <= Duration::from_secs(120) => {
                eprintln!("    warning: reading kube-apiserver's /metrics: {e:#}; again");
                still_since = Instant::now();
                continue;
            }
            Err(e) => return Err(e),
        };
        if now.bytes != last.bytes {
            last = now;
            still_since = Instant::now();
        } else if still_since.elapsed() >= Duration::from_secs(2) {
            return Ok(now);
        }
        if started.elapsed() > Duration::from_secs(120) {
            eprintln!(
                "    warning: kube-apiserver still sending workload objects after 120 s; \
                 bytes to ready include that traffic"
            );
            return Ok(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workload_traffic_adds_watch_events_lists_and_writes_of_the_three_resources() {
        let metrics = r#"
# HELP apiserver_watch_events_sizes Watch event size distribution in bytes
apiserver_watch_events_sizes_bucket{group="",resource="pods",version="v1",le="1024"} 3
apiserver_watch_events_sizes_sum{group="",resource="pods",version="v1"} 1000
apiserver_watch_events_sizes_sum{group="apps",resource="replicasets",version="v1"} 200
apiserver_watch_events_sizes_sum{group="coordination.k8s.io",resource="leases",version="v1"} 7000
apiserver_response_sizes_sum{component="apiserver",group="apps",resource="deployments",scope="cluster",subresource="",verb="LIST",version="v1"} 30
apiserver_response_sizes_sum{component="apiserver",group="apps",resource="deployments",scope="resource",subresource="",verb="GET",version="v1"} 4000
apiserver_response_sizes_sum{component="apiserver",group="",resource="pods",scope="namespace",subresource="log",verb="LIST",version="v1"} 5000
apiserver_request_total{code="201",component="apiserver",dry_run="",group="apps",resource="replicasets",scope="resource",subresource="",verb="POST",version="v1"} 2
apiserver_request_total{code="200",component="apiserver",dry_run="",group="apps",resource="deployments",scope="resource",subresource="status",verb="PUT",version="v1"} 1
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 9
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 40
"#;
        let t = workload_traffic(metrics).unwrap();
        assert_eq!(t.bytes, 1230.0);
        assert_eq!(t.writes, 3.0);
        assert!(workload_traffic("apiserver_response_sizes_sum{verb=\"LIST\"} x").is_err());
    }
}
