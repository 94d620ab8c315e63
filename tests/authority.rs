//! Every stock local client reaches the CRI socket, whatever HTTP/2
//! `:authority` it sends: none, an empty one, `localhost`, the socket's path
//! raw (grpc-java) or percent-encoded (grpc-go before 1.31-era kubelet and
//! cri-tools, gRPC C-core). Through a bare HTTP/2 client that sends each one
//! byte for byte, and through grpcio (Python) with default channel options;
//! for runtime.v1 and runtime.v1alpha2 alike.

mod common;

use std::path::Path;
use std::process::Command;

use common::raw_h2::RawClient;
use common::TestEnv;
use nidus::api::*;

/// The socket path as grpc-go escapes it: every byte but the unreserved ones.
fn percent_encoded(path: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    for &b in path.as_os_str().as_encoded_bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b);
        } else {
            out.extend(format!("%{b:02X}").bytes());
        }
    }
    out
}

/// Version, RunPodSandbox, PodSandboxStatus, StopPodSandbox and
/// RemovePodSandbox through one connection of `client`, on `package`.
async fn round_trip(env: &TestEnv, client: &mut RawClient, package: &str, pod_name: &str, what: &str) {
    let rpc = |method: &str| format!("/{package}.RuntimeService/{method}");
    let version: VersionResponse = client
        .call(&rpc("Version"), &VersionRequest { version: "v1".into() })
        .await
        .unwrap_or_else(|e| panic!("{what}: Version failed: {e:?}"));
    assert_eq!(version.runtime_name, "nidus", "{what}");
    let expected_api = if package == "runtime.v1" { "v1" } else { "v1alpha2" };
    assert_eq!(version.runtime_api_version, expected_api, "{what}");

    let pod: RunPodSandboxResponse = client
        .call(&rpc("RunPodSandbox"), &RunPodSandboxRequest { config: Some(env.pod(pod_name)), ..Default::default() })
        .await
        .unwrap_or_else(|e| panic!("{what}: RunPodSandbox failed: {e:?}"));
    let id = pod.pod_sandbox_id;
    let status: PodSandboxStatusResponse = client
        .call(&rpc("PodSandboxStatus"), &PodSandboxStatusRequest { pod_sandbox_id: id.clone(), verbose: false })
        .await
        .unwrap_or_else(|e| panic!("{what}: PodSandboxStatus failed: {e:?}"));
    assert_eq!(status.status.map(|s| s.state), Some(PodSandboxState::SandboxReady as i32), "{what}");
    let _: StopPodSandboxResponse = client
        .call(&rpc("StopPodSandbox"), &StopPodSandboxRequest { pod_sandbox_id: id.clone() })
        .await
        .unwrap_or_else(|e| panic!("{what}: StopPodSandbox failed: {e:?}"));
    let _: RemovePodSandboxResponse = client
        .call(&rpc("RemovePodSandbox"), &RemovePodSandboxRequest { pod_sandbox_id: id.clone() })
        .await
        .unwrap_or_else(|e| panic!("{what}: RemovePodSandbox failed: {e:?}"));
    // A bad request still gets its gRPC status through the layer.
    let missing: Result<PodSandboxStatusResponse, _> =
        client.call(&rpc("PodSandboxStatus"), &PodSandboxStatusRequest { pod_sandbox_id: id, verbose: false }).await;
    assert_eq!(missing.err().map(|(code, _)| code), Some(tonic::Code::NotFound as u32), "{what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_authority_a_local_client_sends_is_accepted_on_both_apis() {
    let mut env = TestEnv::new("authority");
    let _cri = env.start().await;
    let raw_path = env.socket.as_os_str().as_encoded_bytes().to_vec();
    let authorities: Vec<(&str, Option<Vec<u8>>)> = vec![
        ("no :authority", None),
        ("an empty :authority", Some(Vec::new())),
        ("localhost", Some(b"localhost".to_vec())),
        ("the raw socket path", Some(raw_path)),
        ("the percent-encoded socket path", Some(percent_encoded(&env.socket))),
        ("a unix: target", Some(format!("unix:{}", env.socket.display()).into_bytes())),
    ];
    for package in ["runtime.v1", "runtime.v1alpha2"] {
        for (i, (label, authority)) in authorities.iter().enumerate() {
            let what = format!("{package} with {label}");
            let mut client = RawClient::connect(&env.socket, authority.as_deref()).await;
            // Twice on one connection: the second request's header block
            // refers to the first one's through the HPACK dynamic table.
            for round in 0..2 {
                let pod_name = format!("raw-{}-{i}-{round}", package.replace('.', "-"));
                round_trip(&env, &mut client, package, &pod_name, &what).await;
            }
        }
    }
    let rewrites = env.daemon_log().matches("rewriting a client's :authority").count();
    // Per API: the raw path, the percent-encoded path, the unix: target and
    // the empty one, each once per connection.
    assert_eq!(rewrites, 8, "the layer rewrote exactly the authorities that are not hosts");
    env.assert_no_leftovers();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcio_with_default_channel_options_is_served_on_both_apis() {
    let mut env = TestEnv::new("grpcio");
    let _cri = env.start().await;
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let script = repo.join("tests/clients/grpcio_cri.py");
    for (package, proto_dir, api_version) in
        [("runtime.v1", "proto", "v1"), ("runtime.v1alpha2", "proto/v1alpha2", "v1alpha2")]
    {
        let pod_name = format!("grpcio-{api_version}");
        let out = Command::new("python3")
            .arg(&script)
            .arg(repo.join(proto_dir))
            .arg(package)
            .arg(&env.socket)
            .arg(&pod_name)
            .arg(env.base.join("logs").join(&pod_name))
            .output()
            .expect("python3 runs (make test installs grpcio-tools)");
        assert!(
            out.status.success(),
            "grpcio on {package} failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let got: serde_json::Value = serde_json::from_slice(&out.stdout).expect("the client prints JSON");
        assert_eq!(got["runtime_name"], "nidus", "{package}: {got}");
        assert_eq!(got["runtime_api_version"], api_version, "{package}: {got}");
        assert_eq!(got["pod_state"], "SANDBOX_READY", "{package}: {got}");
        assert_eq!(got["pods_left"], 0, "{package}: {got}");
    }
    env.assert_no_leftovers();
}

/// A header block that names one 4 KiB dynamic-table entry `refs` times:
/// `refs` bytes on the wire, `refs` × 4 KiB decoded.
fn hpack_bomb(refs: usize, authority: &[u8]) -> Vec<u8> {
    let mut block = Vec::new();
    // Indexed :method POST (3), :scheme http (6), then a literal :path.
    block.extend([0x83, 0x86]);
    let literal = |block: &mut Vec<u8>, first: u8, name_index: u8, value: &[u8]| {
        block.push(first | name_index);
        block.push(0x7f);
        let mut rest = value.len() - 127;
        while rest >= 128 {
            block.push((rest % 128) as u8 | 0x80);
            rest /= 128;
        }
        block.push(rest as u8);
        block.extend_from_slice(value);
    };
    let path = b"/runtime.v1.RuntimeService/Version".repeat(4);
    literal(&mut block, 0x00, 4, &path);
    // A literal with incremental indexing of :authority (name index 1): a
    // 4,000-byte value, the dynamic table's entry 62.
    let mut value = authority.to_vec();
    value.resize(4000, b'a');
    literal(&mut block, 0x40, 1, &value);
    block.extend(std::iter::repeat_n(0x80 | 62, refs));
    block
}

/// The most resident memory the daemon ever had (VmHWM), in KiB: a block
/// decoded and freed between two looks still shows.
fn daemon_peak_rss_kib(env: &TestEnv) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", env.daemon_pid().unwrap())).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_hpack_bomb_costs_the_daemon_no_memory_and_nothing_else_is_refused() {
    let mut env = TestEnv::new("hpackbomb");
    let _cri = env.start().await;
    let rss_before = daemon_peak_rss_kib(&env);
    // The socket's path (the layer decodes such blocks to rewrite them) and
    // a valid host: 60,000 references (60 KB sent, 240 MB decoded), then
    // 65,536 (a block over the layer's bound, for the server to refuse).
    for (authority, refs) in [(env.socket.as_os_str().as_encoded_bytes(), 60_000), (&b"localhost"[..], 65_536)] {
        for _ in 0..5 {
            let mut client = RawClient::connect(&env.socket, None).await;
            assert!(client.send_header_block(&hpack_bomb(refs, authority)).await, "the bomb was answered as a request");
        }
    }
    let peak = daemon_peak_rss_kib(&env);
    eprintln!("daemon peak RSS {rss_before} KiB before, {peak} KiB after the bombs");
    assert!(peak < rss_before + (8 << 10), "an HPACK bomb took the daemon from {rss_before} to {peak} KiB");
    // Ordinary clients are served as before, through the layer.
    let mut client = RawClient::connect(&env.socket, Some(env.socket.as_os_str().as_encoded_bytes())).await;
    round_trip(&env, &mut client, "runtime.v1", "after", "after the bombs").await;
}
