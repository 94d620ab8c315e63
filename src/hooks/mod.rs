//! OCI hooks: `hooks.d` definitions (`definition`), the configured
//! directories' current set (`registry`), and running a stage's hooks with
//! the container's state (`run`). Which stage runs where: prestart and
//! createRuntime by the container's monitor (`monitor::hooks`), in the
//! runtime's namespaces while the init waits before pivot_root;
//! createContainer and startContainer by the init itself; poststart and
//! poststop by the daemon (`container::manager`).

pub mod definition;
pub mod registry;
pub mod run;

pub use definition::{ContainerFacts, Stage};
pub use registry::HookRegistry;
pub use run::{run_stage, HookError, State};

/// The OCI state's `ociVersion`.
pub const OCI_VERSION: &str = "1.2.0";

/// The hooks of `stage` in a container's set.
pub fn of_stage(hooks: &oci_spec::runtime::Hooks, stage: Stage) -> &[oci_spec::runtime::Hook] {
    let list = match stage {
        Stage::Prestart => hooks.prestart(),
        Stage::CreateRuntime => hooks.create_runtime(),
        Stage::CreateContainer => hooks.create_container(),
        Stage::StartContainer => hooks.start_container(),
        Stage::Poststart => hooks.poststart(),
        Stage::Poststop => hooks.poststop(),
    };
    list.as_deref().unwrap_or_default()
}
