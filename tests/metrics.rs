//! The Prometheus endpoint, as an operator's scraper sees it: `[metrics]
//! address` turns it on; `/metrics` then shows the CRI calls by call and
//! code, pods and containers by state, OOM kills, pulls, streaming sessions
//! and pod network set-up, each moved by what the test did through the
//! real socket, a real registry and the built-in network. Off by default.

mod common;
#[allow(dead_code)]
mod registry;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use common::client::{container_config, image_spec, resources};
use common::images::{self, Compression, ImageDef, LayerTar};
use common::spdy::SpdyClient;
use common::TestEnv;
use nidus::api::*;
use registry::Registry;

const METRICS: &str = "127.0.0.1:9464";

/// A GET of `path` on the endpoint, from the daemon's network namespace:
/// the status line and the body (None when the connection closes unanswered).
fn get(env: &TestEnv, path: &str) -> Option<(String, String)> {
    let mut tcp = common::spdy::connect_in_netns(&env.netns, METRICS).into_std().expect("a std stream");
    tcp.set_nonblocking(false).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    tcp.write_all(format!("GET {path} HTTP/1.1\r\nHost: {METRICS}\r\n\r\n").as_bytes()).ok()?;
    let mut answer = String::new();
    tcp.read_to_string(&mut answer).ok()?;
    let (head, body) = answer.split_once("\r\n\r\n")?;
    Some((head.lines().next().unwrap_or_default().to_string(), body.to_string()))
}

fn scrape(env: &TestEnv) -> String {
    let (status, body) = get(env, "/metrics").expect("an answer from /metrics");
    assert!(status.contains("200"), "{status}\n{body}");
    body
}

/// The value of the series `name{labels}` (exactly as rendered), or 0 when absent.
fn value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')))
        .map(|v| v.trim().parse().expect("a number"))
        .unwrap_or(0.0)
}

/// Scrapes until `check` holds (counters that move after the call answered).
async fn scrape_until(env: &TestEnv, what: &str, check: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        // A connection refused for the cap (while earlier ones close) is tried again.
        let text = match get(env, "/metrics") {
            Some((status, body)) if status.contains("200") => body,
            _ => String::new(),
        };
        if !text.is_empty() && check(&text) {
            return text;
        }
        assert!(Instant::now() < deadline, "{what} never showed:\n{text}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn metrics_env(label: &str) -> TestEnv {
    let env = TestEnv::new(label);
    let mut config = std::fs::read_to_string(env.default_config()).unwrap();
    config = config.replace("builtin = \"off\"", "builtin = \"auto\"\npod_cidr = \"10.96.7.0/24\"\nmasquerade = false");
    config.push_str(&format!("[metrics]\naddress = \"{METRICS}\"\nmax_connections = 2\n"));
    std::fs::write(env.default_config(), config).unwrap();
    env
}

#[tokio::test]
async fn the_metrics_endpoint_shows_what_the_node_did() {
    let mut env = metrics_env("metrics");
    let registry = Registry::start(&env, "main", 5000, None);
    let layout = env.base.join("layout");
    let def = ImageDef {
        name: None,
        layers: vec![(images::busybox_base_layer(), Compression::Gzip), (LayerTar::new().finish(), Compression::None)],
        config: serde_json::json!({"Env": ["PATH=/bin"], "Cmd": ["sh"]}),
    };
    images::write_oci_layout(&layout, &def);
    registry.push(&layout, "test/app:v1", None, None);
    let mut cri = env.start().await;

    // Before anything: the families are there, the call counters empty.
    let text = scrape(&env);
    for family in
        ["nidus_cri_requests", "nidus_pods", "nidus_containers", "nidus_container_oom_kills", "nidus_image_pull_bytes"]
    {
        assert!(text.contains(&format!("# TYPE {family} ")), "{family} is declared:\n{text}");
    }
    assert!(text.ends_with("# EOF\n"), "OpenMetrics text ends with # EOF:\n{text}");

    // A pull, a pod (built-in network), a running container, an OOM kill.
    let pulled = cri
        .images
        .pull_image(PullImageRequest { image: Some(image_spec("127.0.0.1:5000/test/app:v1")), ..Default::default() })
        .await;
    let image = pulled.expect("PullImage").into_inner().image_ref;
    let pod = env.pod("metrics");
    let pod_id = cri.run_pod(pod.clone()).await.expect("RunPodSandbox");
    let sleeper = cri.run_container(&pod_id, &pod, container_config("sleeper", &image, &["sleep", "600"])).await;
    let mut hog = container_config("hog", &image, &["dd", "if=/dev/zero", "of=/dev/null", "bs=200M", "count=1"]);
    let r = resources(&mut hog);
    (r.memory_limit_in_bytes, r.memory_swap_limit_in_bytes) = (64 << 20, 64 << 20);
    let hog = cri.run_container(&pod_id, &pod, hog).await;
    assert_eq!(cri.wait_exited(&hog, 60).await.reason, "OOMKilled");
    // A failed call of two kinds.
    assert_eq!(cri.container_status("0123456789abcdef").await.unwrap_err().code(), tonic::Code::NotFound);
    let empty = cri.runtime.start_container(StartContainerRequest { container_id: String::new() }).await;
    assert_eq!(empty.unwrap_err().code(), tonic::Code::InvalidArgument);
    // An exec session over SPDY.
    let exec = ExecRequest {
        container_id: sleeper.clone(),
        cmd: vec!["echo".into(), "hi".into()],
        stdout: true,
        ..Default::default()
    };
    let url = cri.runtime.exec(exec).await.expect("Exec").into_inner().url;
    let mut client = SpdyClient::connect(&url, &env.netns, &["v4.channel.k8s.io"]).await.expect("upgrade");
    let error = client.open(&[("streamType", "error")]).await;
    let stdout = client.open(&[("streamType", "stdout")]).await;
    assert_eq!(client.read_to_end(stdout, Duration::from_secs(20)).await, b"hi\n");
    client.read_to_end(error, Duration::from_secs(20)).await;
    drop(client);

    let text = scrape_until(&env, "the session's end", |t| {
        value(t, r#"nidus_streaming_sessions_open{kind="exec"}"#) == 0.0
            && value(t, r#"nidus_streaming_sessions_total{kind="exec"}"#) == 1.0
    })
    .await;
    let calls =
        |call: &str, code: &str| value(&text, &format!(r#"nidus_cri_requests_total{{call="{call}",code="{code}"}}"#));
    assert_eq!(calls("RunPodSandbox", "OK"), 1.0, "{text}");
    assert_eq!(calls("CreateContainer", "OK"), 2.0, "{text}");
    assert_eq!(calls("PullImage", "OK"), 1.0, "{text}");
    assert_eq!(calls("ContainerStatus", "NotFound"), 1.0, "{text}");
    assert_eq!(calls("StartContainer", "InvalidArgument"), 1.0, "{text}");
    assert_eq!(
        value(&text, r#"nidus_cri_request_duration_seconds_count{call="RunPodSandbox",code="OK"}"#),
        1.0,
        "a duration per call: {text}"
    );
    assert_eq!(value(&text, r#"nidus_pods{state="ready"}"#), 1.0, "{text}");
    assert_eq!(value(&text, r#"nidus_containers{state="running"}"#), 1.0, "{text}");
    assert_eq!(value(&text, r#"nidus_containers{state="exited"}"#), 1.0, "{text}");
    assert_eq!(value(&text, "nidus_container_oom_kills_total"), 1.0, "{text}");
    assert!(value(&text, "nidus_image_pull_bytes_total") > 100_000.0, "the layers' bytes: {text}");
    assert_eq!(value(&text, r#"nidus_image_pull_duration_seconds_count{outcome="ok"}"#), 1.0, "{text}");
    assert_eq!(
        value(&text, r#"nidus_pod_network_setup_duration_seconds_count{network="builtin",outcome="ok"}"#),
        1.0,
        "{text}"
    );

    // Only /metrics; and no more connections at once than configured.
    assert!(get(&env, "/").expect("an answer").0.contains("404"));
    let idle: Vec<_> = (0..2).map(|_| common::spdy::connect_in_netns(&env.netns, METRICS)).collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(get(&env, "/metrics").is_none(), "a third connection is closed unanswered");
    drop(idle);
    scrape_until(&env, "a scrape once the idle connections left", |_| true).await;

    for id in [&sleeper, &hog] {
        cri.stop_container(id, 0).await.unwrap();
        cri.remove_container(id).await.unwrap();
    }
    cri.stop_pod(&pod_id).await.unwrap();
    cri.remove_pod(&pod_id).await.unwrap();
    let text = scrape(&env);
    assert_eq!(value(&text, r#"nidus_pods{state="ready"}"#), 0.0, "{text}");
    assert_eq!(value(&text, "nidus_container_oom_kills_total"), 1.0, "a counter stays: {text}");
    env.assert_no_leftovers();
}

#[tokio::test]
async fn without_an_address_nothing_listens() {
    let mut env = TestEnv::new("nometrics");
    let mut cri = env.start().await;
    cri.version().await.expect("Version");
    let connected = std::thread::scope(|s| {
        s.spawn(|| {
            let ns = std::fs::File::open(format!("/run/netns/{}", env.netns)).unwrap();
            nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
            std::net::TcpStream::connect(METRICS).is_ok()
        })
        .join()
        .unwrap()
    });
    assert!(!connected, "no metrics endpoint unless configured");
    assert!(!env.daemon_log().contains("metrics endpoint listening"));
}
