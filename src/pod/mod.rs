//! Pod sandboxes: the pause process holding a pod's namespaces, the pod's
//! files (hostname, hosts, resolv.conf, /dev/shm), its cgroup, and the
//! persisted record that lets a restarted daemon find all of it again.

pub mod files;
pub mod launch;
pub mod manager;
pub mod pause;
pub mod record;
pub mod sysctl;

pub use manager::{SandboxError, SandboxSpec, SandboxState, SandboxView, Sandboxes};
