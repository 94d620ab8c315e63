//! The streaming server through the socket: Exec over SPDY (pipes and a
//! terminal, stdin and its close, exit codes, resize, 10 MB of output, old
//! protocol versions), clients that vanish (no process, no fd left),
//! PortForward into a pod's network namespace and the node's, single-use
//! expiring tokens, the session cap, and the CRI's refusals.

mod common;

use std::time::Duration;

use common::client::{container_config, with_namespaces};
use common::spdy::SpdyClient;
use common::websocket;
use common::{host, TestEnv};
use nidus::api::*;

const V4: &str = "v4.channel.k8s.io";
const LONG: Duration = Duration::from_secs(20);

/// A shell step that waits until the terminal is `rows cols`, then prints
/// its size (`stty size`): a resize and input travel on different streams.
fn size_once(rows_cols: &str) -> String {
    format!("until [ \"$(busybox stty size)\" = '{rows_cols}' ]; do sleep 0.05; done; busybox stty size")
}

struct Stdio {
    stdin: bool,
    stdout: bool,
    stderr: bool,
    tty: bool,
}

async fn exec_url(cri: &mut common::Cri, id: &str, cmd: &[&str], io: &Stdio) -> Result<String, tonic::Status> {
    Ok(cri
        .runtime
        .exec(ExecRequest {
            container_id: id.into(),
            cmd: cmd.iter().map(|s| s.to_string()).collect(),
            tty: io.tty,
            stdin: io.stdin,
            stdout: io.stdout,
            stderr: io.stderr,
        })
        .await?
        .into_inner()
        .url)
}

/// An exec session with its streams open (as client-go opens them: error first).
struct Session {
    client: SpdyClient,
    error: u32,
    stdin: Option<u32>,
    stdout: Option<u32>,
    stderr: Option<u32>,
    resize: Option<u32>,
}

async fn start_exec(
    env: &TestEnv,
    cri: &mut common::Cri,
    id: &str,
    cmd: &[&str],
    io: Stdio,
    protocol: &[&str],
) -> Session {
    let url = exec_url(cri, id, cmd, &io).await.expect("Exec");
    assert!(url.starts_with("http://127.0.0.1:"), "an absolute URL on loopback: {url}");
    let client = SpdyClient::connect(&url, &env.netns, protocol).await.expect("upgrade");
    open_streams(client, &io).await
}

/// Opens the streams `io` implies, error first, as client-go does.
async fn open_streams(mut client: SpdyClient, io: &Stdio) -> Session {
    let error = client.open(&[("streamType", "error")]).await;
    let wanted = [(io.stdin, "stdin"), (io.stdout, "stdout"), (io.stderr && !io.tty, "stderr"), (io.tty, "resize")];
    let mut ids = [None; 4];
    for (slot, (on, kind)) in ids.iter_mut().zip(wanted) {
        if on {
            *slot = Some(client.open(&[("streamType", kind)]).await);
        }
    }
    Session { client, error, stdin: ids[0], stdout: ids[1], stderr: ids[2], resize: ids[3] }
}

fn status_of(bytes: &[u8]) -> serde_json::Value {
    serde_json::from_slice(bytes)
        .unwrap_or_else(|e| panic!("a Status JSON ({e}): {:?}", String::from_utf8_lossy(bytes)))
}

fn assert_exit(status: &serde_json::Value, code: i32) {
    if code == 0 {
        assert_eq!(status["status"], "Success", "{status}");
    } else {
        assert_eq!(status["status"], "Failure", "{status}");
        assert_eq!(status["reason"], "NonZeroExitCode", "{status}");
        assert_eq!(status["details"]["causes"][0]["reason"], "ExitCode", "{status}");
        assert_eq!(status["details"]["causes"][0]["message"], code.to_string(), "{status}");
    }
}

async fn running_busybox(env: &TestEnv, cri: &mut common::Cri, pod: PodSandboxConfig) -> (String, String) {
    let image = env.import_busybox(cri).await;
    let pod_id = cri.run_pod(pod.clone()).await.unwrap();
    let id = cri.run_container(&pod_id, &pod, container_config("box", &image, &["sleep", "100000"])).await;
    (pod_id, id)
}

#[tokio::test]
async fn exec_over_spdy_carries_stdio_exit_codes_resizes_and_large_output() {
    let mut env = TestEnv::new("execspdy");
    let mut cri = env.start().await;
    let (_pod, id) = running_busybox(&env, &mut cri, env.pod("exec")).await;

    // No terminal, no stdin: separate stdout and stderr, a non-zero exit code.
    let io = Stdio { stdin: false, stdout: true, stderr: true, tty: false };
    let mut s = start_exec(&env, &mut cri, &id, &["sh", "-c", "echo out; echo err >&2; exit 3"], io, &[V4]).await;
    assert_eq!(s.client.protocol.as_deref(), Some(V4));
    assert_eq!(s.client.read_to_end(s.stdout.unwrap(), LONG).await, b"out\n");
    assert_eq!(s.client.read_to_end(s.stderr.unwrap(), LONG).await, b"err\n");
    assert_exit(&status_of(&s.client.read_to_end(s.error, LONG).await), 3);

    // stdin forwarded, and its close is the command's end of file.
    let io = Stdio { stdin: true, stdout: true, stderr: true, tty: false };
    let mut s =
        start_exec(&env, &mut cri, &id, &["sh", "-c", "cat; echo done >&2"], io, &["v5.channel.k8s.io", V4]).await;
    assert_eq!(s.client.protocol.as_deref(), Some("v5.channel.k8s.io"), "the client's first choice");
    let stdin = s.stdin.unwrap();
    s.client.send(stdin, b"hello\nworld\n").await;
    s.client.finish(stdin).await;
    assert_eq!(s.client.read_to_end(s.stdout.unwrap(), LONG).await, b"hello\nworld\n");
    assert_eq!(s.client.read_to_end(s.stderr.unwrap(), LONG).await, b"done\n");
    assert_exit(&status_of(&s.client.read_to_end(s.error, LONG).await), 0);

    // A terminal: sizes applied as they come, input echoed, exit code kept.
    let io = Stdio { stdin: true, stdout: true, stderr: false, tty: true };
    // A resize and input travel on streams of their own: the script waits
    // for each size before it prints it (the read deadline bounds the wait).
    let script = format!(
        "read x; {}; echo got-$x; read y; {}; busybox tty >/dev/null && echo is-a-tty; exit 4",
        size_once("40 100"),
        size_once("50 120")
    );
    let mut s = start_exec(&env, &mut cri, &id, &["sh", "-c", &script], io, &[V4]).await;
    let (stdin, stdout, resize) = (s.stdin.unwrap(), s.stdout.unwrap(), s.resize.unwrap());
    s.client.send(resize, br#"{"Width":100,"Height":40}"#).await;
    s.client.send(stdin, b"abc\n").await;
    let seen = s.client.read_until(stdout, "got-abc", LONG).await;
    assert!(seen.contains("40 100"), "the first size: {seen:?}");
    s.client.send(resize, br#"{"Width":120,"Height":50}"#).await;
    s.client.send(stdin, b"\n").await;
    let rest = String::from_utf8_lossy(&s.client.read_to_end(stdout, LONG).await).into_owned();
    assert!(rest.contains("50 120"), "the second size: {rest:?}");
    assert!(rest.contains("is-a-tty"), "the command's stdin is its terminal: {rest:?}");
    assert!(rest.contains("\r\n"), "a terminal's line endings");
    assert_exit(&status_of(&s.client.read_to_end(s.error, LONG).await), 4);

    // A terminal without stdin.
    let io = Stdio { stdin: false, stdout: true, stderr: false, tty: true };
    let mut s = start_exec(&env, &mut cri, &id, &["echo", "hi"], io, &[V4]).await;
    assert_eq!(s.client.read_to_end(s.stdout.unwrap(), LONG).await, b"hi\r\n");
    assert_exit(&status_of(&s.client.read_to_end(s.error, LONG).await), 0);

    // 10 MB of output, every byte.
    let io = Stdio { stdin: false, stdout: true, stderr: true, tty: false };
    let cmd = ["sh", "-c", "dd if=/dev/zero bs=1048576 count=10 2>/dev/null"];
    let mut s = start_exec(&env, &mut cri, &id, &cmd, io, &[V4]).await;
    let out = s.client.read_to_end(s.stdout.unwrap(), Duration::from_secs(60)).await;
    assert_eq!(out.len(), 10 << 20);
    assert!(out.iter().all(|b| *b == 0));
    assert_exit(&status_of(&s.client.read_to_end(s.error, LONG).await), 0);

    // Older clients: v2 gets the error's text, v1 (no header) too; success is silence.
    for offered in [&["v2.channel.k8s.io"][..], &[][..]] {
        let io = Stdio { stdin: false, stdout: true, stderr: true, tty: false };
        let mut s = start_exec(&env, &mut cri, &id, &["sh", "-c", "echo old; exit 2"], io, offered).await;
        assert_eq!(s.client.read_to_end(s.stdout.unwrap(), LONG).await, b"old\n");
        let text = String::from_utf8_lossy(&s.client.read_to_end(s.error, LONG).await).into_owned();
        assert!(text.contains("non-zero exit code") && text.ends_with("exit code 2"), "{text:?}");
        let io = Stdio { stdin: false, stdout: true, stderr: false, tty: false };
        let mut s = start_exec(&env, &mut cri, &id, &["true"], io, offered).await;
        assert!(s.client.read_to_end(s.error, LONG).await.is_empty());
    }

    // A command that cannot start: the reason on the error stream.
    let io = Stdio { stdin: false, stdout: true, stderr: true, tty: false };
    let mut s = start_exec(&env, &mut cri, &id, &["no-such-command"], io, &[V4]).await;
    let status = status_of(&s.client.read_to_end(s.error, LONG).await);
    assert_eq!(status["status"], "Failure");
    assert!(status["message"].as_str().unwrap().contains("no-such-command"), "{status}");

    // No protocol in common: refused before any upgrade.
    let io = Stdio { stdin: false, stdout: true, stderr: false, tty: false };
    let url = exec_url(&mut cri, &id, &["true"], &io).await.unwrap();
    let refused = SpdyClient::connect(&url, &env.netns, &["v9.channel.k8s.io"]).await.err().expect("refused");
    assert_eq!(refused.status, 403);
    assert!(refused.body.contains("v4.channel.k8s.io"), "names what is spoken: {}", refused.body);
}

/// Open fds of a process; a socket is named by its line in the process's
/// `/proc/PID/net/{tcp,tcp6,unix}` (addresses, state), so that a failure
/// says which one stayed.
fn fd_targets(pid: i32) -> Vec<String> {
    let dir = format!("/proc/{pid}/fd");
    let mut tables = String::new();
    for table in ["tcp", "tcp6", "unix"] {
        for line in std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default().lines().skip(1) {
            tables.push_str(&format!("{table}: {}\n", line.split_whitespace().collect::<Vec<_>>().join(" ")));
        }
    }
    let describe = |target: String| match target.strip_prefix("socket:[").and_then(|t| t.strip_suffix(']')) {
        Some(inode) => match tables.lines().find(|l| l.split(' ').any(|field| field == inode)) {
            Some(line) => format!("{target} {line}"),
            None => target,
        },
        None => target,
    };
    let mut targets: Vec<String> = std::fs::read_dir(&dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter_map(|e| std::fs::read_link(e.path()).ok())
                .map(|t| describe(t.display().to_string()))
                .collect()
        })
        .unwrap_or_default();
    targets.sort();
    targets
}

#[tokio::test]
async fn a_vanished_exec_client_leaves_no_process_and_no_fd_behind() {
    let mut env = TestEnv::new("execgone");
    // No spare monitor: one is made in the background after each
    // CreateContainer, and its fds would come and go during the count.
    let mut config = std::fs::read_to_string(env.default_config()).unwrap();
    config.push_str("[container]\nspare_monitors = 0\n");
    std::fs::write(env.default_config(), config).unwrap();
    let mut cri = env.start().await;
    let (_pod, id) = running_busybox(&env, &mut cri, env.pod("gone")).await;
    let daemon = env.daemon_pid().unwrap();
    // One session first, so that everything made once (threads, pools) exists.
    let io = Stdio { stdin: true, stdout: true, stderr: false, tty: false };
    let mut s = start_exec(&env, &mut cri, &id, &["sh", "-c", "echo started; exec cat"], io, &[V4]).await;
    s.client.read_until(s.stdout.unwrap(), "started", LONG).await;
    s.client.finish(s.stdin.unwrap()).await;
    s.client.read_to_end(s.error, LONG).await;
    drop(s);
    let before = env.settled_fds_and_processes().await;
    let fds_before = fd_targets(daemon);

    for round in 0..100 {
        let tty = round % 2 == 1;
        let io = Stdio { stdin: true, stdout: true, stderr: !tty, tty };
        let mut s = start_exec(&env, &mut cri, &id, &["sh", "-c", "echo started; exec cat"], io, &[V4]).await;
        s.client.read_until(s.stdout.unwrap(), "started", LONG).await;
        s.client.vanish();
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let now = (env.daemon_fd_count(), env.cgroup_processes().len());
        if now.0 <= before.0 && now.1 <= before.1 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "after 100 vanished clients: (daemon fds, processes) {now:?}, before {before:?}; fds: {:?}, before {fds_before:?}",
            fd_targets(daemon)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The container itself is untouched.
    assert_eq!(cri.exec_ok(&id, &["echo", "alive"]).await, "alive\n");
}

/// The daemon's resident memory, in KiB.
fn daemon_rss_kib(env: &TestEnv) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", env.daemon_pid().unwrap())).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}

/// Waits until the test's cgroups hold at most `count` processes.
async fn wait_for_processes(env: &TestEnv, count: usize, within: Duration, what: &str) {
    let deadline = std::time::Instant::now() + within;
    while env.cgroup_processes().len() > count {
        assert!(std::time::Instant::now() < deadline, "{what}: its command still runs after {within:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn flooding_clients_cost_a_bounded_amount_and_are_noticed_when_they_vanish() {
    let mut env = TestEnv::new("flood");
    let mut cri = env.start().await;
    let (_pod, id) = running_busybox(&env, &mut cri, env.pod("flood")).await;
    let io = || Stdio { stdin: true, stdout: true, stderr: false, tty: false };
    // A command that reads no stdin and writes nothing more.
    let cmd = ["sh", "-c", "echo started; exec sleep 1000"];
    let before = env.settled_fds_and_processes().await;
    let rss_before = daemon_rss_kib(&env);
    let mut peak = rss_before;

    // SPDY: 64 MiB on the stdout stream (nobody reads what a client sends
    // there), then 64 MiB of stdin the command never reads, then the client vanishes.
    let mut s = start_exec(&env, &mut cri, &id, &cmd, io(), &[V4]).await;
    s.client.read_until(s.stdout.unwrap(), "started", LONG).await;
    let chunk = vec![b'x'; 1 << 20];
    for _ in 0..64 {
        s.client.send(s.stdout.unwrap(), &chunk).await;
    }
    peak = peak.max(daemon_rss_kib(&env));
    let stdin = s.stdin.unwrap();
    // The server stops reading once the connection's budget is spent: the send blocks.
    let flood = async {
        for _ in 0..64 {
            s.client.send(stdin, &chunk).await;
        }
    };
    let blocked = tokio::time::timeout(Duration::from_secs(3), flood).await.is_err();
    assert!(blocked, "64 MiB of unread stdin was all taken in: nothing slowed the client down");
    peak = peak.max(daemon_rss_kib(&env));
    s.client.vanish();
    wait_for_processes(&env, before.1, Duration::from_secs(20), "a vanished SPDY client with queued stdin").await;

    // WebSocket: 200 MiB of stdin to a command that does not read it, then gone.
    let url = exec_url(&mut cri, &id, &cmd, &io()).await.unwrap();
    let (mut socket, _) = websocket::connect(&url, &env.netns, &["v5.channel.k8s.io"]).await.expect("upgrade");
    websocket::read_until(&mut socket, 1, "started").await;
    // (Messages are at most 1 MiB: these are half of that.)
    let half = &chunk[..chunk.len() / 2];
    let flood = async {
        for _ in 0..400 {
            websocket::send(&mut socket, 0, half).await;
        }
    };
    let blocked = tokio::time::timeout(Duration::from_secs(3), flood).await.is_err();
    assert!(blocked, "200 MiB of unread stdin was all taken in over a WebSocket");
    peak = peak.max(daemon_rss_kib(&env));
    drop(socket);
    wait_for_processes(&env, before.1, Duration::from_secs(20), "a vanished WebSocket client with queued stdin").await;

    let (fds_after, _) = env.settled_fds_and_processes().await;
    let rss_after = daemon_rss_kib(&env);
    eprintln!("daemon RSS {rss_before} KiB before, {peak} KiB at most during the floods, {rss_after} KiB after; fds {} → {fds_after}", before.0);
    assert!(peak < rss_before + (16 << 10), "the floods took the daemon from {rss_before} to {peak} KiB");
    assert!(fds_after <= before.0, "fds {} → {fds_after}", before.0);
    assert_eq!(cri.exec_ok(&id, &["echo", "alive"]).await, "alive\n");
}

fn config_file(env: &TestEnv, text: &str) -> String {
    let path = env.base.join("config.toml");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[tokio::test]
async fn session_urls_are_single_use_expire_and_are_capped() {
    let env = TestEnv::new("tokens");
    // The idle timeout is longer than the steps between the first session's
    // start and the cap check, so no session ends by itself before it.
    let config = config_file(&env, "[streaming]\ntoken_ttl_secs = 2\nmax_sessions = 2\nidle_timeout_secs = 6\n");
    let mut env = env.with_args(&["--config", &config]);
    let mut cri = env.start().await;
    let (pod_id, id) = running_busybox(&env, &mut cri, env.pod("tokens")).await;
    let io = || Stdio { stdin: true, stdout: true, stderr: false, tty: false };

    // Unused past its TTL: refused.
    let late = exec_url(&mut cri, &id, &["true"], &io()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(SpdyClient::connect(&late, &env.netns, &[V4]).await.err().expect("expired").status, 404);
    // Used once: a second use is refused.
    let url = exec_url(&mut cri, &id, &["true"], &io()).await.unwrap();
    let first = SpdyClient::connect(&url, &env.netns, &[V4]).await.expect("first use");
    let again = SpdyClient::connect(&url, &env.netns, &[V4]).await.err().expect("second use refused");
    assert_eq!(again.status, 404);
    // A made-up token.
    let forged = format!("{}/exec/{}", &url[..url.find("/exec/").unwrap()], "0".repeat(48));
    assert_eq!(SpdyClient::connect(&forged, &env.netns, &[V4]).await.err().expect("forged").status, 404);

    // Two sessions at most.
    let second_url = exec_url(&mut cri, &id, &["cat"], &io()).await.unwrap();
    let second = SpdyClient::connect(&second_url, &env.netns, &[V4]).await.expect("second session");
    let third_url = exec_url(&mut cri, &id, &["cat"], &io()).await.unwrap();
    assert_eq!(SpdyClient::connect(&third_url, &env.netns, &[V4]).await.err().expect("over the cap").status, 429);
    // A request to another endpoint does not use a token up either.
    let elsewhere = third_url.replace("/exec/", "/attach/");
    assert_eq!(SpdyClient::connect(&elsewhere, &env.netns, &[V4]).await.err().expect("wrong endpoint").status, 404);
    first.vanish();
    second.vanish();
    // The server frees a vanished session's place once it notices; the URL
    // refused for the cap is still good.
    let deadline = std::time::Instant::now() + LONG;
    loop {
        match SpdyClient::connect(&third_url, &env.netns, &[V4]).await {
            Ok(session) => break session.vanish(),
            Err(refused) if refused.status == 429 && std::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(refused) => panic!("no room again once sessions end: {}", refused.status),
        }
    }

    // A session silent both ways past the idle timeout is closed, its command killed.
    let before = env.cgroup_processes().len();
    let mut idle = start_exec(&env, &mut cri, &id, &["sh", "-c", "echo started; exec sleep 1000"], io(), &[V4]).await;
    idle.client.read_until(idle.stdout.unwrap(), "started", LONG).await;
    assert!(env.cgroup_processes().len() > before);
    let closed = idle.client.read_to_end(idle.error, Duration::from_secs(30)).await;
    assert!(closed.is_empty(), "closed without an outcome: {:?}", String::from_utf8_lossy(&closed));
    assert!(idle.client.closed.load(std::sync::atomic::Ordering::SeqCst), "the server closed the connection");
    let deadline = std::time::Instant::now() + LONG;
    while env.cgroup_processes().len() > before {
        assert!(std::time::Instant::now() < deadline, "the idle session's command was not killed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // What the CRI refuses.
    let refused = |io: Stdio| {
        let mut cri = cri.clone();
        let id = id.clone();
        async move { exec_url(&mut cri, &id, &["true"], &io).await.expect_err("refused") }
    };
    let tty_stderr = refused(Stdio { stdin: false, stdout: true, stderr: true, tty: true }).await;
    assert_eq!(tty_stderr.code(), tonic::Code::InvalidArgument);
    assert!(tty_stderr.message().contains("stderr"), "{}", tty_stderr.message());
    let nothing = refused(Stdio { stdin: false, stdout: false, stderr: false, tty: false }).await;
    assert_eq!(nothing.code(), tonic::Code::InvalidArgument);
    let unknown = exec_url(&mut cri, &"ab".repeat(32), &["true"], &io()).await.err().unwrap();
    assert_eq!(unknown.code(), tonic::Code::NotFound);
    cri.stop_container(&id, 0).await.unwrap();
    let stopped = exec_url(&mut cri, &id, &["true"], &io()).await.err().unwrap();
    assert_eq!(stopped.code(), tonic::Code::FailedPrecondition);
    cri.stop_pod(&pod_id).await.unwrap();
    let pf = cri.runtime.port_forward(PortForwardRequest { pod_sandbox_id: pod_id, port: vec![80] }).await;
    assert_eq!(pf.err().unwrap().code(), tonic::Code::FailedPrecondition);
}

#[tokio::test]
async fn idle_connections_to_the_streaming_port_cannot_starve_the_daemon() {
    // A service's default descriptor limit, which nidus cannot raise.
    let mut env = TestEnv::new("idleconns").with_nofile(1024);
    let mut cri = env.start().await;
    let (_pod, id) = running_busybox(&env, &mut cri, env.pod("idle")).await;
    let url = exec_url(
        &mut cri,
        &id,
        &["echo", "still-served"],
        &Stdio { stdin: false, stdout: true, stderr: false, tty: false },
    )
    .await
    .unwrap();
    let authority = url.trim_start_matches("http://").split('/').next().unwrap().to_string();
    let (fds_before, _) = env.settled_fds_and_processes().await;
    assert!(host::raise_nofile() > 2500, "the test needs a higher RLIMIT_NOFILE hard limit");

    // 2,000 connections that never send a request line, from any local process.
    let netns = std::fs::File::open(format!("/run/netns/{}", env.netns)).unwrap();
    let idle: Vec<std::net::TcpStream> = std::thread::spawn(move || {
        nix::sched::setns(&netns, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
        (0..2000).map(|_| std::net::TcpStream::connect(&authority).expect("connect")).collect()
    })
    .join()
    .unwrap();
    let fds_during = env.daemon_fd_count();
    // Every CRI call still works.
    let pod = cri.run_pod(env.pod("beside")).await.expect("RunPodSandbox beside 2,000 idle connections");
    cri.remove_pod(&pod).await.unwrap();
    assert_eq!(cri.exec_ok(&id, &["echo", "fine"]).await.trim(), "fine");
    // The silent ones are cut within the request timeout (5 s).
    let mut closed = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    for mut conn in idle {
        use std::io::Read;
        conn.set_read_timeout(Some(
            deadline.saturating_duration_since(std::time::Instant::now()).max(Duration::from_millis(1)),
        ))
        .unwrap();
        if matches!(conn.read(&mut [0u8; 1]), Ok(0) | Err(_)) && std::time::Instant::now() < deadline {
            closed += 1;
        }
    }
    // Then sessions are served again (the URL was not used up meanwhile).
    let mut session = open_streams(
        SpdyClient::connect(&url, &env.netns, &[V4]).await.expect("a session once the idle connections are cut"),
        &Stdio { stdin: false, stdout: true, stderr: false, tty: false },
    )
    .await;
    let out = session.client.read_to_end(session.stdout.unwrap(), LONG).await;
    assert_eq!(String::from_utf8_lossy(&out), "still-served\n");
    drop(session);
    let (fds_after, _) = env.settled_fds_and_processes().await;
    eprintln!("daemon fds: {fds_before} before, {fds_during} with 2,000 idle connections, {fds_after} after");
    assert_eq!(closed, 2000, "idle connections left open");
    assert!(fds_during < fds_before + 200, "the daemon held {fds_during} fds (cap 128 pending connections)");
    assert!(fds_after <= fds_before + 2, "fds {fds_before} → {fds_after}");
}

/// Sends an HTTP GET on a new stream pair and returns the error stream's
/// and the data stream's bytes.
async fn open_pair(client: &mut SpdyClient, port: u16, request_id: usize) -> (u32, u32) {
    let (port, request_id) = (port.to_string(), request_id.to_string());
    let error = client.open(&[("streamType", "error"), ("port", &port), ("requestID", &request_id)]).await;
    let data = client.open(&[("streamType", "data"), ("port", &port), ("requestID", &request_id)]).await;
    (error, data)
}

async fn forwards_http(env: &TestEnv, cri: &mut common::Cri, pod: PodSandboxConfig, port: u16) {
    let image = env.import_busybox(cri).await;
    let pod_id = cri.run_pod(pod.clone()).await.unwrap();
    let serve = format!(
        "mkdir -p /www && echo hello-from-pod > /www/index.html && exec busybox httpd -f -p 127.0.0.1:{port} -h /www"
    );
    let id = cri.run_container(&pod_id, &pod, container_config("web", &image, &["sh", "-c", &serve])).await;
    // Until it listens.
    let probe = format!("wget -qO- http://127.0.0.1:{port}/");
    let deadline = std::time::Instant::now() + LONG;
    while cri.exec(&id, &["sh", "-c", &probe], 5).await.map(|o| o.exit_code).ok() != Some(0) {
        assert!(std::time::Instant::now() < deadline, "httpd never listened");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let url = cri
        .runtime
        .port_forward(PortForwardRequest { pod_sandbox_id: pod_id.clone(), port: vec![port.into()] })
        .await
        .unwrap()
        .into_inner()
        .url;
    assert!(url.starts_with("http://127.0.0.1:") && url.contains("/portforward/"), "{url}");
    let mut client = SpdyClient::connect(&url, &env.netns, &["portforward.k8s.io"]).await.expect("upgrade");
    assert_eq!(client.protocol.as_deref(), Some("portforward.k8s.io"));

    // 20 connections at once.
    let mut pairs = Vec::new();
    for n in 0..20 {
        let (error, data) = open_pair(&mut client, port, n).await;
        client.send(data, b"GET / HTTP/1.0\r\n\r\n").await;
        pairs.push((error, data));
    }
    for (error, data) in pairs {
        let reply = String::from_utf8_lossy(&client.read_to_end(data, LONG).await).into_owned();
        assert!(reply.starts_with("HTTP/1.") && reply.ends_with("hello-from-pod\n"), "{reply:?}");
        assert!(client.read_to_end(error, LONG).await.is_empty(), "no error");
    }
    // A port nothing listens on: the error on its error stream, and the session goes on.
    let (error, data) = open_pair(&mut client, 9, 100).await;
    let why = String::from_utf8_lossy(&client.read_to_end(error, LONG).await).into_owned();
    assert!(why.contains("port 9") && why.contains(&pod_id), "{why:?}");
    assert!(client.read_to_end(data, LONG).await.is_empty());
    let (error, data) = open_pair(&mut client, port, 101).await;
    client.send(data, b"GET / HTTP/1.0\r\n\r\n").await;
    assert!(String::from_utf8_lossy(&client.read_to_end(data, LONG).await).ends_with("hello-from-pod\n"));
    assert!(client.read_to_end(error, LONG).await.is_empty());

    // The same over a WebSocket (SPDY tunnelled in it, as crictl --transport websocket).
    let url = cri
        .runtime
        .port_forward(PortForwardRequest { pod_sandbox_id: pod_id.clone(), port: vec![] })
        .await
        .unwrap()
        .into_inner()
        .url;
    let (socket, chosen) =
        websocket::connect(&url, &env.netns, &["SPDY/3.1+portforward.k8s.io"]).await.expect("upgrade");
    assert_eq!(chosen.as_deref(), Some("SPDY/3.1+portforward.k8s.io"));
    let mut client = websocket::tunnel(socket, chosen);
    let mut pairs = Vec::new();
    for n in 0..5 {
        let (error, data) = open_pair(&mut client, port, n).await;
        client.send(data, b"GET / HTTP/1.0\r\n\r\n").await;
        pairs.push((error, data));
    }
    for (error, data) in pairs {
        assert!(String::from_utf8_lossy(&client.read_to_end(data, LONG).await).ends_with("hello-from-pod\n"));
        assert!(client.read_to_end(error, LONG).await.is_empty());
    }
}

#[tokio::test]
async fn exec_over_websocket_channels() {
    let mut env = TestEnv::new("execws");
    let mut cri = env.start().await;
    let (_pod, id) = running_busybox(&env, &mut cri, env.pod("ws")).await;

    // v5: stdin and its close signal, stdout and stderr apart, the exit code.
    let io = Stdio { stdin: true, stdout: true, stderr: true, tty: false };
    let url = exec_url(&mut cri, &id, &["sh", "-c", "cat; echo err >&2; exit 5"], &io).await.unwrap();
    let offered = ["v5.channel.k8s.io", V4];
    let (mut socket, chosen) = websocket::connect(&url, &env.netns, &offered).await.expect("upgrade");
    assert_eq!(chosen.as_deref(), Some("v5.channel.k8s.io"));
    websocket::send(&mut socket, 0, b"over a websocket\n").await;
    websocket::send(&mut socket, 255, &[0]).await;
    let (channels, messages) = websocket::read_all(&mut socket).await;
    assert_eq!(messages.first().map(Vec::as_slice), Some(&[1u8][..]), "first an empty stdout message");
    assert_eq!(channels[1], b"over a websocket\n");
    assert_eq!(channels[2], b"err\n");
    assert_exit(&status_of(&channels[3]), 5);

    // A terminal, resized through channel 4.
    let io = Stdio { stdin: true, stdout: true, stderr: false, tty: true };
    let script = format!("read x; {}", size_once("22 77"));
    let url = exec_url(&mut cri, &id, &["sh", "-c", &script], &io).await.unwrap();
    let (mut socket, _) = websocket::connect(&url, &env.netns, &[V4]).await.expect("upgrade");
    websocket::send(&mut socket, 4, br#"{"Width":77,"Height":22}"#).await;
    websocket::send(&mut socket, 0, b"\n").await;
    let (channels, _) = websocket::read_all(&mut socket).await;
    assert!(String::from_utf8_lossy(&channels[1]).contains("22 77"), "{:?}", String::from_utf8_lossy(&channels[1]));
    assert_exit(&status_of(&channels[3]), 0);

    // Nothing in common.
    let url = exec_url(&mut cri, &id, &["true"], &io).await.unwrap();
    assert_eq!(websocket::connect(&url, &env.netns, &["base64.binary.k8s.io"]).await.err(), Some(403));
}

#[tokio::test]
async fn port_forward_reaches_localhost_in_the_pods_network_namespace() {
    let mut env = TestEnv::new("pfpod");
    let mut cri = env.start().await;
    forwards_http(&env, &mut cri, env.pod("web"), 8080).await;
}

#[tokio::test]
async fn port_forward_reaches_a_host_network_pod() {
    let mut env = TestEnv::new("pfhost");
    let mut cri = env.start().await;
    let pod = with_namespaces(env.pod("hostweb"), NamespaceMode::Node, NamespaceMode::Pod, NamespaceMode::Pod);
    forwards_http(&env, &mut cri, pod, 8081).await;
}

async fn attach_url(cri: &mut common::Cri, id: &str, io: &Stdio) -> String {
    cri.runtime
        .attach(AttachRequest {
            container_id: id.into(),
            stdin: io.stdin,
            tty: io.tty,
            stdout: io.stdout,
            stderr: io.stderr,
        })
        .await
        .expect("Attach")
        .into_inner()
        .url
}

async fn start_attach(env: &TestEnv, cri: &mut common::Cri, id: &str, io: Stdio) -> Session {
    let url = attach_url(cri, id, &io).await;
    assert!(url.contains("/attach/"), "{url}");
    let client = SpdyClient::connect(&url, &env.netns, &[V4]).await.expect("upgrade");
    open_streams(client, &io).await
}

#[tokio::test]
async fn attach_to_a_containers_own_stdio() {
    let mut env = TestEnv::new("attach");
    let mut cri = env.start().await;
    let image = env.import_busybox(&mut cri).await;
    let pod = env.pod("attach");
    let pod_id = cri.run_pod(pod.clone()).await.unwrap();

    // Output already written is not replayed; what comes next reaches every attacher, and the log.
    let ticker = "i=0; while true; do i=$((i+1)); echo tick-$i; echo err-$i >&2; sleep 0.2; done";
    let ticks = cri.run_container(&pod_id, &pod, container_config("ticks", &image, &["sh", "-c", ticker])).await;
    cri.wait_for_line(&ticks, "tick-3", 20).await;
    let io = || Stdio { stdin: false, stdout: true, stderr: true, tty: false };
    let mut first = start_attach(&env, &mut cri, &ticks, io()).await;
    let mut second = start_attach(&env, &mut cri, &ticks, io()).await;
    for s in [&mut first, &mut second] {
        let seen = s.client.read_until(s.stdout.unwrap(), "tick-", LONG).await;
        let first_tick: u32 = seen.split("tick-").nth(1).unwrap().lines().next().unwrap().trim().parse().unwrap();
        assert!(first_tick > 3, "only output after attaching: {seen:?}");
        s.client.read_until(s.stderr.unwrap(), "err-", LONG).await;
    }
    // One leaves; the other keeps getting output; the log goes on.
    first.client.vanish();
    let stdout = second.stdout.unwrap();
    second.client.read_until(stdout, "\n", LONG).await;
    let later = second.client.read_until(stdout, "tick-", LONG).await;
    assert!(later.contains("tick-"));
    let last_logged = common::client::log_lines(&cri.logs(&ticks).await, "stdout").len();
    assert!(last_logged > 3, "the CRI log still gets the output");

    // stdin_once: the client's close is the container's end of file.
    let reader = "while read line; do echo got-$line; done; echo stdin-closed; sleep 1000";
    let mut config = container_config("once", &image, &["sh", "-c", reader]);
    config.stdin = true;
    config.stdin_once = true;
    let once = cri.run_container(&pod_id, &pod, config).await;
    let io = || Stdio { stdin: true, stdout: true, stderr: false, tty: false };
    let mut s = start_attach(&env, &mut cri, &once, io()).await;
    let (stdin, stdout) = (s.stdin.unwrap(), s.stdout.unwrap());
    s.client.send(stdin, b"a\n").await;
    s.client.read_until(stdout, "got-a", LONG).await;
    s.client.finish(stdin).await;
    s.client.read_until(stdout, "stdin-closed", LONG).await;

    // Without stdin_once the container's stdin outlives a client.
    let mut config = container_config("many", &image, &["sh", "-c", reader]);
    config.stdin = true;
    let many = cri.run_container(&pod_id, &pod, config).await;
    let mut s = start_attach(&env, &mut cri, &many, io()).await;
    let (stdin, stdout) = (s.stdin.unwrap(), s.stdout.unwrap());
    s.client.send(stdin, b"b\n").await;
    s.client.read_until(stdout, "got-b", LONG).await;
    s.client.finish(stdin).await;
    s.client.vanish();
    let mut s = start_attach(&env, &mut cri, &many, io()).await;
    let (stdin, stdout) = (s.stdin.unwrap(), s.stdout.unwrap());
    s.client.send(stdin, b"c\n").await;
    let seen = s.client.read_until(stdout, "got-c", LONG).await;
    assert!(!seen.contains("stdin-closed"), "{seen:?}");

    // A terminal container: input, resize, and the session ends with the container.
    let script = format!("read x; {}; echo bye-$x", size_once("19 91"));
    let mut config = container_config("term", &image, &["sh", "-c", &script]);
    config.stdin = true;
    config.tty = true;
    let term = cri.run_container(&pod_id, &pod, config).await;
    let mut s =
        start_attach(&env, &mut cri, &term, Stdio { stdin: true, stdout: true, stderr: false, tty: true }).await;
    let (stdin, stdout, resize) = (s.stdin.unwrap(), s.stdout.unwrap(), s.resize.unwrap());
    s.client.send(resize, br#"{"Width":91,"Height":19}"#).await;
    s.client.send(stdin, b"now\n").await;
    let rest = String::from_utf8_lossy(&s.client.read_to_end(stdout, LONG).await).into_owned();
    assert!(rest.contains("19 91") && rest.contains("bye-now"), "{rest:?}");
    assert_exit(&status_of(&s.client.read_to_end(s.error, LONG).await), 0);

    // What Attach refuses.
    let refused = cri
        .runtime
        .attach(AttachRequest { container_id: ticks.clone(), stdin: true, stdout: true, ..Default::default() })
        .await
        .expect_err("stdin of a container without stdin");
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
}

#[tokio::test]
async fn an_attach_ends_when_its_client_closes_stdin_or_detaches_and_the_container_goes_on() {
    let mut env = TestEnv::new("attachend");
    let mut cri = env.start().await;
    let image = env.import_busybox(&mut cri).await;
    let pod = env.pod("attachend");
    let pod_id = cri.run_pod(pod.clone()).await.unwrap();
    let reader = "while read line; do echo got-$line; done; echo stdin-closed; sleep 1000";
    let mut config = container_config("reader", &image, &["sh", "-c", reader]);
    config.stdin = true;
    let reader = cri.run_container(&pod_id, &pod, config).await;
    let io = || Stdio { stdin: true, stdout: true, stderr: false, tty: false };

    // `echo x | crictl attach -i`: the client's stdin ends, so does the session.
    for word in ["x", "y"] {
        let mut s = start_attach(&env, &mut cri, &reader, io()).await;
        let (stdin, stdout) = (s.stdin.unwrap(), s.stdout.unwrap());
        s.client.send(stdin, format!("{word}\n").as_bytes()).await;
        s.client.read_until(stdout, &format!("got-{word}"), LONG).await;
        s.client.finish(stdin).await;
        let out = String::from_utf8_lossy(&s.client.read_to_end(stdout, LONG).await).into_owned();
        assert!(!out.contains("stdin-closed"), "{out:?}");
        assert_exit(&status_of(&s.client.read_to_end(s.error, LONG).await), 0);
    }
    assert_eq!(cri.status_of(&reader).await.state(), ContainerState::ContainerRunning);

    // The same over WebSocket (v5 closes a channel with [255, channel]).
    let url = attach_url(&mut cri, &reader, &io()).await;
    let (mut socket, _) = websocket::connect(&url, &env.netns, &["v5.channel.k8s.io"]).await.expect("upgrade");
    websocket::send(&mut socket, 0, b"z\n").await;
    websocket::read_until(&mut socket, 1, "got-z").await;
    websocket::send(&mut socket, 255, &[0]).await;
    let (channels, _) = websocket::read_all(&mut socket).await;
    assert_exit(&status_of(&channels[3]), 0);
    // The container's stdin is still open for the next attacher.
    let mut s = start_attach(&env, &mut cri, &reader, io()).await;
    s.client.send(s.stdin.unwrap(), b"again\n").await;
    let seen = s.client.read_until(s.stdout.unwrap(), "got-again", LONG).await;
    assert!(!seen.contains("stdin-closed"), "{seen:?}");
    s.client.vanish();

    // A terminal: Ctrl-P Ctrl-Q detaches; the keys never reach the container.
    let mut config = container_config("term", &image, &["sh", "-c", "while read line; do echo got-$line; done"]);
    config.stdin = true;
    config.tty = true;
    let term = cri.run_container(&pod_id, &pod, config).await;
    let tty = || Stdio { stdin: true, stdout: true, stderr: false, tty: true };
    let mut s = start_attach(&env, &mut cri, &term, tty()).await;
    let (stdin, stdout) = (s.stdin.unwrap(), s.stdout.unwrap());
    s.client.send(stdin, b"one\n").await;
    s.client.read_until(stdout, "got-one", LONG).await;
    s.client.send(stdin, b"tw\x10o\n\x10\x11ignored\n").await;
    let rest = String::from_utf8_lossy(&s.client.read_to_end(stdout, LONG).await).into_owned();
    assert_exit(&status_of(&s.client.read_to_end(s.error, LONG).await), 0);
    assert!(!rest.contains("ignored"), "{rest:?}");
    let mut s = start_attach(&env, &mut cri, &term, tty()).await;
    s.client.send(s.stdin.unwrap(), b"three\n").await;
    s.client.read_until(s.stdout.unwrap(), "got-three", LONG).await;
    s.client.vanish();
    assert_eq!(cri.status_of(&term).await.state(), ContainerState::ContainerRunning);

    // Sessions that detach from a container writing nothing do not use up its attach slots.
    let mut config = container_config("quiet", &image, &["sleep", "100000"]);
    config.stdin = true;
    let quiet = cri.run_container(&pod_id, &pod, config).await;
    for _ in 0..12 {
        let mut s = start_attach(&env, &mut cri, &quiet, io()).await;
        s.client.finish(s.stdin.unwrap()).await;
        assert_exit(&status_of(&s.client.read_to_end(s.error, LONG).await), 0);
    }
}

#[tokio::test]
async fn tls_when_configured() {
    let env = TestEnv::new("tls");
    let (cert, key) = (env.base.join("cert.pem"), env.base.join("key.pem"));
    let made = std::process::Command::new("openssl")
        .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"])
        .args(["-addext", "subjectAltName=IP:127.0.0.1", "-addext", "basicConstraints=critical,CA:FALSE", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl");
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let config = format!("[streaming]\ntls_cert_file = \"{}\"\ntls_key_file = \"{}\"\n", cert.display(), key.display());
    let config = config_file(&env, &config);
    let mut env = env.with_args(&["--config", &config]);
    let mut cri = env.start().await;
    let (_pod, id) = running_busybox(&env, &mut cri, env.pod("tls")).await;
    let io = || Stdio { stdin: false, stdout: true, stderr: true, tty: false };
    let url = exec_url(&mut cri, &id, &["sh", "-c", "echo secret; exit 6"], &io()).await.unwrap();
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");
    let (authority, path) = common::spdy::split_url(&url);

    // Trusting the configured certificate: the session works.
    let mut roots = tokio_rustls::rustls::RootCertStore::empty();
    let pem = std::fs::read(&cert).unwrap();
    for c in rustls_pki_types::pem::PemObject::pem_slice_iter(&pem) {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = std::sync::Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let client_config = tokio_rustls::rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(client_config));
    let name = rustls_pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let tcp = common::spdy::connect_in_netns(&env.netns, &authority);
    let tls = connector.connect(name, tcp).await.expect("TLS handshake with the configured certificate");
    let mut client = SpdyClient::upgrade(tls, &authority, &path, &[V4]).await.expect("upgrade over TLS");
    let error = client.open(&[("streamType", "error")]).await;
    let stdout = client.open(&[("streamType", "stdout")]).await;
    client.open(&[("streamType", "stderr")]).await;
    assert_eq!(client.read_to_end(stdout, LONG).await, b"secret\n");
    assert_exit(&status_of(&client.read_to_end(error, LONG).await), 6);

    // Plain HTTP to the TLS port gets no session.
    let url = exec_url(&mut cri, &id, &["true"], &io()).await.unwrap();
    let plain = url.replacen("https://", "http://", 1);
    let (authority, path) = common::spdy::split_url(&plain);
    let tcp = common::spdy::connect_in_netns(&env.netns, &authority);
    let attempt = tokio::time::timeout(LONG, async move {
        tokio::task::spawn(async move { SpdyClient::upgrade(tcp, &authority, &path, &[V4]).await.is_ok() }).await
    })
    .await
    .expect("answered or closed in time");
    assert!(!matches!(attempt, Ok(true)), "no session without TLS");
}
