//! TCP connections made from inside another network namespace (a pod's,
//! for PortForward): a short-lived thread joins the namespace, connects, and
//! ends; the socket stays in the namespace it was made in.

use std::fs::File;
use std::io;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use nix::sched::CloneFlags;

/// Connects to `addr` from inside the network namespace `netns` (an open
/// `/proc/PID/ns/net`), within `timeout`.
pub fn connect_in(netns: &File, addr: SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                // Only this thread moves; it ends right after.
                nix::sched::setns(netns, CloneFlags::CLONE_NEWNET).map_err(io::Error::from)?;
                TcpStream::connect_timeout(&addr, timeout)
            })
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the connecting thread panicked")))
    })
}
