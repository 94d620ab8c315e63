//! The Linux layer: every system call nidus makes below the std/nix safe surface.
//! All `unsafe` code in nidus lives in this module tree, each block with a
//! `// SAFETY:` line; callers above it see only safe functions.

pub mod beneath;
pub mod capability_sets;
pub mod clone3;
pub mod container_init;
pub mod device_filter;
pub mod lock;
pub mod mount;
pub mod namespaces;
pub mod net;
pub mod process;
pub mod reaper;
pub mod rootfs;
pub mod runtime_program;
pub mod seccomp;
pub mod socket;
pub mod tiny_programs;
