//! The netlink side of the built-in network, in-process with `rtnetlink`:
//! the bridge with its gateway addresses, a veth pair per pod whose pod end
//! is made directly inside the pause's network namespace as `eth0`, the pod's
//! addresses and default routes, and deleting a pod's veth.

use std::fs::File;
use std::net::IpAddr;
use std::os::fd::AsRawFd;
use std::path::Path;

use futures_util::TryStreamExt;
use ipnet::IpNet;
use rtnetlink::packet_route::address::AddressFlags;
use rtnetlink::packet_route::link::{InfoData, InfoVeth};
use rtnetlink::{Handle, LinkBridge, LinkBridgePort, LinkUnspec, LinkVeth, RouteMessageBuilder};

/// errno values netlink answers with.
const EEXIST: i32 = libc::EEXIST;
const ENODEV: i32 = libc::ENODEV;

/// A netlink request that failed: what was asked, and the kernel's answer.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {source}")]
pub(crate) struct LinkError {
    pub(crate) what: String,
    #[source]
    pub(crate) source: rtnetlink::Error,
}

fn failed(what: impl Into<String>) -> impl FnOnce(rtnetlink::Error) -> LinkError {
    let what = what.into();
    move |source| LinkError { what, source }
}

fn errno(e: &rtnetlink::Error) -> i32 {
    match e {
        rtnetlink::Error::NetlinkError(m) => -m.raw_code(),
        _ => 0,
    }
}

/// A route netlink connection in the daemon's own network namespace.
pub(crate) fn connect() -> std::io::Result<Handle> {
    let (connection, handle, _) = rtnetlink::new_connection()?;
    tokio::spawn(connection);
    Ok(handle)
}

/// A route netlink connection inside the network namespace at `netns`: the
/// socket is made on a short-lived thread that entered the namespace (a
/// socket stays in the namespace it was made in).
pub(crate) async fn connect_in(netns: &Path) -> std::io::Result<Handle> {
    let ns = File::open(netns)?;
    let runtime = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        crate::linux::netns_connect::in_netns(&ns, || {
            let _entered = runtime.enter();
            let (connection, handle, _) = rtnetlink::new_connection()?;
            runtime.spawn(connection);
            Ok(handle)
        })
    })
    .await
    .map_err(std::io::Error::other)?
}

/// The index of link `name`, None when there is none.
pub(crate) async fn index_of(handle: &Handle, name: &str) -> Result<Option<u32>, LinkError> {
    let mut links = handle.link().get().match_name(name.to_string()).execute();
    match links.try_next().await {
        Ok(link) => Ok(link.map(|l| l.header.index)),
        Err(e) if errno(&e) == ENODEV => Ok(None),
        Err(e) => Err(failed(format!("looking up link {name}"))(e)),
    }
}

/// Makes the bridge `name` (up, with the first address of each network as
/// the pods' gateway) unless it exists; returns its index.
pub(crate) async fn ensure_bridge(handle: &Handle, name: &str, nets: &[IpNet]) -> Result<u32, LinkError> {
    let index = match index_of(handle, name).await? {
        Some(index) => index,
        None => {
            match handle.link().add(LinkBridge::new(name).build()).execute().await {
                Err(e) if errno(&e) != EEXIST => return Err(failed(format!("creating bridge {name}"))(e)),
                _ => {}
            }
            index_of(handle, name).await?.ok_or_else(|| LinkError {
                what: format!("bridge {name} vanished after its creation"),
                source: rtnetlink::Error::RequestFailed,
            })?
        }
    };
    handle
        .link()
        .set(LinkUnspec::new_with_index(index).up().build())
        .execute()
        .await
        .map_err(failed(format!("setting bridge {name} up")))?;
    // Pods of different pod CIDRs (and the node) reach each other through
    // the bridge's addresses: the node routes, as the CNI bridge plugin's
    // gateway mode makes it.
    for net in nets {
        let knob = if net.addr().is_ipv6() {
            "/proc/sys/net/ipv6/conf/all/forwarding"
        } else {
            "/proc/sys/net/ipv4/ip_forward"
        };
        if let Err(e) = std::fs::write(knob, "1") {
            tracing::warn!(knob, error = %e, "cannot turn on forwarding for the built-in network");
        }
    }
    for net in nets {
        let Some(gateway) = super::leases::nth(net, 1) else { continue };
        add_address(handle, index, gateway, net.prefix_len()).await.map_err(|e| LinkError {
            what: format!("giving bridge {name} the gateway address {gateway}: {}", e.what),
            source: e.source,
        })?;
    }
    Ok(index)
}

async fn add_address(handle: &Handle, index: u32, ip: IpAddr, prefix: u8) -> Result<(), LinkError> {
    let mut request = handle.address().add(index, ip, prefix);
    if ip.is_ipv6() {
        // No duplicate address detection: the address is leased, and usable at once.
        request
            .message_mut()
            .attributes
            .push(rtnetlink::packet_route::address::AddressAttribute::Flags(AddressFlags::Nodad));
    }
    match request.execute().await {
        Err(e) if errno(&e) != EEXIST => Err(failed(format!("adding address {ip}/{prefix}"))(e)),
        _ => Ok(()),
    }
}

/// Makes the pod's veth pair: `host_name` on `bridge` in the daemon's
/// namespace, `pod_ifname` inside the namespace at `netns`.
pub(crate) async fn add_veth(
    handle: &Handle,
    host_name: &str,
    pod_ifname: &str,
    netns: &Path,
    bridge: u32,
) -> Result<(), LinkError> {
    let ns = File::open(netns).map_err(|e| LinkError {
        what: format!("opening the pod's network namespace {}: {e}", netns.display()),
        source: rtnetlink::Error::RequestFailed,
    })?;
    let peer = LinkUnspec::new_with_name(pod_ifname).setns_by_fd(ns.as_raw_fd()).build();
    let veth = LinkVeth::new(host_name, pod_ifname).set_info_data(InfoData::Veth(InfoVeth::Peer(peer))).build();
    handle.link().add(veth).execute().await.map_err(failed(format!("creating veth {host_name}")))?;
    drop(ns);
    let index = index_of(handle, host_name).await?.ok_or_else(|| LinkError {
        what: format!("veth {host_name} vanished after its creation"),
        source: rtnetlink::Error::RequestFailed,
    })?;
    handle
        .link()
        .set(LinkUnspec::new_with_index(index).controller(bridge).up().build())
        .execute()
        .await
        .map_err(failed(format!("putting veth {host_name} on the bridge")))?;
    // Hairpin: a pod reaching its own host port through the node gets its
    // packets back on the port they came from (the bridge may switch
    // DNAT-ed packets at layer 2 when bridge netfilter is on).
    if let Err(e) = handle.link().set_port(LinkBridgePort::new(index).hairpin(true).build()).execute().await {
        tracing::warn!(veth = host_name, error = %e, "no hairpin mode: a pod cannot reach its own host port");
    }
    Ok(())
}

/// Inside the pod: the interface up with its addresses and a default route
/// per family through the gateway.
pub(crate) async fn configure_pod(pod: &Handle, ifname: &str, addresses: &[(IpAddr, IpNet)]) -> Result<(), LinkError> {
    let index = index_of(pod, ifname).await?.ok_or_else(|| LinkError {
        what: format!("the pod has no {ifname}"),
        source: rtnetlink::Error::RequestFailed,
    })?;
    for (ip, net) in addresses {
        add_address(pod, index, *ip, net.prefix_len()).await?;
    }
    pod.link()
        .set(LinkUnspec::new_with_index(index).up().build())
        .execute()
        .await
        .map_err(failed(format!("setting the pod's {ifname} up")))?;
    for (_, net) in addresses {
        let Some(gateway) = super::leases::nth(net, 1) else { continue };
        let route = match gateway {
            IpAddr::V4(gw) => {
                RouteMessageBuilder::<std::net::Ipv4Addr>::new().gateway(gw).output_interface(index).build()
            }
            IpAddr::V6(gw) => {
                RouteMessageBuilder::<std::net::Ipv6Addr>::new().gateway(gw).output_interface(index).build()
            }
        };
        match pod.route().add(route).execute().await {
            Err(e) if errno(&e) != EEXIST => {
                return Err(failed(format!("adding the pod's default route via {gateway}"))(e))
            }
            _ => {}
        }
    }
    Ok(())
}

/// Whether this kernel makes bridges and veth pairs: one of each is made
/// (named after `tag`) and deleted at once.
pub(crate) async fn probe(handle: &Handle, tag: &str) -> Result<(), LinkError> {
    let (bridge, veth, peer) = (format!("nvb{tag}"), format!("nvv{tag}"), format!("nvp{tag}"));
    let made = handle.link().add(LinkBridge::new(&bridge).build()).execute().await;
    delete_link(handle, &bridge).await?;
    made.map_err(failed("making a bridge"))?;
    let made = handle.link().add(LinkVeth::new(&veth, &peer).build()).execute().await;
    delete_link(handle, &veth).await?;
    made.map_err(failed("making a veth pair"))
}

/// Deletes link `name` if it exists (a veth's peer goes with it).
pub(crate) async fn delete_link(handle: &Handle, name: &str) -> Result<(), LinkError> {
    let Some(index) = index_of(handle, name).await? else {
        return Ok(());
    };
    match handle.link().del(index).execute().await {
        Err(e) if errno(&e) != ENODEV => Err(failed(format!("deleting link {name}"))(e)),
        _ => Ok(()),
    }
}
