//! nidus as a systemd service: a daemon started with `NOTIFY_SOCKET` (a
//! datagram socket of the test's own, as systemd's) tells STATUS= lines
//! while it starts, READY=1 once its CRI socket answers, WATCHDOG=1 while it
//! serves when `WATCHDOG_USEC` is set for it (and not when it is set for
//! another process), and STOPPING=1 at SIGTERM.

mod common;

use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::time::{Duration, Instant};

use common::TestEnv;

/// The test's end of `NOTIFY_SOCKET`.
struct NotifySocket {
    socket: UnixDatagram,
    /// Every datagram received so far, in order.
    received: Vec<String>,
}

impl NotifySocket {
    fn bind(path: &Path) -> Self {
        let socket = UnixDatagram::bind(path).expect("binding the notify socket");
        socket.set_read_timeout(Some(Duration::from_millis(100))).expect("read timeout");
        Self { socket, received: Vec::new() }
    }

    /// Receives datagrams for up to `limit`, until `done` holds for what was
    /// received; whether it did.
    fn receive_until(&mut self, limit: Duration, done: impl Fn(&[String]) -> bool) -> bool {
        let deadline = Instant::now() + limit;
        let mut buf = vec![0u8; 4096];
        loop {
            if done(&self.received) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            if let Ok(n) = self.socket.recv(&mut buf) {
                self.received.push(String::from_utf8_lossy(&buf[..n]).into_owned());
            }
        }
    }

    /// How many datagrams carry the line `line`.
    fn count(&self, line: &str) -> usize {
        count(&self.received, line)
    }
}

fn count(received: &[String], line: &str) -> usize {
    received.iter().filter(|d| d.lines().any(|l| l == line)).count()
}

/// A daemon environment whose daemon gets `NOTIFY_SOCKET` (and `env`).
fn notified_env(label: &str, env: &[(&str, &str)]) -> (TestEnv, NotifySocket) {
    let mut test_env = TestEnv::new(label);
    let path = test_env.base.join("notify.sock");
    let socket = NotifySocket::bind(&path);
    test_env = test_env.with_env("NOTIFY_SOCKET", &path.display().to_string());
    for (name, value) in env {
        test_env = test_env.with_env(name, value);
    }
    (test_env, socket)
}

#[tokio::test]
async fn the_service_manager_hears_ready_once_the_socket_answers_and_stopping_at_sigterm() {
    let (mut env, mut notify) = notified_env("notify", &[]);
    let mut cri = env.start().await;
    assert!(
        notify.receive_until(Duration::from_secs(10), |r| count(r, "READY=1") > 0),
        "no READY=1 within 10 s of the socket answering; received {:?}; log:\n{}",
        notify.received,
        env.daemon_log()
    );
    let ready_at = notify.received.iter().position(|d| d.lines().any(|l| l == "READY=1")).unwrap_or(0);
    let ready = notify.received[ready_at].clone();
    assert!(
        ready.contains("STATUS=serving CRI runtime.v1") && ready.contains(&env.socket.display().to_string()),
        "READY=1 comes with a STATUS= naming the APIs and the socket: {ready:?}"
    );
    let before: Vec<&String> = notify.received[..ready_at].iter().collect();
    assert!(
        before.iter().any(|d| d.starts_with("STATUS=starting: reloading pods and containers")),
        "STATUS= lines tell the start's steps before READY=1: {before:?}"
    );
    assert!(before.iter().all(|d| !d.contains("READY=1")), "READY=1 is sent once");
    cri.version().await.expect("the socket answers once READY=1 is sent");

    assert_eq!(env.terminate_daemon(), Some(0), "a clean exit at SIGTERM");
    assert!(
        notify.receive_until(Duration::from_secs(5), |r| count(r, "STOPPING=1") > 0),
        "no STOPPING=1 at SIGTERM; received {:?}",
        notify.received
    );
    assert_eq!(notify.count("READY=1"), 1, "READY=1 once: {:?}", notify.received);
    assert_eq!(notify.count("WATCHDOG=1"), 0, "no watchdog pings without WATCHDOG_USEC: {:?}", notify.received);
}

#[tokio::test]
async fn the_watchdog_is_pinged_at_half_its_timeout_while_the_socket_answers() {
    // 0.6 s: a ping every 0.3 s.
    let (mut env, mut notify) = notified_env("watchdog", &[("WATCHDOG_USEC", "600000")]);
    let _cri = env.start().await;
    let started = Instant::now();
    assert!(
        notify.receive_until(Duration::from_secs(10), |r| count(r, "WATCHDOG=1") >= 4),
        "fewer than 4 watchdog pings within 10 s; received {:?}; log:\n{}",
        notify.received,
        env.daemon_log()
    );
    assert!(started.elapsed() >= Duration::from_millis(600), "pings every half timeout, not faster");
    let first_ping = notify.received.iter().position(|d| d.lines().any(|l| l == "WATCHDOG=1")).unwrap_or(0);
    let ready_at = notify.received.iter().position(|d| d.lines().any(|l| l == "READY=1"));
    assert!(ready_at.is_some_and(|r| r < first_ping), "READY=1 before the first ping: {:?}", notify.received);
    assert_eq!(env.terminate_daemon(), Some(0));
}

#[tokio::test]
async fn a_watchdog_meant_for_another_process_is_not_pinged() {
    // WATCHDOG_PID names PID 1: the timeout is not this daemon's.
    let (mut env, mut notify) = notified_env("watchdog-pid", &[("WATCHDOG_USEC", "200000"), ("WATCHDOG_PID", "1")]);
    let _cri = env.start().await;
    assert!(
        notify.receive_until(Duration::from_secs(10), |r| count(r, "READY=1") > 0),
        "no READY=1; received {:?}",
        notify.received
    );
    notify.receive_until(Duration::from_millis(1500), |_| false);
    assert_eq!(notify.count("WATCHDOG=1"), 0, "pinged another process's watchdog: {:?}", notify.received);
    assert_eq!(env.terminate_daemon(), Some(0));
}
