//! A SPDY/3.1 streaming client for the tests, as kubectl/crictl speak it:
//! the HTTP/1.1 upgrade with `X-Stream-Protocol-Version`, streams opened by
//! SYN_STREAM with headers, data with FIN, and a reader that files what
//! arrives per stream. Frames and header blocks use nidus's codec (the wire
//! format is checked against stock crictl separately).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nidus::streaming::spdy::frame::{self, Frame};
use nidus::streaming::spdy::headers::{HeaderReader, HeaderWriter, Headers};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

/// Where the reader files each stream's data.
type Routes = Arc<Mutex<HashMap<u32, mpsc::UnboundedSender<Option<Vec<u8>>>>>>;

/// What one stream received: data chunks, then None at its FIN or reset.
type Inbox = mpsc::UnboundedReceiver<Option<Vec<u8>>>;

pub struct SpdyClient {
    pub protocol: Option<String>,
    writer: Box<dyn AsyncWrite + Send + Unpin>,
    headers: HeaderWriter,
    next_id: u32,
    routes: Routes,
    inboxes: HashMap<u32, Inbox>,
    /// True once the server ended the connection (GOAWAY or close).
    pub closed: Arc<std::sync::atomic::AtomicBool>,
    reader: tokio::task::JoinHandle<()>,
}

/// A refused upgrade: the HTTP status and body.
#[derive(Debug)]
pub struct Refused {
    pub status: u16,
    pub body: String,
}

/// `http(s)://HOST:PORT/PATH` → (HOST:PORT, /PATH).
pub fn split_url(url: &str) -> (String, String) {
    let rest = url.strip_prefix("http://").or_else(|| url.strip_prefix("https://")).expect("an http(s):// URL");
    let slash = rest.find('/').expect("a path");
    (rest[..slash].to_string(), rest[slash..].to_string())
}

impl SpdyClient {
    /// Connects to `url` from inside the network namespace `netns` (the
    /// test's, where the daemon listens) and upgrades, offering `protocols`.
    pub async fn connect(url: &str, netns: &str, protocols: &[&str]) -> Result<SpdyClient, Refused> {
        let (authority, path) = split_url(url);
        let tcp = connect_in_netns(netns, &authority);
        Self::upgrade(tcp, &authority, &path, protocols).await
    }

    /// The HTTP/1.1 upgrade to SPDY on `io` (plain TCP or TLS).
    pub async fn upgrade<IO>(mut io: IO, authority: &str, path: &str, protocols: &[&str]) -> Result<SpdyClient, Refused>
    where
        IO: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let mut request = format!(
            "POST {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nContent-Length: 0\r\n"
        );
        for p in protocols {
            request.push_str(&format!("X-Stream-Protocol-Version: {p}\r\n"));
        }
        request.push_str("\r\n");
        io.write_all(request.as_bytes()).await.expect("send the upgrade request");
        let (status, head_headers, body) = read_response_head(&mut io).await;
        if status != 101 {
            return Err(Refused { status, body });
        }
        let protocol = head_headers.get("x-stream-protocol-version").cloned();
        let (read_half, writer) = tokio::io::split(io);
        Ok(Self::over(read_half, writer, protocol))
    }

    /// A client on an established byte stream (e.g. tunnelled in a WebSocket).
    pub fn over(
        read_half: impl AsyncRead + Send + Unpin + 'static,
        writer: impl AsyncWrite + Send + Unpin + 'static,
        protocol: Option<String>,
    ) -> SpdyClient {
        let routes: Routes = Arc::default();
        let closed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reader = tokio::spawn(read_loop(read_half, routes.clone(), closed.clone()));
        SpdyClient {
            protocol,
            writer: Box::new(writer),
            headers: HeaderWriter::new().expect("zlib"),
            next_id: 1,
            routes,
            inboxes: HashMap::new(),
            closed,
            reader,
        }
    }

    /// Opens a stream with `pairs` as headers; returns its id.
    pub async fn open(&mut self, pairs: &[(&str, &str)]) -> u32 {
        let id = self.next_id;
        self.next_id += 2;
        let (tx, rx) = mpsc::unbounded_channel();
        self.routes.lock().unwrap().insert(id, tx);
        self.inboxes.insert(id, rx);
        let block = self
            .headers
            .compress(&Headers(pairs.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect()))
            .unwrap();
        self.writer.write_all(&frame::syn_stream(id, false, &block)).await.expect("send SYN_STREAM");
        id
    }

    pub async fn send(&mut self, id: u32, data: &[u8]) {
        for chunk in data.chunks(16 << 10) {
            let _ = self.writer.write_all(&frame::data_head(id, false, chunk.len())).await;
            let _ = self.writer.write_all(chunk).await;
        }
    }

    /// Half-closes stream `id`.
    pub async fn finish(&mut self, id: u32) {
        let _ = self.writer.write_all(&frame::data_head(id, true, 0)).await;
    }

    /// Everything stream `id` receives until its end (at most `limit`).
    pub async fn read_to_end(&mut self, id: u32, limit: Duration) -> Vec<u8> {
        let inbox = self.inboxes.get_mut(&id).expect("a stream we opened");
        let mut all = Vec::new();
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            match tokio::time::timeout_at(deadline, inbox.recv()).await {
                Ok(Some(Some(chunk))) => all.extend_from_slice(&chunk),
                Ok(Some(None)) | Ok(None) => return all,
                Err(_) => panic!("stream {id} did not end within {limit:?}; got {} bytes", all.len()),
            }
        }
    }

    /// Reads stream `id` until `want` appears in what came (at most `limit`).
    pub async fn read_until(&mut self, id: u32, want: &str, limit: Duration) -> String {
        let inbox = self.inboxes.get_mut(&id).expect("a stream we opened");
        let mut all = Vec::new();
        let deadline = tokio::time::Instant::now() + limit;
        while !String::from_utf8_lossy(&all).contains(want) {
            match tokio::time::timeout_at(deadline, inbox.recv()).await {
                Ok(Some(Some(chunk))) => all.extend_from_slice(&chunk),
                _ => panic!("{want:?} did not come on stream {id}; got {:?}", String::from_utf8_lossy(&all)),
            }
        }
        String::from_utf8_lossy(&all).into_owned()
    }

    /// Drops the connection at once, as a client that crashed.
    pub fn vanish(self) {
        self.reader.abort();
        drop(self.writer);
    }
}

/// A TCP connection to `authority` made from inside `/run/netns/NETNS`.
pub fn connect_in_netns(netns: &str, authority: &str) -> TcpStream {
    let path = format!("/run/netns/{netns}");
    let authority = authority.to_string();
    let std_stream = std::thread::spawn(move || {
        let ns = std::fs::File::open(&path).expect("the test's network namespace");
        nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
        std::net::TcpStream::connect(&authority).expect("connect to the streaming server")
    })
    .join()
    .expect("the connecting thread");
    std_stream.set_nonblocking(true).unwrap();
    TcpStream::from_std(std_stream).unwrap()
}

async fn read_response_head(tcp: &mut (impl AsyncRead + Unpin)) -> (u16, HashMap<String, String>, String) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = tcp.read(&mut byte).await.expect("read the response");
        assert!(n == 1, "the server closed before its response; got {:?}", String::from_utf8_lossy(&head));
        head.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let mut lines = text.split("\r\n");
    let status = lines.next().and_then(|l| l.split_whitespace().nth(1)).and_then(|s| s.parse().ok()).unwrap_or(0);
    let headers: HashMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut body = String::new();
    if status != 101 {
        let length: usize = headers.get("content-length").and_then(|l| l.parse().ok()).unwrap_or(0);
        let mut buf = vec![0u8; length];
        let _ = tcp.read_exact(&mut buf).await;
        body = String::from_utf8_lossy(&buf).into_owned();
    }
    (status, headers, body)
}

async fn read_loop(read_half: impl AsyncRead + Unpin, routes: Routes, closed: Arc<std::sync::atomic::AtomicBool>) {
    let mut reader = tokio::io::BufReader::new(read_half);
    let mut headers = HeaderReader::new();
    loop {
        let frame = match frame::read(&mut reader).await {
            Ok(Some(frame)) => frame,
            _ => break,
        };
        match frame {
            Frame::SynReply { block, .. } | Frame::SynStream { block, .. } | Frame::Headers { block, .. } => {
                headers.decompress(&block).expect("the server's header block decodes");
            }
            Frame::Data { id, fin, data } => {
                let routes = routes.lock().unwrap();
                if let Some(tx) = routes.get(&id) {
                    if !data.is_empty() {
                        let _ = tx.send(Some(data.to_vec()));
                    }
                    if fin {
                        let _ = tx.send(None);
                    }
                }
            }
            Frame::RstStream { id } => {
                if let Some(tx) = routes.lock().unwrap().get(&id) {
                    let _ = tx.send(None);
                }
            }
            Frame::GoAway => break,
            Frame::Ping { .. } | Frame::Ignored => {}
        }
    }
    closed.store(true, std::sync::atomic::Ordering::SeqCst);
    for tx in routes.lock().unwrap().values() {
        let _ = tx.send(None);
    }
}
