//! An HTTP proxy in front of a test registry, inside the test's network
//! namespace, that can demand bearer tokens (and serve them from its own
//! small token service), stall, trickle or slow blob downloads, and answer
//! chosen paths with canned bodies; it counts the blob bodies it is sending.
//! One request per connection (`Connection: close`).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::in_netns;

/// What the proxy does; changed while it runs.
#[derive(Debug, Clone, Default)]
pub struct Behaviour {
    /// `(username, password, token)`: every registry request needs
    /// `Authorization: Bearer <token>`, got from `/token` with basic auth,
    /// or by POSTing `password` as an OAuth2 refresh token.
    pub bearer: Option<(String, String, String)>,
    /// Blob bodies above 64 KiB (layers, not configs) stop after half their
    /// bytes (the connection stays open).
    pub stall_blobs: bool,
    /// The next this many blob bodies above 64 KiB stop after half their
    /// bytes and their connection closes (a lost connection).
    pub cut_blobs: usize,
    /// Blob bodies are sent at about this many bytes per second.
    pub throttle_bytes_per_sec: Option<usize>,
    /// `Range` headers are not passed on: the registry answers every blob
    /// request whole, as a registry that cannot resume downloads does.
    pub ignore_range: bool,
    /// Blob bodies above 64 KiB send half their bytes, then one byte per
    /// this interval (a registry that never quite stops).
    pub trickle_blobs: Option<Duration>,
    /// Requests whose path starts with `path` are answered `200 OK` with
    /// this body and content type, before anything else (the token service
    /// too).
    pub canned: Vec<Canned>,
}

/// A canned answer (see [`Behaviour::canned`]).
#[derive(Debug, Clone)]
pub struct Canned {
    pub path: String,
    pub content_type: String,
    pub body: Vec<u8>,
}

pub struct Proxy {
    pub behaviour: Arc<Mutex<Behaviour>>,
    stop: Arc<AtomicBool>,
    /// Blob bodies being sent now (their connections open).
    sending: Arc<AtomicUsize>,
}

impl Proxy {
    /// Listens on 127.0.0.1:`port` in `netns`, forwarding to 127.0.0.1:`upstream`.
    pub fn start(netns: &str, port: u16, upstream: u16, behaviour: Behaviour) -> Self {
        let listener = in_netns(netns, move || TcpListener::bind(("127.0.0.1", port)).expect("proxy listen"));
        let proxy = Self { behaviour: Arc::new(Mutex::new(behaviour)), stop: Arc::default(), sending: Arc::default() };
        let (behaviour, stop, sending) = (proxy.behaviour.clone(), proxy.stop.clone(), proxy.sending.clone());
        let netns = netns.to_string();
        // Connections to the registry are made from threads in the netns.
        std::thread::spawn(move || {
            in_netns(&netns, move || {
                for client in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(client) = client else { continue };
                    let (behaviour, stop, sending) = (behaviour.clone(), stop.clone(), sending.clone());
                    std::thread::spawn(move || {
                        let _ = serve(client, port, upstream, &behaviour, &stop, &sending);
                    });
                }
            })
        });
        proxy
    }

    pub fn set(&self, change: impl FnOnce(&mut Behaviour)) {
        change(&mut self.behaviour.lock().unwrap());
    }

    /// Blob bodies being sent now: each holds a connection from the daemon open.
    pub fn blobs_sending(&self) -> usize {
        self.sending.load(Ordering::SeqCst)
    }
}

/// Counts a blob body as being sent until dropped.
struct Sending<'a>(&'a AtomicUsize);

impl<'a> Sending<'a> {
    fn start(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        Self(count)
    }
}

impl Drop for Sending<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Whether the client has closed its end (or reset the connection).
fn client_gone(client: &TcpStream) -> bool {
    if client.set_nonblocking(true).is_err() {
        return true;
    }
    let mut byte = [0u8; 1];
    let gone = match client.peek(&mut byte) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
    };
    let _ = client.set_nonblocking(false);
    gone
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn read_head(stream: &mut TcpStream) -> std::io::Result<String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte)? == 0 {
            break;
        }
        if head.is_empty() && byte[0] == 0x16 {
            // A TLS handshake: this proxy speaks plain HTTP only.
            return Err(std::io::Error::other("TLS client hello"));
        }
        head.push(byte[0]);
    }
    Ok(String::from_utf8_lossy(&head).into_owned())
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

fn reply(client: &mut TcpStream, status: &str, headers: &[(&str, String)], body: &[u8]) -> std::io::Result<()> {
    let mut out = format!("HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n", body.len());
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    client.write_all(out.as_bytes())?;
    client.write_all(body)
}

fn serve(
    mut client: TcpStream,
    port: u16,
    upstream: u16,
    behaviour: &Mutex<Behaviour>,
    stop: &AtomicBool,
    sending: &AtomicUsize,
) -> std::io::Result<()> {
    let head = read_head(&mut client)?;
    let mut first = head.lines().next().unwrap_or_default().split(' ');
    let (method, path) = (first.next().unwrap_or_default().to_string(), first.next().unwrap_or_default().to_string());
    let shared = behaviour;
    let behaviour = shared.lock().unwrap().clone();
    if let Some(canned) = behaviour.canned.iter().find(|c| path.starts_with(&c.path)) {
        return reply(&mut client, "200 OK", &[("Content-Type", canned.content_type.clone())], &canned.body);
    }
    if let Some((user, password, token)) = &behaviour.bearer {
        use base64::Engine;
        if path.starts_with("/token") {
            let expected =
                format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}")));
            // OAuth2: a POSTed form exchanging the refresh token `password` (an identity token).
            let length: usize = header(&head, "content-length").and_then(|n| n.parse().ok()).unwrap_or(0);
            let mut form = vec![0u8; length.min(64 << 10)];
            client.read_exact(&mut form)?;
            let form = String::from_utf8_lossy(&form).into_owned();
            let refreshed = method == "POST"
                && form.split('&').any(|kv| kv == "grant_type=refresh_token")
                && form.split('&').any(|kv| kv == format!("refresh_token={password}"));
            return if refreshed || header(&head, "authorization") == Some(expected.as_str()) {
                reply(&mut client, "200 OK", &[], format!("{{\"token\":\"{token}\"}}").as_bytes())
            } else {
                reply(&mut client, "401 Unauthorized", &[], b"{}")
            };
        }
        if header(&head, "authorization") != Some(format!("Bearer {token}").as_str()) {
            let challenge = format!(
                "Bearer realm=\"http://127.0.0.1:{port}/token\",service=\"nidus-test\",scope=\"repository:test:pull\""
            );
            return reply(&mut client, "401 Unauthorized", &[("WWW-Authenticate", challenge)], b"{}");
        }
    }
    let mut registry = TcpStream::connect(("127.0.0.1", upstream))?;
    let accept = header(&head, "accept").map(|a| format!("Accept: {a}\r\n")).unwrap_or_default();
    let range = match header(&head, "range") {
        Some(range) if !behaviour.ignore_range => format!("Range: {range}\r\n"),
        _ => String::new(),
    };
    write!(
        registry,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{upstream}\r\n{accept}{range}Connection: close\r\n\r\n"
    )?;
    let mut response = Vec::new();
    registry.read_to_end(&mut response)?;
    let split = response.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4).unwrap_or(response.len());
    let (response_head, body) = response.split_at(split);
    let is_blob = method == "GET" && path.contains("/blobs/");
    let _sending = is_blob.then(|| Sending::start(sending));
    if is_blob && behaviour.stall_blobs && body.len() > 64 << 10 {
        client.write_all(response_head)?;
        client.write_all(&body[..body.len() / 2])?;
        while !stop.load(Ordering::SeqCst) && !client_gone(&client) {
            std::thread::sleep(Duration::from_millis(100));
        }
        return Ok(());
    }
    if let (true, Some(interval)) = (is_blob && body.len() > 64 << 10, behaviour.trickle_blobs) {
        client.write_all(response_head)?;
        client.write_all(&body[..body.len() / 2])?;
        for byte in &body[body.len() / 2..] {
            let next = std::time::Instant::now() + interval;
            while std::time::Instant::now() < next {
                if stop.load(Ordering::SeqCst) || client_gone(&client) {
                    return Ok(());
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            client.write_all(std::slice::from_ref(byte))?;
        }
        return Ok(());
    }
    if is_blob && body.len() > 64 << 10 && behaviour.cut_blobs > 0 {
        shared.lock().unwrap().cut_blobs -= 1;
        client.write_all(response_head)?;
        client.write_all(&body[..body.len() / 2])?;
        return Ok(());
    }
    if let (true, Some(rate)) = (is_blob, behaviour.throttle_bytes_per_sec) {
        client.write_all(response_head)?;
        for chunk in body.chunks((rate / 10).max(1)) {
            if stop.load(Ordering::SeqCst) || client_gone(&client) {
                return Ok(());
            }
            client.write_all(chunk)?;
            std::thread::sleep(Duration::from_millis(100));
        }
        return Ok(());
    }
    client.write_all(&response)
}
