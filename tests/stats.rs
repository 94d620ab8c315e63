//! What the stats RPCs cost at 100 containers, through the socket (a
//! measurement run by hand, not an assertion).

mod common;

use std::fs;
use std::time::{Duration, Instant};

use common::client::container_config;
use common::TestEnv;
use nidus::api::*;

/// Cpu time (user + system, all threads) a process has used, in nanoseconds.
fn cpu_ns(pid: i32) -> u64 {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).expect("the daemon's /proc/PID/stat");
    let fields: Vec<u64> =
        stat.rsplit_once(')').expect("comm").1.split_whitespace().map(|f| f.parse().unwrap_or(0)).collect();
    // utime and stime are fields 14 and 15 (fields[0] is field 3), in 10 ms ticks.
    (fields[11] + fields[12]) * 10_000_000
}

/// Wall time per call (p50, p90, max) and the daemon's cpu time per call.
struct Cost {
    wall_ms: Vec<f64>,
    daemon_cpu_ms: f64,
}

impl Cost {
    fn line(mut self, what: &str) -> String {
        self.wall_ms.sort_by(f64::total_cmp);
        let at = |q: f64| self.wall_ms[((self.wall_ms.len() - 1) as f64 * q).round() as usize];
        format!(
            "{what}: wall p50 {:.2} ms, p90 {:.2} ms, max {:.2} ms; daemon cpu {:.2} ms/call ({} calls)",
            at(0.5),
            at(0.9),
            at(1.0),
            self.daemon_cpu_ms,
            self.wall_ms.len()
        )
    }
}

async fn measure<F, Fut>(daemon: i32, calls: usize, mut call: F) -> Cost
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = usize>,
{
    let mut wall_ms = Vec::with_capacity(calls);
    let cpu0 = cpu_ns(daemon);
    for _ in 0..calls {
        let t = Instant::now();
        let n = call().await;
        wall_ms.push(t.elapsed().as_secs_f64() * 1000.0);
        assert!(n > 0, "the call answered nothing");
        // kubelet polls; back-to-back calls would measure a different thing.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let daemon_cpu_ms = (cpu_ns(daemon) - cpu0) as f64 / 1e6 / calls as f64;
    Cost { wall_ms, daemon_cpu_ms }
}

/// 20 pods of 5 idle containers; ListContainerStats, ListPodSandboxStats and
/// ListPodSandboxMetrics timed over 100 calls each. Run with
/// `cargo test --test stats -- --ignored --nocapture`.
#[tokio::test]
#[ignore = "a measurement, run by hand: prints figures, asserts nothing about speed"]
async fn stats_rpcs_cost_at_100_containers() {
    let mut env = TestEnv::new("statscost");
    let mut cri = env.start().await;
    let image = env.import_busybox(&mut cri).await;
    let mut pods = Vec::new();
    for p in 0..20 {
        let pod = env.pod(&format!("cost{p}"));
        let pod_id = cri.run_pod(pod.clone()).await.unwrap();
        for c in 0..5 {
            cri.run_container(&pod_id, &pod, container_config(&format!("c{c}"), &image, &["sleep", "100000"])).await;
        }
        pods.push(pod_id);
    }
    assert_eq!(cri.list_container_stats(None).await.len(), 100);
    let daemon = env.daemon_pid().expect("the daemon runs");
    const CALLS: usize = 100;

    let containers = measure(daemon, CALLS, || {
        let mut cri = cri.clone();
        async move { cri.list_container_stats(None).await.len() }
    })
    .await;
    let pod_stats = measure(daemon, CALLS, || {
        let mut cri = cri.clone();
        async move { cri.list_pod_stats(None).await.len() }
    })
    .await;
    let metrics = measure(daemon, CALLS, || {
        let mut cri = cri.clone();
        async move {
            let pods = cri
                .runtime
                .list_pod_sandbox_metrics(ListPodSandboxMetricsRequest {})
                .await
                .expect("ListPodSandboxMetrics")
                .into_inner()
                .pod_metrics;
            pods.iter().map(|p| p.container_metrics.len()).sum()
        }
    })
    .await;
    let sizes = {
        use prost::Message;
        let c = ListContainerStatsResponse { stats: cri.list_container_stats(None).await }.encoded_len();
        let m = cri
            .runtime
            .list_pod_sandbox_metrics(ListPodSandboxMetricsRequest {})
            .await
            .unwrap()
            .into_inner()
            .encoded_len();
        format!("answer sizes: ListContainerStats {c} bytes, ListPodSandboxMetrics {m} bytes")
    };
    eprintln!("100 containers in 20 pods");
    eprintln!("{}", containers.line("ListContainerStats"));
    eprintln!("{}", pod_stats.line("ListPodSandboxStats"));
    eprintln!("{}", metrics.line("ListPodSandboxMetrics"));
    eprintln!("{sizes}");

    for pod_id in pods {
        cri.remove_pod(&pod_id).await.unwrap();
    }
    env.assert_no_leftovers();
}
