//! Seccomp: OCI seccomp profiles (the runtime-spec `linux.seccomp` JSON) —
//! parsing, the capability-conditional rules of nidus's RuntimeDefault
//! resolved per container, translation to stacked BPF filters (seccompiler),
//! the compiled program's file format, a content-addressed cache, and
//! `nidus seccomp check` (what a profile compiles to and what each step
//! costs). Installing a program is `linux::seccomp`'s job.

pub(crate) mod cache;
pub mod check;
pub(crate) mod choice;
pub mod compile;
pub mod profile;
pub mod program;

pub use cache::ProgramCache;
pub(crate) use compile::compile;
pub use profile::Profile;
pub(crate) use program::CompiledProfile;
pub use program::{Filter, Instruction};

/// nidus's RuntimeDefault profile (OCI format plus capability conditions),
/// embedded so a node needs no file for it.
pub const RUNTIME_DEFAULT_JSON: &str = include_str!("../../seccomp-profiles/default.json");
