//! Connections made from inside another network namespace (a pod's: TCP
//! for PortForward, route netlink for the built-in network): a short-lived
//! thread joins the namespace, makes the socket, and ends; the socket stays
//! in the namespace it was made in.

use std::fs::File;
use std::io;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use nix::sched::CloneFlags;

/// Runs `make` on a thread that has entered the network namespace `netns`
/// (an open `/proc/PID/ns/net` or netns file), and returns what it made.
pub(crate) fn in_netns<T: Send>(netns: &File, make: impl FnOnce() -> io::Result<T> + Send) -> io::Result<T> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                // Only this thread moves; it ends right after.
                nix::sched::setns(netns, CloneFlags::CLONE_NEWNET).map_err(io::Error::from)?;
                make()
            })
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the thread in the network namespace panicked")))
    })
}

/// Connects to `addr` from inside the network namespace `netns`, within `timeout`.
pub(crate) fn connect_in(netns: &File, addr: SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
    in_netns(netns, || TcpStream::connect_timeout(&addr, timeout))
}
