//! Pod sandboxes: the pause process holding a pod's namespaces, the pod's
//! files (hostname, hosts, resolv.conf, /dev/shm), its cgroup, and the
//! persisted record that lets a restarted daemon find all of it again.

pub(crate) mod files;
pub(crate) mod launch;
pub(crate) mod manager;
pub mod pause;
pub(crate) mod record;
pub(crate) mod sysctl;

pub use manager::SandboxView;
pub(crate) use manager::{SandboxError, SandboxSpec, SandboxState, Sandboxes};
