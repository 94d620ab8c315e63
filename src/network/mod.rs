//! Pod networking: which network serves a pod (the first valid CNI
//! configuration, else nidus's built-in bridge network when `builtin = "auto"`,
//! else none: loopback only), attaching a pod at RunPodSandbox and detaching
//! it at Stop/Remove (from the attachment cache, so after a restart or a
//! reboot too), the pod's addresses, and NetworkReady.

pub(crate) mod builtin;
pub(crate) mod cache;
pub(crate) mod cni;
pub(crate) mod pod_cidr;
pub(crate) mod runtime_config;

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use crate::linux::reaper::Reaper;
use crate::store::{Durability, StoreError};
use crate::undo::Undo;

pub(crate) use crate::config::network::{BuiltinMode, NetworkSettings};
pub(crate) use cache::{Attachment, AttachmentCache, Backend};

/// The pod's interface name.
pub(crate) const POD_IFNAME: &str = "eth0";

#[derive(Debug, thiserror::Error)]
pub(crate) enum NetworkError {
    #[error("pod network: {0}")]
    Cni(#[from] cni::CniError),
    #[error("built-in pod network: {0}")]
    Builtin(#[from] builtin::BuiltinError),
    #[error("pod network cache: {0}")]
    Store(#[from] StoreError),
    #[error("pod network cache: {0}")]
    Io(#[from] std::io::Error),
    #[error("the cached CNI configuration of pod {0} is unusable: {1}")]
    BadCache(String, String),
    #[error("{0}")]
    Invalid(String),
    #[error("the pod network is not ready: {0}")]
    NotReady(String),
}

/// A host port forwarded to a pod port.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct HostPort {
    /// `tcp`, `udp` or `sctp`.
    pub(crate) protocol: String,
    pub(crate) host_ip: Option<IpAddr>,
    pub(crate) host_port: u16,
    pub(crate) container_port: u16,
}

/// What a pod's attachment needs to know of it.
#[derive(Debug, Clone)]
pub(crate) struct PodInfo {
    pub(crate) sandbox_id: String,
    pub(crate) name: String,
    pub(crate) namespace: String,
    pub(crate) uid: String,
    pub(crate) host_ports: Vec<HostPort>,
    pub(crate) dns: Option<crate::api::DnsConfig>,
    pub(crate) annotations: HashMap<String, String>,
    /// The pause process holding the pod's network namespace.
    pub(crate) pause_pid: i32,
}

/// NetworkReady as Status reports it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Readiness {
    Ready,
    NotReady { reason: String, message: String },
}

/// The network a new pod would get.
enum Chosen {
    Cni(cni::NetworkList),
    Builtin,
    /// None configured: loopback only.
    None(String),
    /// CNI configuration files that are all unusable: no pod is made.
    Broken(String),
}

struct Loaded {
    fingerprint: Vec<(PathBuf, u64, Option<std::time::SystemTime>)>,
    result: Result<cni::NetworkList, cni::conf::NoList>,
}

pub(crate) struct PodNetworks {
    config: NetworkSettings,
    cache: AttachmentCache,
    cni: cni::CniClient,
    builtin: builtin::Builtin,
    /// The pod CIDRs in force (kubelet's, kept across restarts, or the config's).
    pod_cidrs: pod_cidr::PodCidrs,
    /// The configuration directory as last read.
    loaded: Mutex<Option<Loaded>>,
    /// Addresses of attached pods, by sandbox id.
    ips: Mutex<HashMap<String, Vec<IpAddr>>>,
    /// Records each attach's time.
    metrics: crate::metrics::Metrics,
}

/// What DEL and CHECK repeat from a CNI-attached pod's cache entry.
struct CachedCniCall<'a> {
    /// The network list of its ADD.
    list: cni::NetworkList,
    /// The arguments for the pod in the namespace the call names.
    pod_args: cni::PodArgs,
    /// The ADD's result (None until ADD finished).
    result: Option<&'a serde_json::Value>,
}

/// The CNI call of `attachment` for the pod in `netns`; None for the built-in network.
fn cached_cni_call(attachment: &Attachment, netns: String) -> Result<Option<CachedCniCall<'_>>, NetworkError> {
    let Backend::Cni { file, list, args, runtime_config, result } = &attachment.backend else {
        return Ok(None);
    };
    let list = cni::NetworkList::from_value(file, list.clone())
        .map_err(|e| NetworkError::BadCache(attachment.sandbox_id.clone(), e))?;
    let pod_args = cni::PodArgs {
        container_id: attachment.sandbox_id.clone(),
        netns,
        ifname: attachment.ifname.clone(),
        args: args.clone(),
        runtime_config: runtime_config.clone(),
    };
    Ok(Some(CachedCniCall { list, pod_args, result: result.as_ref() }))
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl PodNetworks {
    pub(crate) fn new(
        config: NetworkSettings,
        root: &std::path::Path,
        reaper: Reaper,
        metrics: crate::metrics::Metrics,
    ) -> std::io::Result<Arc<Self>> {
        let cache = AttachmentCache::open(root)?;
        let cni = cni::CniClient {
            bin_dirs: config.cni_bin_dirs.clone(),
            timeout: Duration::from_secs(config.plugin_timeout_secs),
            reaper: reaper.clone(),
        };
        let builtin = builtin::Builtin::new(&config, root, reaper)?;
        let pod_cidrs = pod_cidr::PodCidrs::load(&root.join("network"), &config.pod_cidr);
        let mut ips = HashMap::new();
        for id in cache.ids() {
            match cache.read(&id) {
                Ok(Some(a)) if !a.ips.is_empty() => {
                    ips.insert(id, a.ips);
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(pod_id = %id, error = %e, "unreadable pod network cache entry"),
            }
        }
        Ok(Arc::new(Self {
            config,
            cache,
            cni,
            builtin,
            pod_cidrs,
            loaded: Mutex::new(None),
            ips: Mutex::new(ips),
            metrics,
        }))
    }

    /// The first valid CNI list, re-read when the directory or the plugin
    /// directories changed.
    fn cni_list(&self) -> Result<cni::NetworkList, cni::conf::NoList> {
        let dir = &self.config.cni_conf_dir;
        let fingerprint = cni::conf::fingerprint(dir, &self.config.cni_bin_dirs);
        let mut loaded = lock(&self.loaded);
        if let Some(l) = loaded.as_ref().filter(|l| l.fingerprint == fingerprint) {
            return l.result.clone();
        }
        let result = cni::conf::load_first(dir, &self.config.cni_bin_dirs);
        match &result {
            Ok(list) => {
                tracing::info!(file = %list.file.display(), network = %list.name, "CNI network configuration loaded")
            }
            Err(e) => tracing::info!(reason = %e, "no CNI network configuration in use"),
        }
        *loaded = Some(Loaded { fingerprint, result: result.clone() });
        result
    }

    /// The network new pods get: the first valid CNI list; with none at
    /// all, the built-in network (`builtin = "auto"`); with configuration
    /// files that are all unusable, none (NetworkReady false naming them, as
    /// containerd): the operator meant a CNI network, and a pod must not get
    /// another one silently.
    fn choose(&self) -> Chosen {
        match self.cni_list() {
            Ok(list) => Chosen::Cni(list),
            Err(why @ cni::conf::NoList::Invalid(_)) => Chosen::Broken(why.to_string()),
            Err(why) => match self.config.builtin {
                BuiltinMode::Auto => match self.builtin.usable() {
                    Ok(()) => Chosen::Builtin,
                    Err(e) => Chosen::None(format!("{why}, and the built-in network is unusable here: {e}")),
                },
                BuiltinMode::Off => {
                    Chosen::None(format!("{why}, and the built-in network is off (network.builtin = \"off\")"))
                }
            },
        }
    }

    /// At start: whether the built-in network can work on this kernel (when
    /// it may be used).
    pub(crate) async fn probe(&self) {
        if self.config.builtin == BuiltinMode::Auto {
            self.builtin.probe().await;
        }
    }

    /// The pod CIDRs in force.
    pub(crate) fn pod_cidrs(&self) -> Vec<IpNet> {
        self.pod_cidrs.in_force()
    }

    /// UpdateRuntimeConfig: new pod CIDRs (comma-separated); empty keeps them.
    pub(crate) fn set_pod_cidrs(&self, text: &str) -> Result<(), pod_cidr::PodCidrError> {
        self.pod_cidrs.set(text, crate::clock::now_ns())
    }

    /// NetworkReady: true exactly when new pods get a usable network.
    pub(crate) fn readiness(&self) -> Readiness {
        match self.choose() {
            Chosen::Cni(_) => Readiness::Ready,
            Chosen::Builtin => Readiness::Ready,
            Chosen::None(why) | Chosen::Broken(why) => {
                Readiness::NotReady { reason: "NetworkPluginNotReady".into(), message: why }
            }
        }
    }

    /// Status(verbose): what serves new pods.
    pub(crate) fn describe(&self) -> serde_json::Value {
        match self.choose() {
            Chosen::Cni(list) => {
                serde_json::json!({"kind": "cni", "file": list.file, "name": list.name, "cniVersion": list.cni_version,
                    "podCidr": self.pod_cidrs.describe()})
            }
            Chosen::Builtin => serde_json::json!({"kind": "builtin", "bridge": self.config.bridge_name,
                "podCidrs": self.pod_cidrs().iter().map(|c| c.to_string()).collect::<Vec<_>>(),
                "podCidr": self.pod_cidrs.describe(),
                "leasedAddresses": self.builtin.leased(), "masquerade": self.builtin.masquerade_state()}),
            Chosen::None(why) => {
                serde_json::json!({"kind": "none", "reason": why, "podCidr": self.pod_cidrs.describe()})
            }
            Chosen::Broken(why) => {
                serde_json::json!({"kind": "broken", "reason": why, "podCidr": self.pod_cidrs.describe()})
            }
        }
    }

    /// The addresses of an attached pod (IPv4 first).
    pub(crate) fn ips(&self, sandbox_id: &str) -> Vec<IpAddr> {
        lock(&self.ips).get(sandbox_id).cloned().unwrap_or_default()
    }

    /// Attaches a pod (RunPodSandbox). Each step registers its undo in
    /// `undo`, the pod's: a failure here, or later in RunPodSandbox, undoes
    /// the attachment with the rest of the pod.
    pub(crate) async fn attach<'a>(&'a self, pod: &PodInfo, undo: &Undo<'a>) -> Result<Vec<IpAddr>, NetworkError> {
        let started = std::time::Instant::now();
        let netns = format!("/proc/{}/ns/net", pod.pause_pid);
        let attached = match self.choose() {
            Chosen::None(why) => {
                tracing::info!(pod_id = %pod.sandbox_id, reason = %why, "no pod network: the pod gets loopback only");
                return Ok(Vec::new());
            }
            Chosen::Broken(why) => return Err(NetworkError::NotReady(why)),
            Chosen::Cni(list) => (self.attach_cni(pod, list, &netns, undo).await, "cni"),
            Chosen::Builtin => (self.attach_builtin(pod, undo).await, "builtin"),
        };
        let (attached, network) = attached;
        self.metrics.network_set_up(network, attached.is_ok(), started.elapsed());
        match attached {
            Ok(ips) => {
                tracing::info!(pod_id = %pod.sandbox_id, ips = ?ips, elapsed_us = started.elapsed().as_micros() as u64, "pod network attached");
                lock(&self.ips).insert(pod.sandbox_id.clone(), ips.clone());
                let sandbox_id = pod.sandbox_id.clone();
                undo.push("pod addresses", move || {
                    lock(&self.ips).remove(&sandbox_id);
                    Ok::<_, Infallible>(())
                });
                Ok(ips)
            }
            Err(e) => {
                tracing::warn!(pod_id = %pod.sandbox_id, error = %e, "pod network set-up failed; it is undone with the pod");
                Err(e)
            }
        }
    }

    async fn attach_cni<'a>(
        &'a self,
        pod: &PodInfo,
        list: cni::NetworkList,
        netns: &str,
        undo: &Undo<'a>,
    ) -> Result<Vec<IpAddr>, NetworkError> {
        let args = runtime_config::cni_args(pod).map_err(NetworkError::Invalid)?;
        let runtime_config = runtime_config::for_cni(pod, &self.pod_cidrs_set());
        let mut attachment = Attachment {
            sandbox_id: pod.sandbox_id.clone(),
            ifname: POD_IFNAME.into(),
            backend: Backend::Cni {
                file: list.file.clone(),
                list: list.raw.clone(),
                args: args.clone(),
                runtime_config: runtime_config.clone(),
                result: None,
            },
            ips: Vec::new(),
        };
        // The intent first: a crash from here on leaves what DEL needs.
        self.cache.write(&attachment, Durability::Durable)?;
        let pod_args = cni::PodArgs {
            container_id: pod.sandbox_id.clone(),
            netns: netns.to_string(),
            ifname: POD_IFNAME.into(),
            args,
            runtime_config,
        };
        // The record and the ADD it announces are undone together: DEL
        // through the list (an ADD that failed half-way, or never ran, is
        // DEL's to clean up, as the CNI spec has it), then the record. A DEL
        // that fails keeps the record, for the next start's sweep to DEL again.
        let (sandbox_id, del_list, del_args) = (pod.sandbox_id.clone(), list.clone(), pod_args.clone());
        undo.push_async("CNI attachment (record, ADD)", move || async move {
            self.cni.del(&del_list, &del_args, None).await?;
            self.cache.remove(&sandbox_id, Durability::Durable)?;
            Ok::<_, NetworkError>(())
        });
        let result = self.cni.add(&list, &pod_args).await?;
        let ips = cni::result::pod_ips(&result, POD_IFNAME);
        if let Backend::Cni { result: cached, .. } = &mut attachment.backend {
            *cached = Some(result);
        }
        attachment.ips = ips.clone();
        self.cache.write(&attachment, Durability::Durable)?;
        Ok(ips)
    }

    async fn attach_builtin<'a>(&'a self, pod: &PodInfo, undo: &Undo<'a>) -> Result<Vec<IpAddr>, NetworkError> {
        let cidrs = self.pod_cidrs();
        let mut attachment = Attachment {
            sandbox_id: pod.sandbox_id.clone(),
            ifname: POD_IFNAME.into(),
            backend: Backend::Builtin {
                bridge: self.config.bridge_name.clone(),
                host_veth: builtin::host_veth_name(&pod.sandbox_id),
                host_ports: pod.host_ports.clone(),
            },
            ips: Vec::new(),
        };
        self.cache.write(&attachment, Durability::Volatile)?;
        let sandbox_id = pod.sandbox_id.clone();
        undo.push("built-in attachment record", move || self.cache.remove(&sandbox_id, Durability::Volatile));
        let ips = self.builtin.attach(pod, &cidrs, undo).await?;
        attachment.ips = ips.clone();
        self.cache.write(&attachment, Durability::Volatile)?;
        Ok(ips)
    }

    /// Only the CIDRs UpdateRuntimeConfig set (CNI's ipRanges come from kubelet, as containerd's).
    fn pod_cidrs_set(&self) -> Vec<IpNet> {
        self.pod_cidrs.received()
    }

    /// Detaches a pod (StopPodSandbox, RemovePodSandbox, undo, restart
    /// clean-up): DEL from the cache entry; idempotent. `pause_pid` names the
    /// live pause holding the netns, None when it is gone.
    pub(crate) async fn detach(&self, sandbox_id: &str, pause_pid: Option<i32>) -> Result<(), NetworkError> {
        let started = std::time::Instant::now();
        let Some(attachment) = self.cache.read(sandbox_id)? else {
            lock(&self.ips).remove(sandbox_id);
            return Ok(());
        };
        let netns = pause_pid.map(|pid| format!("/proc/{pid}/ns/net")).unwrap_or_default();
        let durability = match cached_cni_call(&attachment, netns)? {
            Some(CachedCniCall { list, pod_args, result }) => {
                self.cni.del(&list, &pod_args, result).await?;
                Durability::Durable
            }
            None => {
                self.builtin.detach(&attachment).await?;
                Durability::Volatile
            }
        };
        self.cache.remove(sandbox_id, durability)?;
        lock(&self.ips).remove(sandbox_id);
        tracing::info!(pod_id = %sandbox_id, elapsed_us = started.elapsed().as_micros() as u64, "pod network detached");
        Ok(())
    }

    /// After a daemon restart, for a pod whose pause (`pause_pid`) still
    /// runs: what the daemon itself provides for it (the built-in network's
    /// host ports) taken up again, or a CNI-attached pod's network checked in
    /// the background (a network broken while the daemon was away is logged).
    pub(crate) async fn resume(self: &Arc<Self>, sandbox_id: &str, pause_pid: i32) {
        let attachment = match self.cache.read(sandbox_id) {
            Ok(Some(a)) => a,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(pod_id = %sandbox_id, error = %e, "unreadable pod network cache entry");
                return;
            }
        };
        match attachment.backend {
            Backend::Builtin { .. } => self.builtin.resume(&attachment).await,
            Backend::Cni { .. } => {
                let networks = self.clone();
                tokio::spawn(async move {
                    let id = &attachment.sandbox_id;
                    match networks.check(&attachment, pause_pid).await {
                        Ok(true) => tracing::info!(pod_id = %id, "CNI CHECK passed"),
                        Ok(false) => {}
                        Err(e) => tracing::warn!(pod_id = %id, error = %e,
                            "CNI CHECK failed: the pod's network is not as it was attached"),
                    }
                });
            }
        }
    }

    /// CHECK of a CNI-attached pod (where the configuration has CHECK);
    /// only a finished ADD has something to check.
    async fn check(&self, attachment: &Attachment, pause_pid: i32) -> Result<bool, NetworkError> {
        if !matches!(attachment.backend, Backend::Cni { result: Some(_), .. }) {
            return Ok(false);
        }
        let call = cached_cni_call(attachment, format!("/proc/{pause_pid}/ns/net"))?;
        let Some(CachedCniCall { list, pod_args, result: Some(result) }) = call else {
            return Ok(false);
        };
        Ok(self.cni.check(&list, &pod_args, result).await?)
    }

    /// At start, once every pod resumed: detaches cached pods that no
    /// sandbox owns any more (left by a crash between the sandbox's removal
    /// and its cache entry's) and rewrites the host-port rules.
    pub(crate) async fn sweep(&self, known: &[String]) {
        for id in self.cache.ids() {
            if !known.contains(&id) {
                tracing::warn!(pod_id = %id, "detaching the network of a pod that no longer exists");
                if let Err(e) = self.detach(&id, None).await {
                    tracing::error!(pod_id = %id, error = %e, "cannot detach an orphaned pod network");
                }
            }
        }
        // The host ports of exactly the pods that resumed.
        if self.config.builtin == BuiltinMode::Auto {
            self.builtin.sync_host_ports().await;
        }
        // Built-in leases no record owns (their record lost in a power cut).
        let owners = self.cache.ids();
        if let Err(e) = self.builtin.sweep(&owners) {
            tracing::error!(error = %e, "cannot release built-in leases without an owner");
        }
    }
}
