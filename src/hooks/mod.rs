//! OCI hooks: `hooks.d` definitions (`definition`), the configured
//! directories' current set (`registry`), and running a stage's hooks with
//! the container's state (`run`). Which stage runs where: prestart and
//! createRuntime by the container's monitor (`monitor::hooks`), in the
//! runtime's namespaces while the init waits before pivot_root;
//! createContainer and startContainer by the init itself; poststart and
//! poststop by the daemon (`container::manager`).

pub(crate) mod definition;
pub(crate) mod registry;
pub(crate) mod run;

pub(crate) use definition::{ContainerFacts, Stage};
pub(crate) use registry::HookRegistry;
pub(crate) use run::{run_stage, HookError, State};

/// The OCI state's `ociVersion`.
pub(crate) const OCI_VERSION: &str = "1.2.0";

/// The hooks of `stage` in a container's set.
pub(crate) fn of_stage(hooks: &oci_spec::runtime::Hooks, stage: Stage) -> &[oci_spec::runtime::Hook] {
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

/// Every stage, in the order of a container's life.
pub(crate) const STAGES: [Stage; 6] = [
    Stage::Prestart,
    Stage::CreateRuntime,
    Stage::CreateContainer,
    Stage::StartContainer,
    Stage::Poststart,
    Stage::Poststop,
];

/// Replaces the hooks of `stage` in `hooks` (none when `list` is empty).
pub(crate) fn set_stage(hooks: &mut oci_spec::runtime::Hooks, stage: Stage, list: Vec<oci_spec::runtime::Hook>) {
    let list = (!list.is_empty()).then_some(list);
    match stage {
        Stage::Prestart => hooks.set_prestart(list),
        Stage::CreateRuntime => hooks.set_create_runtime(list),
        Stage::CreateContainer => hooks.set_create_container(list),
        Stage::StartContainer => hooks.set_start_container(list),
        Stage::Poststart => hooks.set_poststart(list),
        Stage::Poststop => hooks.set_poststop(list),
    };
}

/// `first`'s hooks, then `second`'s, stage by stage; None when neither has any.
pub(crate) fn merged(
    first: Option<oci_spec::runtime::Hooks>,
    second: Option<oci_spec::runtime::Hooks>,
) -> Option<oci_spec::runtime::Hooks> {
    let (first, second) = (first.unwrap_or_default(), second.unwrap_or_default());
    let mut out = oci_spec::runtime::Hooks::default();
    let mut any = false;
    for stage in STAGES {
        let list: Vec<_> = of_stage(&first, stage).iter().chain(of_stage(&second, stage)).cloned().collect();
        any |= !list.is_empty();
        set_stage(&mut out, stage, list);
    }
    any.then_some(out)
}

/// The hooks a container got at create (the definitions that matched it),
/// with the annotations its state shows: kept in its record and its
/// monitor's plan, and put in its OCI spec.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq, Eq)]
pub(crate) struct ContainerHooks {
    pub(crate) hooks: oci_spec::runtime::Hooks,
    pub(crate) annotations: std::collections::HashMap<String, String>,
}

impl ContainerHooks {
    /// Whether any hook runs at `stage` (no work at all when none does).
    pub(crate) fn has(&self, stage: Stage) -> bool {
        !of_stage(&self.hooks, stage).is_empty()
    }

    /// Runs the hooks of `stage` with the container's state.
    pub(crate) fn run(
        &self,
        stage: Stage,
        id: &str,
        status: &str,
        pid: Option<i32>,
        bundle: &std::path::Path,
    ) -> Result<(), HookError> {
        let state = State { oci_version: OCI_VERSION, id, status, pid, bundle, annotations: &self.annotations };
        run_stage(stage, of_stage(&self.hooks, stage), &state)
    }
}
