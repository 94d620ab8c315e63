//! nidus's built-in pod network, used when no CNI configuration exists: a
//! Linux bridge in the node's namespace whose first address of each pod CIDR
//! is the pods' gateway, a veth pair per pod (its pod end made directly in
//! the pause's namespace as `eth0`), an address per family leased from the
//! pod CIDRs and persisted crash-safely, a default route via the bridge,
//! host ports forwarded by kernel DNAT rules, and (unless turned off) source
//! NAT for what pods send off the node. All of it in-process over netlink
//! but the NAT tables, written with `nft`: no plugin programs run.

pub(crate) mod hostport;
pub(crate) mod leases;
pub(crate) mod links;
pub(crate) mod masquerade;
pub(crate) mod nft;

use std::convert::Infallible;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use ipnet::IpNet;

use super::{Attachment, Backend, NetworkSettings, PodInfo, POD_IFNAME};
use crate::linux::reaper::Reaper;
use crate::network::lock;
use crate::undo::Undo;

#[derive(Debug, thiserror::Error)]
pub(crate) enum BuiltinError {
    #[error("{0}")]
    Netlink(#[from] links::LinkError),
    #[error("cannot open a netlink connection: {0}")]
    Connect(std::io::Error),
    #[error("address leases: {0}")]
    Leases(std::io::Error),
    #[error("{0}")]
    Lease(#[from] leases::LeaseError),
    #[error("{0}")]
    HostPort(#[from] hostport::HostPortError),
    #[error("{0}")]
    Unusable(String),
}

pub(crate) struct Builtin {
    bridge: String,
    leases: Arc<leases::Leases>,
    host_ports: hostport::HostPorts,
    handle: tokio::sync::OnceCell<rtnetlink::Handle>,
    /// The bridge's index and the networks it has gateways for, once set
    /// up (re-checked at each attach).
    bridge_ready: Mutex<Option<(u32, Vec<IpNet>)>>,
    /// Serialises the bridge's creation.
    bridge_setup: tokio::sync::Mutex<()>,
    /// Whether the kernel makes bridges and veth pairs (probed at start).
    kernel_support: std::sync::OnceLock<Result<(), String>>,
    /// `network.masquerade`.
    masquerade: bool,
    /// Collects the exits of the `nft` runs.
    reaper: Reaper,
    /// What became of the NAT table at the bridge's last set-up (Status
    /// verbose): `pending` until the first pod, `on`, `off`, or the error.
    masquerade_state: Mutex<String>,
}

/// The host end of a pod's veth: `nv` and the first 12 characters of its id.
pub(crate) fn host_veth_name(sandbox_id: &str) -> String {
    format!("nv{}", sandbox_id.get(..12).unwrap_or(sandbox_id))
}

impl Builtin {
    pub(crate) fn new(config: &NetworkSettings, root: &Path, reaper: Reaper) -> std::io::Result<Self> {
        let dir: PathBuf = root.join("network").join("builtin").join("leases");
        Ok(Self {
            bridge: config.bridge_name.clone(),
            leases: Arc::new(leases::Leases::open(&dir)?),
            host_ports: hostport::HostPorts::new(&config.bridge_name, reaper.clone()),
            handle: tokio::sync::OnceCell::new(),
            bridge_ready: Mutex::new(None),
            bridge_setup: tokio::sync::Mutex::new(()),
            kernel_support: std::sync::OnceLock::new(),
            masquerade: config.masquerade,
            reaper,
            masquerade_state: Mutex::new("pending".into()),
        })
    }

    /// Whether the built-in network can serve pods here: CAP_NET_ADMIN, and
    /// a kernel that makes bridges and veth pairs (once probed).
    pub(crate) fn usable(&self) -> Result<(), BuiltinError> {
        match caps::has_cap(None, caps::CapSet::Effective, caps::Capability::CAP_NET_ADMIN) {
            Ok(true) => {}
            Ok(false) => return Err(BuiltinError::Unusable("nidus lacks CAP_NET_ADMIN".into())),
            Err(e) => return Err(BuiltinError::Unusable(format!("cannot read capabilities: {e}"))),
        }
        match self.kernel_support.get() {
            Some(Err(why)) => Err(BuiltinError::Unusable(why.clone())),
            _ => Ok(()),
        }
    }

    /// Probes (once, at start) whether the kernel makes bridges and veth
    /// pairs, by making one of each and deleting it.
    pub(crate) async fn probe(&self) {
        if self.kernel_support.get().is_some() || self.usable().is_err() {
            return;
        }
        let outcome = match self.handle().await {
            Ok(handle) => {
                links::probe(handle, &format!("{}", std::process::id() % 1_000_000)).await.map_err(|e| e.to_string())
            }
            Err(e) => Err(e.to_string()),
        };
        if let Err(why) = &outcome {
            tracing::warn!(reason = %why, "the built-in pod network cannot work on this kernel");
        }
        let _ = self.kernel_support.set(outcome);
    }

    async fn handle(&self) -> Result<&rtnetlink::Handle, BuiltinError> {
        self.handle.get_or_try_init(|| async { links::connect().map_err(BuiltinError::Connect) }).await
    }

    async fn bridge(&self, handle: &rtnetlink::Handle, nets: &[IpNet]) -> Result<u32, BuiltinError> {
        let current = links::index_of(handle, &self.bridge).await?;
        let ready = lock(&self.bridge_ready).clone();
        if let (Some(index), Some((known, known_nets))) = (current, ready) {
            if index == known && known_nets == nets {
                return Ok(index);
            }
        }
        let _setup = self.bridge_setup.lock().await;
        let index = links::ensure_bridge(handle, &self.bridge, nets).await?;
        self.set_up_masquerade().await;
        *lock(&self.bridge_ready) = Some((index, nets.to_vec()));
        tracing::info!(bridge = %self.bridge, nets = ?nets, "built-in network bridge ready");
        Ok(index)
    }

    /// Writes (or removes) the bridge's NAT table. A failure leaves pods
    /// networked but unable to reach beyond the node: it is logged and
    /// shown in Status verbose, and tried again at the next set-up.
    async fn set_up_masquerade(&self) {
        let state = match masquerade::apply(&self.bridge, self.masquerade, &self.reaper).await {
            Ok(()) if self.masquerade => "on".to_string(),
            Ok(()) => "off".to_string(),
            Err(e) => {
                tracing::warn!(bridge = %self.bridge, error = %e, "pods of the built-in network cannot reach beyond the node");
                format!("failed: {e}")
            }
        };
        *lock(&self.masquerade_state) = state;
    }

    /// What became of the NAT table (Status verbose).
    pub(crate) fn masquerade_state(&self) -> String {
        lock(&self.masquerade_state).clone()
    }

    /// Attaches a pod, each step registering its undo in `undo` (the pod's).
    pub(crate) async fn attach<'a>(
        &'a self,
        pod: &PodInfo,
        nets: &[IpNet],
        undo: &Undo<'a>,
    ) -> Result<Vec<IpAddr>, BuiltinError> {
        let started = std::time::Instant::now();
        // Each undo is registered before its step, and finds nothing to do
        // where the step made nothing: a lease of one family may be taken
        // before the other's fails, a veth may exist on one end only.
        let (leases, owner) = (self.leases.clone(), pod.sandbox_id.clone());
        undo.push_async("built-in addresses leased", move || async move {
            tokio::task::spawn_blocking(move || leases.release(&owner)).await.map_err(std::io::Error::other)?
        });
        let leases = self.leases.clone();
        let (owner, wanted) = (pod.sandbox_id.clone(), nets.to_vec());
        let ips = tokio::task::spawn_blocking(move || leases.lease(&owner, &wanted))
            .await
            .map_err(|e| BuiltinError::Leases(std::io::Error::other(e)))??;
        let leased = started.elapsed();
        let handle = self.handle().await?;
        let bridge = self.bridge(handle, nets).await?;
        let netns = PathBuf::from(format!("/proc/{}/ns/net", pod.pause_pid));
        let host_veth = host_veth_name(&pod.sandbox_id);
        let veth = host_veth.clone();
        undo.push_async("built-in veth", move || async move {
            let handle = self.handle().await?;
            links::delete_link(handle, &veth).await?;
            Ok::<_, BuiltinError>(())
        });
        links::add_veth(handle, &host_veth, POD_IFNAME, &netns, bridge).await?;
        let veth = started.elapsed();
        let in_pod = links::connect_in(&netns).await.map_err(BuiltinError::Connect)?;
        let connected = started.elapsed();
        let addresses: Vec<(IpAddr, IpNet)> = ips.iter().copied().zip(nets.iter().copied()).collect();
        links::configure_pod(&in_pod, POD_IFNAME, &addresses).await?;
        drop(in_pod);
        let configured = started.elapsed();
        let mut ips = ips;
        ips.sort_by_key(|ip| ip.is_ipv6());
        if !pod.host_ports.is_empty() {
            let owner = pod.sandbox_id.clone();
            undo.push_async("built-in host ports", move || async move {
                self.host_ports.close(&owner).await;
                Ok::<_, Infallible>(())
            });
            self.host_ports.open(&pod.sandbox_id, &pod.host_ports, &ips).await?;
        }
        tracing::debug!(
            pod_id = %pod.sandbox_id,
            leased_us = leased.as_micros() as u64,
            veth_us = veth.as_micros() as u64,
            connected_us = connected.as_micros() as u64,
            configured_us = configured.as_micros() as u64,
            total_us = started.elapsed().as_micros() as u64,
            "built-in network attached"
        );
        Ok(ips)
    }

    /// Detaches a pod: host ports closed, veth deleted, addresses released.
    /// Idempotent; what is already gone is skipped.
    pub(crate) async fn detach(&self, attachment: &Attachment) -> Result<(), BuiltinError> {
        let started = std::time::Instant::now();
        self.host_ports.close(&attachment.sandbox_id).await;
        if let Backend::Builtin { host_veth, .. } = &attachment.backend {
            let handle = self.handle().await?;
            links::delete_link(handle, host_veth).await?;
        }
        let deleted = started.elapsed();
        let leases = self.leases.clone();
        let owner = attachment.sandbox_id.clone();
        tokio::task::spawn_blocking(move || leases.release(&owner))
            .await
            .map_err(|e| BuiltinError::Leases(std::io::Error::other(e)))?
            .map_err(BuiltinError::Leases)?;
        tracing::debug!(
            pod_id = %attachment.sandbox_id,
            veth_deleted_us = deleted.as_micros() as u64,
            total_us = started.elapsed().as_micros() as u64,
            "built-in network detached"
        );
        Ok(())
    }

    /// After a daemon restart: a running pod's host ports, forwarded again
    /// at `sync_host_ports` (their rules are still in the kernel till then).
    pub(crate) async fn resume(&self, attachment: &Attachment) {
        if let Backend::Builtin { host_ports, .. } = &attachment.backend {
            if !host_ports.is_empty() && !attachment.ips.is_empty() {
                self.host_ports.restore(&attachment.sandbox_id, host_ports, &attachment.ips).await;
            }
        }
    }

    /// After every running pod resumed: the host-port rules rewritten for
    /// exactly those pods.
    pub(crate) async fn sync_host_ports(&self) {
        self.host_ports.sync().await;
    }

    /// Releases the leases whose owner has no attachment record.
    pub(crate) fn sweep(&self, owners: &[String]) -> std::io::Result<()> {
        for owner in self.leases.owners() {
            if !owners.contains(&owner) {
                tracing::warn!(pod_id = %owner, "releasing built-in addresses no pod network owns");
                self.leases.release(&owner)?;
            }
        }
        Ok(())
    }

    /// Addresses leased (Status verbose).
    pub(crate) fn leased(&self) -> usize {
        self.leases.count()
    }
}
