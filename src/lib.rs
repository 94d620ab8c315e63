//! nidus: an embedded, minimal Kubernetes container runtime speaking CRI
//! runtime.v1 (and runtime.v1alpha2 for older kubelets) over a Unix socket.
//! See docs/design.md for the process model.

pub mod api {
    //! The CRI runtime.v1 API, generated from `proto/api.proto`.
    #![allow(clippy::all)]
    tonic::include_proto!("runtime.v1");
}

pub mod api_v1alpha2 {
    //! The CRI runtime.v1alpha2 services, generated from `proto/v1alpha2/api.proto`
    //! with every message mapped to its runtime.v1 namesake in [`crate::api`]: the
    //! two share field numbers and wire types (tests/proto_wire.rs proves it),
    //! so the runtime.v1 code serves both.
    #![allow(clippy::all)]
    include!(concat!(env!("OUT_DIR"), "/v1alpha2-server/runtime.v1alpha2.rs"));
}

pub mod bounded_file;
pub mod capabilities;
pub mod cdi;
pub mod cgroups;
pub mod checkpoint;
pub mod clock;
pub mod config;
pub mod container;
pub mod cri;
pub mod daemon;
pub mod events;
#[doc(hidden)]
pub mod fuzzing;
pub mod helper;
pub mod hooks;
pub mod ids;
pub mod image;
// The one module allowed `unsafe` (see Cargo.toml [lints]).
#[allow(unsafe_code)]
pub mod linux;
pub mod metrics;
pub mod monitor;
pub mod network;
pub mod paths;
pub mod pod;
pub mod quote;
pub mod registry;
pub mod resources;
pub mod runtime;
pub mod seccomp;
pub mod socket_client;
pub mod stats;
pub mod store;
pub mod streaming;
pub mod undo;
pub mod wire;
