//! Pod networking through the socket, with Debian's CNI plugins (bridge,
//! host-local, portmap) inside each test's own network namespace: pod
//! addresses, pod-to-pod TCP, host ports, DEL releasing addresses, daemon
//! restart and simulated reboot, a failed ADD leaving nothing, NetworkReady
//! following the configuration directory; the built-in network's masquerade
//! toward a namespace standing for the world beyond the node.

mod common;

use std::fs;
use std::path::PathBuf;
use std::time::Duration;

use common::client::container_config;
use common::{host, Cri, TestEnv};
use nidus::api::*;

const PLUGINS: &str = "/usr/lib/cni";
const SUBNET_PREFIX: &str = "10.99.0.";
const GATEWAY: &str = "10.99.0.1";

/// A test environment whose daemon reads `net.d` in the test directory,
/// finds plugins in Debian's directory (then in `cni-bin` of the test
/// directory, for plugins a test installs late), and has the built-in network
/// `builtin` (without its masquerade, which a test turns on itself).
fn net_env(label: &str, builtin: &str) -> TestEnv {
    net_env_with(label, &format!("builtin = \"{builtin}\"\npod_cidr = \"10.98.0.0/24\"\nmasquerade = false\n"))
}

/// The same, with `settings` (TOML lines) for the rest of `[network]`.
fn net_env_with(label: &str, settings: &str) -> TestEnv {
    let env = TestEnv::new(label);
    let config = env.base.join("nidus.toml");
    fs::create_dir_all(conf_dir(&env)).unwrap();
    fs::write(
        &config,
        format!(
            "[network]\ncni_conf_dir = \"{}\"\ncni_bin_dirs = [\"{PLUGINS}\", \"{}\"]\n{settings}",
            conf_dir(&env).display(),
            late_plugin_dir(&env).display()
        ),
    )
    .unwrap();
    env.with_args(&["--config", config.to_str().unwrap()])
}

fn conf_dir(env: &TestEnv) -> PathBuf {
    env.base.join("net.d")
}

fn late_plugin_dir(env: &TestEnv) -> PathBuf {
    env.base.join("cni-bin")
}

fn ipam_dir(env: &TestEnv) -> PathBuf {
    env.base.join("ipam")
}

/// bridge + host-local (its leases in the test directory) + portmap.
fn bridge_conflist(env: &TestEnv) -> String {
    serde_json::json!({
        "cniVersion": "1.0.0",
        "name": "testnet",
        "plugins": [
            {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.99.0.0/24", "gateway": GATEWAY}]],
                      "dataDir": ipam_dir(env).display().to_string()}},
            {"type": "portmap", "capabilities": {"portMappings": true}}
        ]
    })
    .to_string()
}

fn write_conflist(env: &TestEnv, name: &str, text: &str) {
    fs::write(conf_dir(env).join(name), text).unwrap();
}

/// Addresses host-local has leased.
fn leases(env: &TestEnv) -> Vec<String> {
    let mut found: Vec<String> = fs::read_dir(ipam_dir(env).join("testnet"))
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(SUBNET_PREFIX))
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found
}

/// veth interfaces in the daemon's network namespace.
fn veths(env: &TestEnv) -> Vec<String> {
    host::run("ip", &["-n", &env.netns, "-o", "link", "show", "type", "veth"])
        .lines()
        .filter_map(|l| l.split(": ").nth(1).map(|n| n.split('@').next().unwrap_or(n).to_string()))
        .collect()
}

/// portmap's per-pod DNAT chains in the daemon's network namespace.
fn hostport_chains(env: &TestEnv) -> Vec<String> {
    let out = std::process::Command::new("nsenter")
        .args([format!("--net=/run/netns/{}", env.netns).as_str(), "--", "iptables-save", "-t", "nat"])
        .output()
        .expect("iptables-save");
    String::from_utf8_lossy(&out.stdout).lines().filter(|l| l.starts_with(":CNI-DN-")).map(str::to_string).collect()
}

/// The DNAT rules of the built-in network's host-port table (none when the
/// table is not there).
fn builtin_hostport_rules(env: &TestEnv) -> Vec<String> {
    let out = std::process::Command::new("nsenter")
        .args([
            format!("--net=/run/netns/{}", env.netns).as_str(),
            "--",
            "nft",
            "list",
            "table",
            "inet",
            "nidus_hp_nidus0",
        ])
        .output()
        .expect("nft");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(" dnat ip to ") || l.contains(" dnat ip6 to "))
        .map(|l| l.trim().to_string())
        .collect()
}

fn cache_entries(env: &TestEnv) -> Vec<PathBuf> {
    fs::read_dir(env.root.join("network").join("attachments"))
        .map(|entries| entries.flatten().map(|e| e.path()).collect())
        .unwrap_or_default()
}

async fn network_ready(cri: &mut Cri) -> RuntimeCondition {
    let status = cri.runtime.status(StatusRequest { verbose: false }).await.expect("Status").into_inner();
    status.status.unwrap().conditions.into_iter().find(|c| c.r#type == "NetworkReady").expect("NetworkReady")
}

async fn pod_ips(cri: &mut Cri, id: &str) -> Vec<String> {
    let network = cri.pod_status(id).await.unwrap().status.unwrap().network.unwrap();
    let mut ips = vec![network.ip];
    ips.extend(network.additional_ips.into_iter().map(|p| p.ip));
    ips.retain(|ip| !ip.is_empty());
    ips
}

/// Runs a pod whose container serves `body` over HTTP on port 8080.
async fn web_pod(env: &TestEnv, cri: &mut Cri, image: &str, name: &str, host_port: Option<i32>) -> (String, String) {
    let mut config = env.pod(name);
    if let Some(host_port) = host_port {
        config.port_mappings = vec![PortMapping {
            protocol: Protocol::Tcp as i32,
            container_port: 8080,
            host_port,
            host_ip: String::new(),
        }];
    }
    let id = cri.run_pod(config.clone()).await.expect("RunPodSandbox");
    let script = format!("mkdir -p /tmp/www && echo hello-from-{name} > /tmp/www/index.html && exec busybox httpd -f -p 8080 -h /tmp/www");
    let container = cri.run_container(&id, &config, container_config("web", image, &["sh", "-c", &script])).await;
    (id, container)
}

/// The body `ip`:8080 serves, fetched from inside a container over TCP with
/// busybox nc (retrying while the server starts).
async fn fetch_in(cri: &mut Cri, container: &str, ip: &str) -> String {
    let script = format!("printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 3 {ip} 8080");
    let mut last = String::new();
    for _ in 0..50 {
        let out = cri.exec(container, &["sh", "-c", &script], 10).await.expect("ExecSync");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.exit_code == 0 && text.contains("200 OK") {
            return text.rsplit("\r\n\r\n").next().unwrap_or_default().to_string();
        }
        last = format!("{text}{}", String::from_utf8_lossy(&out.stderr));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no answer from {ip}:8080: {last}");
}

async fn remove_all(cri: &mut Cri) {
    for pod in cri.list_pods(None).await {
        cri.stop_pod(&pod.id).await.expect("StopPodSandbox");
        cri.remove_pod(&pod.id).await.expect("RemovePodSandbox");
    }
}

fn assert_no_network_leftovers(env: &TestEnv, after: &str) {
    assert_eq!(leases(env), Vec::<String>::new(), "address leases left after {after}");
    assert_eq!(veths(env), Vec::<String>::new(), "veths left after {after}");
    assert_eq!(hostport_chains(env), Vec::<String>::new(), "host port rules left after {after}");
    assert_eq!(cache_entries(env), Vec::<PathBuf>::new(), "network cache entries left after {after}");
}

/// Two pods serving their names over HTTP (a with host port 18080): each
/// has one address of `prefix`, leased (`leases`), on its eth0, and each
/// reaches the other over TCP.
struct TwoPods {
    a: String,
    web_a: String,
    web_b: String,
    ip_b: Vec<String>,
}

async fn two_web_pods_talking(
    env: &TestEnv,
    cri: &mut Cri,
    image: &str,
    prefix: &str,
    leases: fn(&TestEnv) -> Vec<String>,
) -> TwoPods {
    let (a, web_a) = web_pod(env, cri, image, "a", Some(18080)).await;
    let (b, web_b) = web_pod(env, cri, image, "b", None).await;
    let ip_a = pod_ips(cri, &a).await;
    let ip_b = pod_ips(cri, &b).await;
    assert_eq!(ip_a.len(), 1, "{ip_a:?}");
    assert!(ip_a[0].starts_with(prefix) && ip_b[0].starts_with(prefix), "{ip_a:?} {ip_b:?}");
    assert_ne!(ip_a, ip_b);
    let mut leased = vec![ip_a[0].clone(), ip_b[0].clone()];
    leased.sort();
    assert_eq!(leases(env), leased);
    // The pod's interface has the address the status reports.
    let addr = cri.exec_ok(&web_a, &["ip", "-o", "-4", "addr", "show", "eth0"]).await;
    assert!(addr.contains(&format!("{}/24", ip_a[0])), "{addr}");
    // Pod to pod over TCP, both ways.
    assert_eq!(fetch_in(cri, &web_b, &ip_a[0]).await.trim(), "hello-from-a");
    assert_eq!(fetch_in(cri, &web_a, &ip_b[0]).await.trim(), "hello-from-b");
    TwoPods { a, web_a, web_b, ip_b }
}

#[tokio::test]
async fn cni_pods_get_addresses_talk_over_tcp_and_reach_host_ports() {
    let mut env = net_env("cni", "off");
    write_conflist(&env, "10-test.conflist", &bridge_conflist(&env));
    let mut cri = env.start().await;
    assert!(network_ready(&mut cri).await.status, "NetworkReady with a valid CNI configuration");
    let image = env.import_busybox(&mut cri).await;

    let TwoPods { a, ip_b, .. } = two_web_pods_talking(&env, &mut cri, &image, SUBNET_PREFIX, leases).await;
    // The host port reaches pod a from the node.
    assert_eq!(env.fetch_from_node(GATEWAY, 18080).await.trim(), "hello-from-a");
    assert_eq!(hostport_chains(&env).len(), 1, "one DNAT chain for pod a");

    // DEL at StopPodSandbox releases the address, the veth and the rules.
    cri.stop_pod(&a).await.unwrap();
    assert_eq!(leases(&env), vec![ip_b[0].clone()]);
    assert_eq!(veths(&env).len(), 1);
    assert_eq!(hostport_chains(&env), Vec::<String>::new());
    // Stop and Remove again are harmless.
    cri.stop_pod(&a).await.unwrap();
    cri.remove_pod(&a).await.unwrap();
    remove_all(&mut cri).await;
    assert_no_network_leftovers(&env, "removing every pod");
    env.assert_no_leftovers();
}

#[tokio::test]
async fn host_network_pods_are_untouched() {
    let mut env = net_env("cnihost", "off");
    write_conflist(&env, "10-test.conflist", &bridge_conflist(&env));
    let mut cri = env.start().await;
    let config =
        common::client::with_namespaces(env.pod("h"), NamespaceMode::Node, NamespaceMode::Pod, NamespaceMode::Pod);
    let id = cri.run_pod(config).await.unwrap();
    assert_eq!(pod_ips(&mut cri, &id).await, Vec::<String>::new());
    assert_eq!(leases(&env), Vec::<String>::new());
    assert_eq!(cache_entries(&env), Vec::<PathBuf>::new());
    remove_all(&mut cri).await;
}

#[tokio::test]
async fn network_ready_follows_the_configuration_directory() {
    let mut env = net_env("cniready", "off");
    let mut cri = env.start().await;
    let cond = network_ready(&mut cri).await;
    assert!(!cond.status);
    assert_eq!(cond.reason, "NetworkPluginNotReady");
    assert!(cond.message.contains("no CNI network configuration"), "{}", cond.message);
    // Without a network a pod still runs, with loopback only.
    let id = cri.run_pod(env.pod("lo")).await.unwrap();
    assert_eq!(pod_ips(&mut cri, &id).await, Vec::<String>::new());

    // A list naming a plugin that does not exist is not usable.
    write_conflist(
        &env,
        "05-broken.conflist",
        r#"{"cniVersion":"1.0.0","name":"x","plugins":[{"type":"no-such-plugin"}]}"#,
    );
    let cond = network_ready(&mut cri).await;
    assert!(!cond.status && cond.message.contains("no-such-plugin"), "{}", cond.message);
    // Its plugin installed after it: usable, with nothing in net.d touched.
    fs::create_dir_all(late_plugin_dir(&env)).unwrap();
    let late = r#"{"cniVersion":"1.0.0","name":"late","plugins":[{"type":"late-plugin"}]}"#;
    write_conflist(&env, "07-late.conflist", late);
    let cond = network_ready(&mut cri).await;
    assert!(!cond.status && cond.message.contains("late-plugin"), "{}", cond.message);
    let plugin = late_plugin_dir(&env).join("late-plugin");
    fs::write(&plugin, "#!/bin/sh\nexit 1\n").unwrap();
    fs::set_permissions(&plugin, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    assert!(network_ready(&mut cri).await.status, "the list is usable once its plugin is installed");
    fs::remove_file(conf_dir(&env).join("07-late.conflist")).unwrap();
    // A valid one after it (by name) is taken; no restart needed.
    write_conflist(&env, "10-test.conflist", &bridge_conflist(&env));
    assert!(network_ready(&mut cri).await.status);
    let id2 = cri.run_pod(env.pod("net")).await.unwrap();
    assert!(pod_ips(&mut cri, &id2).await[0].starts_with(SUBNET_PREFIX));
    // Removed again: not ready.
    fs::remove_file(conf_dir(&env).join("10-test.conflist")).unwrap();
    assert!(!network_ready(&mut cri).await.status);
    // The pod attached before is still detached from its cached configuration.
    remove_all(&mut cri).await;
    assert_no_network_leftovers(&env, "removing the pods after the configuration went");
}

#[tokio::test]
async fn a_failed_add_leaves_no_address_veth_or_cache_entry() {
    let mut env = net_env("cnifail", "off");
    // bridge succeeds, then tuning fails on a sysctl that does not exist.
    let mut list: serde_json::Value = serde_json::from_str(&bridge_conflist(&env)).unwrap();
    list["plugins"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"type": "tuning", "sysctl": {"net.no.such.key": "1"}}));
    write_conflist(&env, "10-test.conflist", &list.to_string());
    let mut cri = env.start().await;
    let err = cri.run_pod(env.pod("f")).await.unwrap_err();
    assert!(err.message().contains("tuning"), "{err:?}");
    assert_eq!(cri.list_pods(None).await.len(), 0);
    assert_no_network_leftovers(&env, "a failed ADD");
    env.assert_no_leftovers();
}

/// Pods a (host port 18081) and b, then kill -9 of the daemon: the
/// restarted daemon reports a's address and b still reaches a over TCP.
/// Answers the new client, the image, a and b.
async fn two_pods_survive_a_daemon_kill(env: &mut TestEnv) -> (Cri, String, String, String) {
    let mut cri = env.start().await;
    let image = env.import_busybox(&mut cri).await;
    let (a, _) = web_pod(env, &mut cri, &image, "a", Some(18081)).await;
    let (b, web_b) = web_pod(env, &mut cri, &image, "b", None).await;
    let ip_a = pod_ips(&mut cri, &a).await;
    env.kill_daemon();
    let mut cri = env.start().await;
    assert_eq!(pod_ips(&mut cri, &a).await, ip_a);
    assert_eq!(fetch_in(&mut cri, &web_b, &ip_a[0]).await.trim(), "hello-from-a");
    (cri, image, a, b)
}

/// A simulated reboot with pod `b` running: b is NOTREADY, its lease
/// (`leases`) outlives the reboot until StopPodSandbox's DEL releases it,
/// and a new pod gets a working address; every pod is removed after.
async fn del_works_after_a_simulated_reboot(
    env: &mut TestEnv,
    mut cri: Cri,
    image: &str,
    b: &str,
    leases: fn(&TestEnv) -> Vec<String>,
) {
    let ip_b = pod_ips(&mut cri, b).await;
    env.simulate_reboot();
    let mut cri = env.start().await;
    assert_eq!(cri.pod_state(b).await, PodSandboxState::SandboxNotready);
    assert_eq!(leases(env), ip_b, "the lease outlives the reboot until DEL");
    cri.stop_pod(b).await.unwrap();
    assert_eq!(leases(env), Vec::<String>::new(), "DEL from the cache released the address");
    cri.remove_pod(b).await.unwrap();
    let (c, web_c) = web_pod(env, &mut cri, image, "c", None).await;
    let ip_c = pod_ips(&mut cri, &c).await;
    assert_eq!(fetch_in(&mut cri, &web_c, &ip_c[0]).await.trim(), "hello-from-c");
    remove_all(&mut cri).await;
}

#[tokio::test]
async fn del_works_after_a_daemon_kill_and_after_a_simulated_reboot() {
    let mut env = net_env("cnirestart", "off");
    write_conflist(&env, "10-test.conflist", &bridge_conflist(&env));
    // kill -9: the restarted daemon reports the same addresses, pods still talk, and DEL works.
    let (mut cri, image, a, b) = two_pods_survive_a_daemon_kill(&mut env).await;
    // The restarted daemon CHECKs each running pod's network (1.0.0 has
    // CHECK). Pod b's passes; pod a's host port trips Debian's portmap 1.1.1,
    // whose CHECK looks for IPv6 rules it never made (containernetworking/
    // plugins#819): reported as a warning, the pod left as it is.
    let checked = |log: &str| {
        log.contains(&format!("CNI CHECK passed pod_id={b}"))
            && log.contains(&format!("CNI CHECK failed: the pod's network is not as it was attached pod_id={a}"))
    };
    for _ in 0..100 {
        if checked(&env.daemon_log()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(checked(&env.daemon_log()), "both pods CHECKed after the restart");
    cri.stop_pod(&a).await.unwrap();
    cri.remove_pod(&a).await.unwrap();
    assert_eq!(leases(&env).len(), 1);
    assert_eq!(hostport_chains(&env), Vec::<String>::new());

    // A reboot: the pause and its namespace are gone, the cache is not.
    del_works_after_a_simulated_reboot(&mut env, cri, &image, &b, leases).await;
    assert_no_network_leftovers(&env, "the restarts");
}

// ---- the built-in network ----

const BUILTIN_PREFIX: &str = "10.98.0.";
const BUILTIN_GATEWAY: &str = "10.98.0.1";

/// Addresses the built-in network has leased.
fn builtin_leases(env: &TestEnv) -> Vec<String> {
    let mut found: Vec<String> = fs::read_dir(env.root.join("network/builtin/leases"))
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| !n.starts_with('.'))
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found
}

fn assert_no_builtin_leftovers(env: &TestEnv, after: &str) {
    assert_eq!(builtin_leases(env), Vec::<String>::new(), "address leases left after {after}");
    assert_eq!(builtin_hostport_rules(env), Vec::<String>::new(), "host port rules left after {after}");
    assert_eq!(veths(env), Vec::<String>::new(), "veths left after {after}");
    assert_eq!(cache_entries(env), Vec::<PathBuf>::new(), "network cache entries left after {after}");
}

/// Whether something listens on `port` of the node: a TCP connect from a
/// thread that entered the daemon's network namespace.
fn node_port_open(env: &TestEnv, port: u16) -> bool {
    let netns = fs::File::open(format!("/run/netns/{}", env.netns)).expect("open the test netns");
    std::thread::spawn(move || {
        nix::sched::setns(&netns, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
        let address: std::net::SocketAddr = format!("{BUILTIN_GATEWAY}:{port}").parse().unwrap();
        std::net::TcpStream::connect_timeout(&address, Duration::from_secs(2)).is_ok()
    })
    .join()
    .expect("connect thread")
}

#[tokio::test]
async fn builtin_pods_get_addresses_talk_over_tcp_and_reach_host_ports() {
    let mut env = net_env("builtin", "auto");
    let mut cri = env.start().await;
    assert!(network_ready(&mut cri).await.status, "NetworkReady with the built-in network");
    let image = env.import_busybox(&mut cri).await;

    let TwoPods { a, web_a, web_b, ip_b } =
        two_web_pods_talking(&env, &mut cri, &image, BUILTIN_PREFIX, builtin_leases).await;
    let routes = cri.exec_ok(&web_a, &["ip", "route"]).await;
    assert!(routes.contains(&format!("default via {BUILTIN_GATEWAY}")), "{routes}");
    let lo = cri.exec_ok(&web_a, &["ip", "-o", "addr", "show", "lo"]).await;
    assert!(lo.contains("127.0.0.1"), "{lo}");

    assert_eq!(env.fetch_from_node(BUILTIN_GATEWAY, 18080).await.trim(), "hello-from-a");
    assert_eq!(env.fetch_from_node("127.0.0.1", 18080).await.trim(), "hello-from-a");
    // Through the node's address from pods of the bridge, a's own included (hairpin).
    for from in [&web_a, &web_b] {
        let script = format!("printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 3 {BUILTIN_GATEWAY} 18080");
        let out = cri.exec_ok(from, &["sh", "-c", &script]).await;
        assert!(out.ends_with("hello-from-a\n"), "{out:?}");
    }

    assert!(node_port_open(&env, 18080), "the host port is open while the pod runs");
    cri.stop_pod(&a).await.unwrap();
    assert_eq!(builtin_leases(&env), vec![ip_b[0].clone()]);
    assert_eq!(veths(&env).len(), 1);
    assert!(!node_port_open(&env, 18080), "the host port closes at StopPodSandbox");
    cri.stop_pod(&a).await.unwrap();
    cri.remove_pod(&a).await.unwrap();

    // UpdateRuntimeConfig's pod CIDR serves new pods.
    cri.runtime
        .update_runtime_config(UpdateRuntimeConfigRequest {
            runtime_config: Some(RuntimeConfig {
                network_config: Some(NetworkConfig { pod_cidr: "10.97.0.0/24".into() }),
            }),
        })
        .await
        .unwrap();
    let (c, _) = web_pod(&env, &mut cri, &image, "c", None).await;
    let ip_c = pod_ips(&mut cri, &c).await;
    assert!(ip_c[0].starts_with("10.97.0."), "{ip_c:?}");
    assert_eq!(fetch_in(&mut cri, &web_b, &ip_c[0]).await.trim(), "hello-from-c", "across the two pod CIDRs");
    let bad = cri
        .runtime
        .update_runtime_config(UpdateRuntimeConfigRequest {
            runtime_config: Some(RuntimeConfig {
                network_config: Some(NetworkConfig { pod_cidr: "10.97.0.1/33".into() }),
            }),
        })
        .await
        .unwrap_err();
    assert!(bad.message().contains("pod_cidr"), "{bad:?}");

    remove_all(&mut cri).await;
    assert_no_builtin_leftovers(&env, "removing every pod");
    env.assert_no_leftovers();
}

#[tokio::test]
async fn the_pod_cidr_kubelet_sent_is_kept_across_a_daemon_kill() {
    let mut env = net_env("podcidr", "auto");
    let mut cri = env.start().await;
    let info = cri.runtime_info().await;
    assert_eq!(info["network"]["podCidr"]["source"], "config network.pod_cidr", "{info}");
    // kubelet sends the node's CIDR once, when it learns it.
    cri.runtime
        .update_runtime_config(UpdateRuntimeConfigRequest {
            runtime_config: Some(RuntimeConfig {
                network_config: Some(NetworkConfig { pod_cidr: "10.97.0.0/24".into() }),
            }),
        })
        .await
        .unwrap();
    env.kill_daemon();
    let mut cri = env.start().await;
    let info = cri.runtime_info().await;
    assert_eq!(info["network"]["podCidr"]["source"], "UpdateRuntimeConfig", "{info}");
    assert_eq!(info["network"]["podCidr"]["podCidrs"], serde_json::json!(["10.97.0.0/24"]), "{info}");
    let id = cri.run_pod(env.pod("after")).await.unwrap();
    let ips = pod_ips(&mut cri, &id).await;
    assert!(ips[0].starts_with("10.97.0."), "a pod after the restart got {ips:?}, outside the CIDR kubelet sent");
    remove_all(&mut cri).await;
    assert_no_builtin_leftovers(&env, "removing the pod");
    env.assert_no_leftovers();
}

#[tokio::test]
async fn builtin_del_works_after_a_daemon_kill_and_after_a_simulated_reboot() {
    let mut env = net_env("builtinrestart", "auto");
    let (mut cri, image, a, b) = two_pods_survive_a_daemon_kill(&mut env).await;
    assert_eq!(env.fetch_from_node(BUILTIN_GATEWAY, 18081).await.trim(), "hello-from-a", "host port reopened");
    cri.stop_pod(&a).await.unwrap();
    cri.remove_pod(&a).await.unwrap();
    assert_eq!(builtin_leases(&env).len(), 1);

    del_works_after_a_simulated_reboot(&mut env, cri, &image, &b, builtin_leases).await;
    assert_no_builtin_leftovers(&env, "the restarts");
}

#[tokio::test]
async fn cni_configuration_takes_over_from_the_builtin_network_and_back() {
    let mut env = net_env("handover", "auto");
    let mut cri = env.start().await;
    let first = cri.run_pod(env.pod("first")).await.unwrap();
    assert!(pod_ips(&mut cri, &first).await[0].starts_with(BUILTIN_PREFIX));
    write_conflist(&env, "10-test.conflist", &bridge_conflist(&env));
    let second = cri.run_pod(env.pod("second")).await.unwrap();
    assert!(pod_ips(&mut cri, &second).await[0].starts_with(SUBNET_PREFIX));
    fs::remove_file(conf_dir(&env).join("10-test.conflist")).unwrap();
    assert!(network_ready(&mut cri).await.status, "the built-in network serves again");
    let third = cri.run_pod(env.pod("third")).await.unwrap();
    assert!(pod_ips(&mut cri, &third).await[0].starts_with(BUILTIN_PREFIX));
    // Each pod is detached by the network it was attached with.
    remove_all(&mut cri).await;
    assert_no_builtin_leftovers(&env, "removing the pods");
    assert_eq!(leases(&env), Vec::<String>::new());
}

// ---- churn and crashes, for both networks ----

/// Runs `total` pods through RunPodSandbox, PodSandboxStatus (an address),
/// StopPodSandbox and RemovePodSandbox, `concurrency` at a time.
async fn churn(env: &TestEnv, cri: &Cri, total: usize, concurrency: usize, prefix: &'static str) {
    let started = std::time::Instant::now();
    let mut workers = Vec::new();
    for w in 0..concurrency {
        let configs: Vec<PodSandboxConfig> =
            (w..total).step_by(concurrency).map(|i| env.pod(&format!("churn-{i}"))).collect();
        let mut cri = cri.clone();
        workers.push(tokio::spawn(async move {
            for config in configs {
                let id = cri.run_pod(config).await.expect("RunPodSandbox");
                let ips = pod_ips(&mut cri, &id).await;
                assert!(ips.first().is_some_and(|ip| ip.starts_with(prefix)), "{ips:?}");
                cri.stop_pod(&id).await.expect("StopPodSandbox");
                cri.remove_pod(&id).await.expect("RemovePodSandbox");
            }
        }));
    }
    for worker in workers {
        worker.await.expect("churn worker");
    }
    eprintln!("churn: {total} networked pods at concurrency {concurrency} in {:?}", started.elapsed());
}

#[tokio::test]
async fn cni_churn_of_500_pods_leaves_nothing_behind() {
    let mut env = net_env("cnichurn", "off");
    write_conflist(&env, "10-test.conflist", &bridge_conflist(&env));
    let cri = env.start().await;
    churn(&env, &cri, 500, 8, SUBNET_PREFIX).await;
    assert_no_network_leftovers(&env, "500 pods");
    env.assert_no_leftovers();
}

#[tokio::test]
async fn builtin_churn_of_500_pods_leaves_nothing_behind() {
    let mut env = net_env("builtinchurn", "auto");
    let cri = env.start().await;
    churn(&env, &cri, 500, 8, BUILTIN_PREFIX).await;
    assert_no_builtin_leftovers(&env, "500 pods");
    env.assert_no_leftovers();
}

/// Kills the daemon at several points of RunPodSandbox and StopPodSandbox;
/// after each restart, removing the pods must leave nothing.
async fn kill_during_run_and_stop(env: &mut TestEnv) {
    let mut cri = env.start().await;
    for (round, delay_ms) in [0u64, 3, 8, 15, 25, 40, 60, 90].into_iter().enumerate() {
        // A RunPodSandbox cut short.
        let mut caller = cri.clone();
        let config = env.pod(&format!("run-{round}"));
        let call = tokio::spawn(async move { caller.run_pod(config).await });
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        env.kill_daemon();
        let _ = call.await;
        cri = env.start().await;
        // A StopPodSandbox cut short.
        let id = cri.run_pod(env.pod(&format!("stop-{round}"))).await.expect("RunPodSandbox");
        let mut caller = cri.clone();
        let call = tokio::spawn(async move { caller.stop_pod(&id).await });
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        env.kill_daemon();
        let _ = call.await;
        cri = env.start().await;
    }
    remove_all(&mut cri).await;
}

#[tokio::test]
async fn cni_kill_9_during_run_and_stop_leaves_nothing_after_remove() {
    let mut env = net_env("cnikill", "off");
    write_conflist(&env, "10-test.conflist", &bridge_conflist(&env));
    kill_during_run_and_stop(&mut env).await;
    assert_no_network_leftovers(&env, "kills during Run and Stop");
    env.assert_no_leftovers();
}

#[tokio::test]
async fn builtin_kill_9_during_run_and_stop_leaves_nothing_after_remove() {
    let mut env = net_env("builtinkill", "auto");
    kill_during_run_and_stop(&mut env).await;
    assert_no_builtin_leftovers(&env, "kills during Run and Stop");
    env.assert_no_leftovers();
}

#[tokio::test]
async fn builtin_failed_attach_is_undone() {
    let mut env = net_env("builtinfail", "auto");
    let mut cri = env.start().await;
    let mapped = |name: &str| {
        let mut config = env.pod(name);
        config.port_mappings = vec![PortMapping {
            protocol: Protocol::Tcp as i32,
            container_port: 80,
            host_port: 18090,
            host_ip: String::new(),
        }];
        config
    };
    let first = cri.run_pod(mapped("first")).await.unwrap();
    let leased = builtin_leases(&env);
    // The same host port again: the attach fails and leaves nothing of the second pod.
    let err = cri.run_pod(mapped("second")).await.unwrap_err();
    assert!(err.message().contains("18090") && err.message().contains(&first), "{err:?}");
    assert_eq!(err.code(), tonic::Code::AlreadyExists, "{err:?}");
    assert_eq!(cri.list_pods(None).await.len(), 1);
    assert_eq!(builtin_leases(&env), leased);
    assert_eq!(veths(&env).len(), 1);
    assert_eq!(cache_entries(&env).len(), 1);
    assert_eq!(builtin_hostport_rules(&env).len(), 1, "{:?}", builtin_hostport_rules(&env));
    // An IPv6 host address for a pod without an IPv6 address: refused, undone.
    let mut v6 = mapped("v6");
    v6.port_mappings[0].host_ip = "fd00::1".into();
    v6.port_mappings[0].host_port = 18091;
    let err = cri.run_pod(v6).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("IPv6"), "{err:?}");
    assert_eq!(builtin_leases(&env), leased);
    assert_eq!(builtin_hostport_rules(&env).len(), 1);
    // SCTP host ports are forwarded by the kernel as TCP and UDP ones.
    let mut sctp = env.pod("sctp");
    sctp.port_mappings = vec![PortMapping {
        protocol: Protocol::Sctp as i32,
        container_port: 80,
        host_port: 18091,
        host_ip: String::new(),
    }];
    let sctp = cri.run_pod(sctp).await.unwrap();
    let rules = builtin_hostport_rules(&env);
    assert!(rules.iter().any(|r| r.contains("sctp") && r.contains("18091")), "{rules:?}");
    cri.stop_pod(&sctp).await.unwrap();
    cri.remove_pod(&sctp).await.unwrap();
    cri.stop_pod(&first).await.unwrap();
    cri.remove_pod(&first).await.unwrap();
    assert_no_builtin_leftovers(&env, "the failed attaches");
    env.assert_no_leftovers();
}

#[tokio::test]
async fn dual_stack_pods_get_an_address_of_each_family() {
    // The built-in network with an IPv4 and an IPv6 pod CIDR.
    let mut env =
        net_env_with("dualstack", "builtin = \"auto\"\npod_cidr = \"10.98.0.0/24,fd00:98::/64\"\nmasquerade = false\n");
    let mut cri = env.start().await;
    let image = env.import_busybox(&mut cri).await;
    let (a, web_a) = web_pod(&env, &mut cri, &image, "a", None).await;
    let ips = pod_ips(&mut cri, &a).await;
    assert_eq!(ips.len(), 2, "{ips:?}");
    assert!(ips[0].starts_with(BUILTIN_PREFIX) && ips[1].starts_with("fd00:98::"), "IPv4 first: {ips:?}");
    let v6 = cri.exec_ok(&web_a, &["ip", "-6", "addr", "show", "eth0"]).await;
    assert!(v6.contains(&format!("{}/64", ips[1])), "{v6}");
    let routes = cri.exec_ok(&web_a, &["ip", "-6", "route"]).await;
    assert!(routes.contains("default via fd00:98::1"), "{routes}");

    // A CNI list with both families: the same, through host-local.
    let mut list: serde_json::Value = serde_json::from_str(&bridge_conflist(&env)).unwrap();
    list["plugins"][0]["ipam"]["ranges"] =
        serde_json::json!([[{"subnet": "10.99.0.0/24"}], [{"subnet": "fd00:99::/64"}]]);
    write_conflist(&env, "10-test.conflist", &list.to_string());
    let b = cri.run_pod(env.pod("b")).await.unwrap();
    let ips = pod_ips(&mut cri, &b).await;
    assert_eq!(ips.len(), 2, "{ips:?}");
    assert!(ips[0].starts_with(SUBNET_PREFIX) && ips[1].starts_with("fd00:99::"), "IPv4 first: {ips:?}");
    remove_all(&mut cri).await;
    assert_no_builtin_leftovers(&env, "removing the dual-stack pods");
    assert_eq!(leases(&env), Vec::<String>::new());
    let v6_leases: Vec<String> = fs::read_dir(ipam_dir(&env).join("testnet"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("fd00"))
        .collect();
    assert_eq!(v6_leases, Vec::<String>::new(), "IPv6 leases left");
}

/// A network namespace standing for the world beyond the node: joined to
/// the test's namespace (the node's) by a veth pair, 198.18.0.1 on the
/// node's side and 198.18.0.2 on its own, with no route to any pod CIDR. A
/// server on 198.18.0.2:8080 answers each request with the address it came
/// from. The server is killed and the namespace deleted when dropped.
struct Beyond {
    netns: String,
    node: String,
    server: std::process::Child,
}

const BEYOND: &str = "198.18.0.2";

impl Beyond {
    fn new(env: &TestEnv) -> Self {
        let netns = format!("{}-beyond", env.netns);
        host::run("ip", &["netns", "add", &netns]);
        let node = env.netns.as_str();
        let made = std::process::Command::new("sh")
            .args([
                "-ec",
                &format!(
                    "ip -n {node} link add vbeyond type veth peer name eth0 netns {netns}
                 ip -n {node} addr add 198.18.0.1/30 dev vbeyond && ip -n {node} link set vbeyond up
                 ip -n {netns} addr add {BEYOND}/30 dev eth0 && ip -n {netns} link set eth0 up
                 ip -n {netns} link set lo up"
                ),
            ])
            .status()
            .expect("sh");
        let server = "import socket\n\
            s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
            s.bind(('198.18.0.2', 8080)); s.listen(8)\n\
            while True:\n\
            \x20   c, a = s.accept(); c.recv(4096)\n\
            \x20   c.sendall(('HTTP/1.0 200 OK\\r\\n\\r\\nfrom-' + a[0]).encode()); c.close()\n";
        let spawned = std::process::Command::new("ip").args(["netns", "exec", &netns, "python3", "-c", server]).spawn();
        let beyond = match spawned {
            Ok(server) => Beyond { netns, node: node.to_string(), server },
            Err(e) => {
                let _ = std::process::Command::new("ip").args(["netns", "delete", &netns]).status();
                panic!("cannot start the server beyond the node: {e}");
            }
        };
        assert!(made.success(), "cannot join the namespace beyond the node to the node's");
        beyond
    }
}

impl Drop for Beyond {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
        let _ = std::process::Command::new("ip").args(["-n", &self.node, "link", "delete", "vbeyond"]).status();
        let _ = std::process::Command::new("ip").args(["netns", "delete", &self.netns]).status();
    }
}

#[tokio::test]
async fn builtin_masquerades_what_pods_send_off_the_node() {
    let mut env = net_env_with("masq", "builtin = \"auto\"\npod_cidr = \"10.98.0.0/24\"\nmasquerade = true\n");
    let beyond = Beyond::new(&env);
    let mut cri = env.start().await;
    let image = env.import_busybox(&mut cri).await;
    let (a, web_a) = web_pod(&env, &mut cri, &image, "a", None).await;
    let (_b, web_b) = web_pod(&env, &mut cri, &image, "b", None).await;
    let ip_a = pod_ips(&mut cri, &a).await;

    // Off the node, a pod's packets carry the node's address: the namespace
    // beyond has no route back to the pod CIDR, so only that way can they
    // be answered at all.
    assert_eq!(fetch_in(&mut cri, &web_a, BEYOND).await.trim(), "from-198.18.0.1");
    let table = host::run("ip", &["netns", "exec", &env.netns, "nft", "list", "table", "inet", "nidus_nidus0"]);
    assert!(table.contains("iifname \"nidus0\" oifname != \"nidus0\" masquerade"), "{table}");
    let status = cri.runtime.status(StatusRequest { verbose: true }).await.unwrap().into_inner();
    let info: serde_json::Value = serde_json::from_str(&status.info["config"]).unwrap();
    assert_eq!(info["network"]["masquerade"], "on", "{}", info["network"]);
    // Pod to pod, and pod to node, keep their own addresses.
    assert_eq!(fetch_in(&mut cri, &web_b, &ip_a[0]).await.trim(), "hello-from-a");

    // A restarted daemon writes the table again (the same one, replaced).
    env.kill_daemon();
    let mut cri = env.start().await;
    let (_c, web_c) = web_pod(&env, &mut cri, &image, "c", None).await;
    assert_eq!(fetch_in(&mut cri, &web_c, BEYOND).await.trim(), "from-198.18.0.1");
    let tables = host::run("ip", &["netns", "exec", &env.netns, "nft", "list", "tables"]);
    assert_eq!(tables.matches("nidus_nidus0").count(), 1, "{tables}");

    remove_all(&mut cri).await;
    drop(beyond);
    assert_no_builtin_leftovers(&env, "removing every pod");
    env.assert_no_leftovers();
}

/// The daemon's resident memory, in KiB.
fn daemon_rss_kib(env: &TestEnv) -> u64 {
    let status = fs::read_to_string(format!("/proc/{}/status", env.daemon_pid().unwrap())).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}

#[tokio::test]
async fn thousands_of_clients_of_a_host_port_cost_the_daemon_nothing() {
    const CLIENTS: usize = 3000;
    assert!(host::raise_nofile() as usize > CLIENTS + 500, "the test needs a higher RLIMIT_NOFILE hard limit");
    let mut env = net_env("hpflood", "auto");
    let beyond = Beyond::new(&env);
    let mut cri = env.start().await;
    let image = env.import_image(&mut cri, common::images::busybox_probe()).await;
    let mut pod = env.pod("sink");
    pod.port_mappings = vec![
        PortMapping { protocol: Protocol::Tcp as i32, container_port: 8080, host_port: 18095, host_ip: String::new() },
        PortMapping { protocol: Protocol::Udp as i32, container_port: 8081, host_port: 18096, host_ip: String::new() },
    ];
    let id = cri.run_pod(pod.clone()).await.unwrap();
    let sink = cri
        .run_container(&id, &pod, container_config("sink", &image, &["/bin/probe", "listen-never-accept", "8080"]))
        .await;
    cri.wait_for_line(&sink, "ok listening", 20).await;
    let (fds_before, _) = env.settled_fds_and_processes().await;
    let rss_before = daemon_rss_kib(&env);

    // Clients beyond the node hold thousands of connections to the host
    // port (the pod's kernel completes them; nobody accepts), and send UDP
    // from a thousand source ports.
    let netns = fs::File::open(format!("/run/netns/{}", beyond.netns)).unwrap();
    let clients = std::thread::spawn(move || {
        nix::sched::setns(&netns, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
        let address: std::net::SocketAddr = "198.18.0.1:18095".parse().unwrap();
        let held: Vec<std::net::TcpStream> = (0..CLIENTS)
            .filter_map(|_| std::net::TcpStream::connect_timeout(&address, Duration::from_secs(5)).ok())
            .collect();
        for _ in 0..1200 {
            let socket = std::net::UdpSocket::bind("198.18.0.2:0").unwrap();
            let _ = socket.send_to(b"ping", "198.18.0.1:18096");
        }
        held
    })
    .join()
    .unwrap();
    assert_eq!(clients.len(), CLIENTS, "every client connected through the host port");
    // The pod sees the clients' own address (0200 12C6: 198.18.0.2 in /proc/net/tcp).
    let tcp = cri.exec_ok(&sink, &["cat", "/proc/net/tcp"]).await;
    let from_beyond =
        tcp.lines().filter(|l| l.split_whitespace().nth(2).is_some_and(|r| r.starts_with("020012C6:"))).count();
    assert_eq!(from_beyond, CLIENTS, "the pod sees each client as 198.18.0.2");

    // Every CRI call still works, and the daemon holds nothing for the clients.
    let other = cri.run_pod(env.pod("other")).await.expect("RunPodSandbox beside the clients");
    cri.stop_pod(&other).await.unwrap();
    cri.remove_pod(&other).await.unwrap();
    assert_eq!(cri.exec_ok(&sink, &["echo", "fine"]).await.trim(), "fine");
    let (fds_during, _) = env.settled_fds_and_processes().await;
    let rss_during = daemon_rss_kib(&env);
    eprintln!("daemon fds {fds_before} → {fds_during}, RSS {rss_before} → {rss_during} KiB with {CLIENTS} TCP clients");
    assert!(fds_during <= fds_before + 2, "the daemon's fds grew from {fds_before} to {fds_during}");
    assert!(rss_during < rss_before + (8 << 10), "the daemon's RSS grew from {rss_before} to {rss_during} KiB");

    // A restarted daemon cuts no client.
    env.kill_daemon();
    let mut cri = env.start().await;
    let tcp = cri.exec_ok(&sink, &["cat", "/proc/net/tcp"]).await;
    assert_eq!(tcp.matches(" 020012C6:").count(), CLIENTS, "connections cut by the restart");
    assert_eq!(builtin_hostport_rules(&env).len(), 2);
    drop(clients);
    remove_all(&mut cri).await;
    drop(beyond);
    assert_no_builtin_leftovers(&env, "removing the pods");
    env.assert_no_leftovers();
}

/// Processes whose command line holds `marker`.
fn processes_with(marker: &str) -> Vec<i32> {
    fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| String::from_utf8_lossy(&c).contains(marker))
        })
        .collect()
}

#[tokio::test]
async fn a_cni_plugin_that_leaves_a_child_or_floods_its_output_is_answered_fast_and_leaves_nothing() {
    // A 60 s plugin timeout: what waited for the plugin's pipes to close
    // would take that long.
    let mut env = net_env_with("cniplugins", "builtin = \"off\"\nplugin_timeout_secs = 60\n");
    fs::create_dir_all(late_plugin_dir(&env)).unwrap();
    let marker = format!("{}-left-behind", env.name);
    let install = |name: &str, script: &str| {
        let path = late_plugin_dir(&env).join(name);
        fs::write(&path, format!("#!/bin/sh\n{script}\n")).unwrap();
        fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    };
    // ADD succeeds at once but leaves a child holding its stdout.
    install(
        "leaver",
        &format!(
            "cat >/dev/null\n[ \"$CNI_COMMAND\" = ADD ] && sh -c 'exec -a {marker} sleep 1000' &\n\
             printf '{{\"cniVersion\":\"1.0.0\",\"interfaces\":[],\"ips\":[]}}'"
        ),
    );
    install("flooder", "cat >/dev/null\n[ \"$CNI_COMMAND\" = ADD ] && head -c 20000000 /dev/zero | tr '\\0' x\nexit 0");
    write_conflist(
        &env,
        "10-leaver.conflist",
        r#"{"cniVersion":"1.0.0","name":"leaver","plugins":[{"type":"leaver"}]}"#,
    );
    let mut cri = env.start().await;

    let began = std::time::Instant::now();
    let id = cri.run_pod(env.pod("leaver")).await.expect("RunPodSandbox with a plugin that leaves a child");
    let took = began.elapsed();
    assert!(took < Duration::from_secs(20), "RunPodSandbox waited {took:?} for the plugin's child");
    assert_eq!(processes_with(&marker), Vec::<i32>::new(), "the plugin's child outlived it");
    cri.stop_pod(&id).await.unwrap();
    cri.remove_pod(&id).await.unwrap();

    fs::remove_file(conf_dir(&env).join("10-leaver.conflist")).unwrap();
    write_conflist(
        &env,
        "10-flooder.conflist",
        r#"{"cniVersion":"1.0.0","name":"flooder","plugins":[{"type":"flooder"}]}"#,
    );
    let began = std::time::Instant::now();
    let err = cri.run_pod(env.pod("flooder")).await.expect_err("a plugin printing 20 MB");
    assert!(err.message().contains("output too large"), "{err:?}");
    assert!(began.elapsed() < Duration::from_secs(20), "the flood took {:?} to be refused", began.elapsed());
    assert!(cri.list_pods(None).await.is_empty());
    assert_no_network_leftovers(&env, "the plugins");
    env.assert_no_leftovers();
}

#[tokio::test]
async fn a_malformed_cni_configuration_is_reported_never_replaced_by_the_builtin_network() {
    let mut env = net_env("brokenconf", "auto");
    write_conflist(&env, "10-broken.conflist", "{\"cniVersion\": \"1.0.0\", \"plugins\": [");
    let mut cri = env.start().await;
    let cond = network_ready(&mut cri).await;
    assert!(!cond.status, "NetworkReady with only a malformed CNI configuration");
    assert!(cond.message.contains("10-broken.conflist"), "{}", cond.message);
    let err = cri.run_pod(env.pod("nonet")).await.expect_err("RunPodSandbox without a usable network");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
    assert!(err.message().contains("10-broken.conflist"), "{err:?}");
    assert!(cri.list_pods(None).await.is_empty());
    assert_no_builtin_leftovers(&env, "the refused pod");
    // Without it, the built-in network serves again: no restart needed.
    fs::remove_file(conf_dir(&env).join("10-broken.conflist")).unwrap();
    assert!(network_ready(&mut cri).await.status);
    let id = cri.run_pod(env.pod("net")).await.unwrap();
    assert!(pod_ips(&mut cri, &id).await[0].starts_with(BUILTIN_PREFIX));
    remove_all(&mut cri).await;
    assert_no_builtin_leftovers(&env, "removing the pod");
    env.assert_no_leftovers();
}
