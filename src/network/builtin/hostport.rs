//! Host ports of the built-in network, forwarded by the daemon itself: a
//! listener on the node's host port per mapping, each accepted connection
//! (TCP) or each client (UDP) relayed to the pod's address and port. Nothing
//! is left in the kernel for a crash to leak: the listeners close with the
//! daemon, and a restarted daemon opens them again for the pods still
//! running. The price: the pod sees the daemon as the peer, not the client.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::task::JoinSet;

use crate::network::lock;
use crate::network::HostPort;

/// A UDP client's relay ends after this long without traffic.
const UDP_IDLE: Duration = Duration::from_secs(60);

#[derive(Default)]
pub struct HostPorts {
    /// The forwarding tasks of each pod; dropping a set stops them all.
    by_pod: Mutex<HashMap<String, JoinSet<()>>>,
}

impl HostPorts {
    /// Opens every mapping of a pod at `pod_ip` (replacing any it had). A
    /// port that cannot be bound fails the whole, leaving none open.
    pub async fn open(&self, sandbox_id: &str, mappings: &[HostPort], pod_ips: &[IpAddr]) -> std::io::Result<()> {
        let mut tasks = JoinSet::new();
        for mapping in mappings {
            let host_ip = mapping.host_ip.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
            // The pod address of the host address's family (IPv4 for the wildcard).
            let Some(pod_ip) = pod_ips.iter().find(|ip| ip.is_ipv6() == host_ip.is_ipv6()).copied() else {
                return Err(std::io::Error::other(format!(
                    "host port {}: the pod has no {} address",
                    mapping.host_port,
                    if host_ip.is_ipv6() { "IPv6" } else { "IPv4" }
                )));
            };
            let listen = SocketAddr::new(host_ip, mapping.host_port);
            let target = SocketAddr::new(pod_ip, mapping.container_port);
            let bind_error = |e: std::io::Error| {
                std::io::Error::new(e.kind(), format!("cannot listen on host port {listen}/{}: {e}", mapping.protocol))
            };
            match mapping.protocol.as_str() {
                "tcp" => {
                    let listener = TcpListener::bind(listen).await.map_err(bind_error)?;
                    tasks.spawn(forward_tcp(listener, target));
                }
                "udp" => {
                    let socket = UdpSocket::bind(listen).await.map_err(bind_error)?;
                    tasks.spawn(forward_udp(Arc::new(socket), target));
                }
                other => {
                    return Err(std::io::Error::other(format!(
                    "host port {}: protocol {other} is not supported by the built-in network (use a CNI configuration)",
                    mapping.host_port
                )))
                }
            }
        }
        tracing::debug!(pod_id = %sandbox_id, ports = mappings.len(), "host ports open");
        lock(&self.by_pod).insert(sandbox_id.to_string(), tasks);
        Ok(())
    }

    /// Closes a pod's host ports (and its forwarded connections).
    pub fn close(&self, sandbox_id: &str) {
        let tasks = lock(&self.by_pod).remove(sandbox_id);
        drop(tasks);
    }
}

async fn forward_tcp(listener: TcpListener, target: SocketAddr) {
    let mut connections = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let Ok((mut client, _)) = accepted else { continue };
        connections.spawn(async move {
            if let Ok(mut pod) = TcpStream::connect(target).await {
                let _ = tokio::io::copy_bidirectional(&mut client, &mut pod).await;
            }
        });
    }
}

async fn forward_udp(socket: Arc<UdpSocket>, target: SocketAddr) {
    let mut relays: HashMap<SocketAddr, Arc<UdpSocket>> = HashMap::new();
    let mut replies = JoinSet::new();
    let mut buf = vec![0u8; 65536];
    loop {
        let received = tokio::select! {
            received = socket.recv_from(&mut buf) => received,
            Some(Ok(client)) = replies.join_next(), if !replies.is_empty() => {
                relays.remove(&client);
                continue;
            }
        };
        let Ok((len, client)) = received else { continue };
        let relay = match relays.get(&client) {
            Some(relay) => relay.clone(),
            None => {
                let local: IpAddr =
                    if target.is_ipv6() { Ipv6Addr::UNSPECIFIED.into() } else { Ipv4Addr::UNSPECIFIED.into() };
                let Ok(relay) = UdpSocket::bind(SocketAddr::new(local, 0)).await else { continue };
                if relay.connect(target).await.is_err() {
                    continue;
                }
                let relay = Arc::new(relay);
                relays.insert(client, relay.clone());
                let (back, listener) = (relay.clone(), socket.clone());
                replies.spawn(async move {
                    let mut buf = vec![0u8; 65536];
                    while let Ok(Ok(len)) = tokio::time::timeout(UDP_IDLE, back.recv(&mut buf)).await {
                        let _ = listener.send_to(&buf[..len], client).await;
                    }
                    client
                });
                relay
            }
        };
        let _ = relay.send(&buf[..len]).await;
    }
}
