//! Prometheus metrics: the series nidus exposes and `Metrics`, the handle
//! the rest of the daemon records into. Off unless `[metrics] address` is
//! set; then `server` serves them at `/metrics` in the OpenMetrics text
//! format. Recording costs a branch when off, and when on one counter
//! increment and one histogram record on a series found under a read lock.
//! Label values are fixed sets (CRI call names from the protos, gRPC code
//! names, a few kinds): nothing a client sends can make a new series.
//! Pods and containers by state are read when scraped, not kept.

pub(crate) mod server;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

/// Every method name of the CRI services (runtime.v1 and v1alpha2), read
/// from the protos at build time.
const CRI_CALLS: &[&str] = include!(concat!(env!("OUT_DIR"), "/cri_calls.rs"));

/// The label of a call that is not a CRI method (answered Unimplemented).
const OTHER_CALL: &str = "other";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    call: &'static str,
    code: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NetworkLabels {
    network: &'static str,
    outcome: &'static str,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// How many pods and containers are in each state now (read at a scrape).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct StateCounts {
    pub(crate) pods: Vec<(&'static str, i64)>,
    pub(crate) containers: Vec<(&'static str, i64)>,
}

/// Where the daemon records what happens; cheap to clone. The default is off.
#[derive(Clone, Default)]
pub(crate) struct Metrics(Option<Arc<Series>>);

struct Series {
    registry: Registry,
    calls: Family<CallLabels, Counter>,
    call_seconds: Histograms<CallLabels>,
    pods: Family<StateLabels, Gauge>,
    containers: Family<StateLabels, Gauge>,
    oom_kills: Counter,
    pull_bytes: Counter,
    pull_seconds: Histograms<OutcomeLabels>,
    sessions: Family<KindLabels, Counter>,
    sessions_open: Family<KindLabels, Gauge>,
    network_seconds: Histograms<NetworkLabels>,
    /// One scrape at a time sets the state gauges and encodes.
    scrape: Mutex<()>,
}

fn call_buckets() -> Histogram {
    // 100 µs … about 52 s.
    Histogram::new(exponential_buckets(0.0001, 2.0, 20))
}

fn long_buckets() -> Histogram {
    // 10 ms … about 1.4 h (a large pull).
    Histogram::new(exponential_buckets(0.01, 2.0, 20))
}

impl Metrics {
    /// Metrics that record nothing.
    pub(crate) fn off() -> Self {
        Self(None)
    }

    /// Metrics that record, with every series registered.
    pub(crate) fn on() -> Self {
        let mut registry = Registry::with_prefix("nidus");
        let calls = Family::<CallLabels, Counter>::default();
        let call_seconds = Histograms::<CallLabels>::new_with_constructor(call_buckets as fn() -> Histogram);
        let pods = Family::<StateLabels, Gauge>::default();
        let containers = Family::<StateLabels, Gauge>::default();
        let oom_kills = Counter::default();
        let pull_bytes = Counter::default();
        let pull_seconds = Histograms::<OutcomeLabels>::new_with_constructor(long_buckets as fn() -> Histogram);
        let sessions = Family::<KindLabels, Counter>::default();
        let sessions_open = Family::<KindLabels, Gauge>::default();
        let network_seconds = Histograms::<NetworkLabels>::new_with_constructor(call_buckets as fn() -> Histogram);
        registry.register("cri_requests", "CRI calls answered, by call and gRPC code", calls.clone());
        registry.register_with_unit(
            "cri_request_duration",
            "Time to answer a CRI call, by call and gRPC code",
            Unit::Seconds,
            call_seconds.clone(),
        );
        registry.register("pods", "Pod sandboxes by state", pods.clone());
        registry.register("containers", "Containers by state", containers.clone());
        registry.register(
            "container_oom_kills",
            "Containers whose process the kernel killed out of memory",
            oom_kills.clone(),
        );
        registry.register_with_unit(
            "image_pull",
            "Bytes fetched from registries by image pulls",
            Unit::Bytes,
            pull_bytes.clone(),
        );
        registry.register_with_unit(
            "image_pull_duration",
            "Time an image pull took, by outcome",
            Unit::Seconds,
            pull_seconds.clone(),
        );
        registry.register("streaming_sessions", "Exec, attach and port-forward sessions begun", sessions.clone());
        registry.register(
            "streaming_sessions_open",
            "Exec, attach and port-forward sessions open now",
            sessions_open.clone(),
        );
        registry.register_with_unit(
            "pod_network_setup_duration",
            "Time to attach a pod to its network, by network (cni, builtin) and outcome",
            Unit::Seconds,
            network_seconds.clone(),
        );
        Self(Some(Arc::new(Series {
            registry,
            calls,
            call_seconds,
            pods,
            containers,
            oom_kills,
            pull_bytes,
            pull_seconds,
            sessions,
            sessions_open,
            network_seconds,
            scrape: Mutex::new(()),
        })))
    }

    pub(crate) fn is_on(&self) -> bool {
        self.0.is_some()
    }

    /// A CRI call answered: `call` is its label (`call_label`), `code` its status.
    pub(crate) fn call_answered(&self, call: &'static str, code: tonic::Code, elapsed: Duration) {
        let Some(series) = &self.0 else { return };
        let labels = CallLabels { call, code: code_label(code) };
        series.calls.get_or_create(&labels).inc();
        series.call_seconds.get_or_create(&labels).observe(elapsed.as_secs_f64());
    }

    /// A container's process was killed by the kernel for want of memory.
    pub(crate) fn oom_killed(&self) {
        if let Some(series) = &self.0 {
            series.oom_kills.inc();
        }
    }

    /// An image pull ended after fetching `bytes`.
    pub(crate) fn pull_ended(&self, succeeded: bool, bytes: u64, elapsed: Duration) {
        let Some(series) = &self.0 else { return };
        series.pull_bytes.inc_by(bytes);
        let outcome = if succeeded { "ok" } else { "failed" };
        series.pull_seconds.get_or_create(&OutcomeLabels { outcome }).observe(elapsed.as_secs_f64());
    }

    /// A streaming session of `kind` (exec, attach, portforward) begins; it
    /// counts as open until the guard is dropped.
    pub(crate) fn session_begun(&self, kind: &'static str) -> OpenSession {
        if let Some(series) = &self.0 {
            series.sessions.get_or_create(&KindLabels { kind }).inc();
            series.sessions_open.get_or_create(&KindLabels { kind }).inc();
        }
        OpenSession { metrics: self.clone(), kind }
    }

    /// A pod's network attach (`network`: cni or builtin) ended.
    pub(crate) fn network_set_up(&self, network: &'static str, succeeded: bool, elapsed: Duration) {
        let Some(series) = &self.0 else { return };
        let outcome = if succeeded { "ok" } else { "failed" };
        series.network_seconds.get_or_create(&NetworkLabels { network, outcome }).observe(elapsed.as_secs_f64());
    }

    /// Every series as OpenMetrics text, with the state gauges set from `states`.
    pub(crate) fn render(&self, states: &StateCounts) -> String {
        let Some(series) = &self.0 else { return String::new() };
        let _one = series.scrape.lock().unwrap_or_else(|p| p.into_inner());
        for (family, counts) in [(&series.pods, &states.pods), (&series.containers, &states.containers)] {
            family.clear();
            for (state, n) in counts {
                family.get_or_create(&StateLabels { state }).set(*n);
            }
        }
        let mut text = String::new();
        if prometheus_client::encoding::text::encode(&mut text, &series.registry).is_err() {
            text.clear();
        }
        text
    }
}

/// An open streaming session, as counted by `Metrics`.
pub(crate) struct OpenSession {
    metrics: Metrics,
    kind: &'static str,
}

impl Drop for OpenSession {
    fn drop(&mut self) {
        if let Some(series) = &self.metrics.0 {
            series.sessions_open.get_or_create(&KindLabels { kind: self.kind }).dec();
        }
    }
}

/// `/runtime.v1.RuntimeService/CreateContainer` → `CreateContainer`; any
/// path that is no CRI method → `other`.
pub(crate) fn call_label(path: &str) -> &'static str {
    let method = path.rsplit('/').next().unwrap_or_default();
    let is_cri_service = path.starts_with("/runtime.v1.") || path.starts_with("/runtime.v1alpha2.");
    match CRI_CALLS.iter().find(|c| **c == method) {
        Some(call) if is_cri_service => call,
        _ => OTHER_CALL,
    }
}

/// The gRPC code's name, as gRPC spells it.
fn code_label(code: tonic::Code) -> &'static str {
    use tonic::Code;
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "Canceled",
        Code::Unknown => "Unknown",
        Code::InvalidArgument => "InvalidArgument",
        Code::DeadlineExceeded => "DeadlineExceeded",
        Code::NotFound => "NotFound",
        Code::AlreadyExists => "AlreadyExists",
        Code::PermissionDenied => "PermissionDenied",
        Code::ResourceExhausted => "ResourceExhausted",
        Code::FailedPrecondition => "FailedPrecondition",
        Code::Aborted => "Aborted",
        Code::OutOfRange => "OutOfRange",
        Code::Unimplemented => "Unimplemented",
        Code::Internal => "Internal",
        Code::Unavailable => "Unavailable",
        Code::DataLoss => "DataLoss",
        Code::Unauthenticated => "Unauthenticated",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_labels_come_from_a_fixed_set() {
        assert_eq!(call_label("/runtime.v1.RuntimeService/CreateContainer"), "CreateContainer");
        assert_eq!(call_label("/runtime.v1alpha2.ImageService/PullImage"), "PullImage");
        assert_eq!(call_label("/runtime.v1.RuntimeService/NoSuchCall"), OTHER_CALL);
        assert_eq!(call_label("/other.Service/CreateContainer"), OTHER_CALL);
        assert!(CRI_CALLS.contains(&"GetContainerEvents") && CRI_CALLS.contains(&"ImageFsInfo"));
    }

    #[test]
    fn off_records_and_renders_nothing() {
        let metrics = Metrics::off();
        metrics.call_answered("Version", tonic::Code::Ok, Duration::from_millis(1));
        drop(metrics.session_begun("exec"));
        assert_eq!(metrics.render(&StateCounts::default()), "");
    }

    #[test]
    fn rendered_series_carry_what_was_recorded() {
        let metrics = Metrics::on();
        metrics.call_answered("Version", tonic::Code::Ok, Duration::from_millis(1));
        metrics.call_answered("Version", tonic::Code::NotFound, Duration::from_millis(1));
        let open = metrics.session_begun("exec");
        let states = StateCounts { pods: vec![("ready", 2)], containers: vec![("running", 3), ("exited", 1)] };
        let text = metrics.render(&states);
        assert!(text.contains(r#"nidus_cri_requests_total{call="Version",code="OK"} 1"#), "{text}");
        assert!(text.contains(r#"nidus_cri_requests_total{call="Version",code="NotFound"} 1"#), "{text}");
        assert!(text.contains(r#"nidus_pods{state="ready"} 2"#), "{text}");
        assert!(text.contains(r#"nidus_containers{state="exited"} 1"#), "{text}");
        assert!(text.contains(r#"nidus_streaming_sessions_open{kind="exec"} 1"#), "{text}");
        drop(open);
        let text = metrics.render(&StateCounts { pods: vec![], containers: vec![] });
        assert!(text.contains(r#"nidus_streaming_sessions_open{kind="exec"} 0"#), "{text}");
        assert!(!text.contains("nidus_pods{"), "a state with no pod left is not shown: {text}");
    }
}
