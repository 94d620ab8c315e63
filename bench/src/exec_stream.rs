//! The streaming exec round trip: `Exec` of `echo` through the CRI, then
//! the URL's SPDY/3.1 session (remotecommand v4: error, stdout and stderr
//! streams) until the output and the exit status have arrived; N times per
//! runtime, one at a time, in one sleeping pod. The client connects from
//! inside the runtime's network namespace, where its streaming server listens.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use nidus::streaming::spdy::frame::{self, Frame};
use nidus::streaming::spdy::headers::{HeaderReader, HeaderWriter, Headers};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};

use crate::lifecycle::{remove_pod, start_sleeping_pod, Target};
use crate::runtime::Runtime;

/// Most time one round trip may take.
const ROUND_TRIP_LIMIT: Duration = Duration::from_secs(30);

/// N timed round trips against `rt`.
pub async fn measure(rt: &Runtime, target: &Target, n: usize) -> Result<Vec<Duration>> {
    let pod = start_sleeping_pod(target, &format!("exec-{}", rt.name())).await?;
    let mut samples = Vec::with_capacity(n);
    let mut failure = None;
    for _ in 0..n + 1 {
        let began = Instant::now();
        match tokio::time::timeout(ROUND_TRIP_LIMIT, round_trip(target, &pod.container_id, &rt.netns.path())).await {
            Ok(Ok(())) => samples.push(began.elapsed()),
            Ok(Err(e)) => failure = Some(e),
            Err(_) => failure = Some(anyhow::anyhow!("no round trip within {ROUND_TRIP_LIMIT:?}")),
        }
        if failure.is_some() {
            break;
        }
    }
    let _ = remove_pod(target, &pod.pod_id).await;
    if let Some(e) = failure {
        return Err(e.context(format!("{}: streaming exec", rt.name())));
    }
    // The first one, untimed, warms the connection paths.
    samples.remove(0);
    Ok(samples)
}

async fn round_trip(target: &Target, container_id: &str, netns: &Path) -> Result<()> {
    let url = target.cri.exec_url(container_id, &["echo", "hi"]).await?;
    let rest = url.strip_prefix("http://").with_context(|| format!("not an http URL: {url}"))?;
    let (authority, path) = rest.split_at(rest.find('/').context("a URL without a path")?);
    let mut tcp = connect_in(netns, authority)?;
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\
         X-Stream-Protocol-Version: v4.channel.k8s.io\r\nContent-Length: 0\r\n\r\n"
    );
    tcp.write_all(request.as_bytes()).await?;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if tcp.read(&mut byte).await? == 0 {
            bail!("the streaming server closed before answering");
        }
        head.push(byte[0]);
    }
    if !head.starts_with(b"HTTP/1.1 101") {
        bail!("upgrade refused: {}", String::from_utf8_lossy(&head).lines().next().unwrap_or_default());
    }
    let (read_half, mut write_half) = tcp.into_split();
    let mut writer = HeaderWriter::new()?;
    for (id, kind) in [(1u32, "error"), (3, "stdout"), (5, "stderr")] {
        let block = writer.compress(&Headers(vec![("streamType".into(), kind.into())]))?;
        write_half.write_all(&frame::syn_stream(id, false, &block)).await?;
    }
    let mut reader = BufReader::new(read_half);
    let mut headers = HeaderReader::new();
    let (mut stdout, mut status) = (Vec::new(), Vec::new());
    let mut open = [1u32, 3, 5];
    while open.iter().any(|id| *id != 0) {
        match frame::read(&mut reader).await? {
            Some(Frame::SynReply { block, .. }) | Some(Frame::Headers { block, .. }) => {
                headers.decompress(&block)?;
            }
            Some(Frame::Data { id, fin, data }) => {
                match id {
                    1 => status.extend_from_slice(&data),
                    3 => stdout.extend_from_slice(&data),
                    _ => {}
                }
                if fin {
                    open.iter_mut().filter(|o| **o == id).for_each(|o| *o = 0);
                }
            }
            Some(Frame::Ping { id }) => write_half.write_all(&frame::ping(id)).await?,
            Some(Frame::GoAway) | None => break,
            Some(_) => {}
        }
    }
    if stdout != b"hi\n" {
        bail!("unexpected output {:?}", String::from_utf8_lossy(&stdout));
    }
    if !String::from_utf8_lossy(&status).contains("Success") {
        bail!("unexpected status {:?}", String::from_utf8_lossy(&status));
    }
    Ok(())
}

/// A TCP connection made from inside the network namespace at `netns`.
fn connect_in(netns: &Path, authority: &str) -> Result<tokio::net::TcpStream> {
    let (netns, authority) = (netns.to_path_buf(), authority.to_string());
    let std_stream = std::thread::spawn(move || -> Result<std::net::TcpStream> {
        let ns = std::fs::File::open(&netns).with_context(|| format!("{}", netns.display()))?;
        nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET).context("setns")?;
        Ok(std::net::TcpStream::connect(&authority)?)
    })
    .join()
    .map_err(|_| anyhow::anyhow!("the connecting thread panicked"))??;
    std_stream.set_nonblocking(true)?;
    std_stream.set_nodelay(true)?;
    Ok(tokio::net::TcpStream::from_std(std_stream)?)
}

/// The p-th percentile (0..=100) of `samples`, in milliseconds.
pub fn percentile_ms(samples: &[Duration], p: f64) -> f64 {
    let mut sorted: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
    sorted.sort_by(|a, b| a.total_cmp(b));
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// Runs both and prints p50/p99 and the ratio.
pub async fn compare(runtimes: [(&Runtime, &Target); 2], n: usize) -> (String, Vec<String>) {
    let mut lines = vec![format!("streaming exec round trip (Exec of echo until output and exit status), N={n}:")];
    let mut errors = Vec::new();
    let mut p50s = Vec::new();
    for (rt, target) in runtimes {
        match measure(rt, target, n).await {
            Ok(samples) => {
                let (p50, p99) = (percentile_ms(&samples, 50.0), percentile_ms(&samples, 99.0));
                lines.push(format!("  {:<11} p50 {p50:8.2} ms   p99 {p99:8.2} ms", rt.name()));
                p50s.push(p50);
            }
            Err(e) => errors.push(format!("{e:#}")),
        }
    }
    if let [nidus, containerd] = p50s[..] {
        lines.push(format!("  nidus/containerd p50: {:.2} (target <= 0.20)", nidus / containerd));
    }
    (lines.join("\n") + "\n", errors)
}
