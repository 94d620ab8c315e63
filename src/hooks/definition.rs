//! One `hooks.d` definition (schema 1.0.0, as CRI-O and podman read it):
//! parsed, validated (known version and stages, compilable patterns, an
//! absolute executable `hook.path`) and matched against a container.

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use regex::Regex;
use serde::Deserialize;

use crate::quote::quote;

/// The only schema version defined.
pub(crate) const SCHEMA_VERSION: &str = "1.0.0";

/// The OCI lifecycle points a hook can run at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Stage {
    Prestart,
    CreateRuntime,
    CreateContainer,
    StartContainer,
    Poststart,
    Poststop,
}

impl Stage {
    pub(crate) fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "prestart" => Self::Prestart,
            "createRuntime" => Self::CreateRuntime,
            "createContainer" => Self::CreateContainer,
            "startContainer" => Self::StartContainer,
            "poststart" => Self::Poststart,
            "poststop" => Self::Poststop,
            _ => return None,
        })
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Prestart => "prestart",
            Self::CreateRuntime => "createRuntime",
            Self::CreateContainer => "createContainer",
            Self::StartContainer => "startContainer",
            Self::Poststart => "poststart",
            Self::Poststop => "poststop",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum DefinitionError {
    #[error("not JSON of the hooks.d schema: {0}")]
    Json(#[from] serde_json::Error),
    #[error("version {} is not supported (only {SCHEMA_VERSION})", quote(.0))]
    Version(String),
    #[error("stages is empty")]
    NoStages,
    #[error("stages: unknown stage {}", quote(.0))]
    Stage(String),
    #[error("{field}: invalid regular expression {}: {source}", quote(.pattern))]
    Pattern { field: String, pattern: String, source: regex::Error },
    #[error("hook.path {} is not an absolute path", quote(&.0.display().to_string()))]
    RelativePath(PathBuf),
    #[error("hook.path {}: {why}", quote(&.path.display().to_string()))]
    NotExecutable { path: PathBuf, why: String },
    #[error("hook.timeout must be a positive number of seconds, not {0}")]
    Timeout(i64),
}

/// The file as written (unknown keys are ignored, as podman's Go decoder does).
#[derive(Deserialize)]
struct RawDefinition {
    version: String,
    hook: RawHook,
    #[serde(default)]
    when: RawWhen,
    #[serde(default)]
    stages: Vec<String>,
}

#[derive(Deserialize)]
struct RawHook {
    path: PathBuf,
    #[serde(default)]
    args: Option<Vec<String>>,
    #[serde(default)]
    env: Option<Vec<String>>,
    #[serde(default)]
    timeout: Option<i64>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RawWhen {
    #[serde(default)]
    always: Option<bool>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
    #[serde(default)]
    commands: Vec<String>,
    #[serde(default)]
    has_bind_mounts: Option<bool>,
}

/// A valid definition, its patterns compiled.
#[derive(Debug, Clone)]
pub(crate) struct Definition {
    pub(crate) hook: oci_spec::runtime::Hook,
    pub(crate) stages: Vec<Stage>,
    when: When,
}

/// When a definition applies; any one condition that holds is enough.
#[derive(Debug, Clone)]
struct When {
    always: bool,
    annotations: Vec<(Regex, Regex)>,
    commands: Vec<Regex>,
    has_bind_mounts: bool,
}

/// What of a container the `when` conditions look at.
pub(crate) struct ContainerFacts<'a> {
    pub(crate) annotations: &'a HashMap<String, String>,
    /// The command path (the process's args[0]).
    pub(crate) command: Option<&'a str>,
    /// The caller asked for bind mounts (the CRI config's mounts).
    pub(crate) has_bind_mounts: bool,
}

impl Definition {
    /// Parses and validates a definition (its hook's path is checked on disk).
    pub(crate) fn parse(data: &[u8]) -> Result<Self, DefinitionError> {
        let raw: RawDefinition = serde_json::from_slice(data)?;
        if raw.version != SCHEMA_VERSION {
            return Err(DefinitionError::Version(raw.version));
        }
        if raw.stages.is_empty() {
            return Err(DefinitionError::NoStages);
        }
        let mut stages = Vec::new();
        for name in &raw.stages {
            let stage = Stage::parse(name).ok_or_else(|| DefinitionError::Stage(name.clone()))?;
            if !stages.contains(&stage) {
                stages.push(stage);
            }
        }
        let compile = |field: String, pattern: &str| {
            Regex::new(pattern).map_err(|source| DefinitionError::Pattern { field, pattern: pattern.into(), source })
        };
        let annotations = raw
            .when
            .annotations
            .iter()
            .map(|(k, v)| {
                let field = format!("when.annotations[{}]", quote(k));
                Ok((compile(field.clone(), k)?, compile(field, v)?))
            })
            .collect::<Result<Vec<_>, DefinitionError>>()?;
        let commands = raw
            .when
            .commands
            .iter()
            .enumerate()
            .map(|(i, c)| compile(format!("when.commands[{i}]"), c))
            .collect::<Result<Vec<_>, DefinitionError>>()?;
        if let Some(timeout) = raw.hook.timeout.filter(|t| *t <= 0) {
            return Err(DefinitionError::Timeout(timeout));
        }
        check_executable(&raw.hook.path)?;
        let mut hook = oci_spec::runtime::Hook::default();
        hook.set_path(raw.hook.path);
        hook.set_args(raw.hook.args);
        hook.set_env(raw.hook.env);
        hook.set_timeout(raw.hook.timeout);
        let when = When {
            always: raw.when.always.unwrap_or(false),
            annotations,
            commands,
            has_bind_mounts: raw.when.has_bind_mounts.unwrap_or(false),
        };
        Ok(Self { hook, stages, when })
    }

    /// Whether the definition applies to a container with these facts:
    /// `always`, or an annotation whose key and value both match a pattern
    /// pair, or a command pattern matching the command path, or
    /// `hasBindMounts` with bind mounts asked for.
    pub(crate) fn matches(&self, facts: &ContainerFacts<'_>) -> bool {
        let when = &self.when;
        when.always
            || when
                .annotations
                .iter()
                .any(|(k, v)| facts.annotations.iter().any(|(key, value)| k.is_match(key) && v.is_match(value)))
            || facts.command.is_some_and(|command| when.commands.iter().any(|c| c.is_match(command)))
            || (when.has_bind_mounts && facts.has_bind_mounts)
    }
}

/// A hook's path must name an executable regular file by an absolute path.
fn check_executable(path: &std::path::Path) -> Result<(), DefinitionError> {
    if !path.is_absolute() {
        return Err(DefinitionError::RelativePath(path.to_path_buf()));
    }
    let not = |why: String| DefinitionError::NotExecutable { path: path.to_path_buf(), why };
    let meta = std::fs::metadata(path).map_err(|e| not(e.to_string()))?;
    if !meta.is_file() {
        return Err(not("not a regular file".into()));
    }
    if meta.permissions().mode() & 0o111 == 0 {
        return Err(not("not executable".into()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts<'a>(
        annotations: &'a HashMap<String, String>,
        command: Option<&'a str>,
        binds: bool,
    ) -> ContainerFacts<'a> {
        ContainerFacts { annotations, command, has_bind_mounts: binds }
    }

    fn definition(when: &str, stages: &str) -> Result<Definition, DefinitionError> {
        let text = format!(r#"{{"version":"1.0.0","hook":{{"path":"/bin/true"}},"when":{when},"stages":{stages}}}"#);
        Definition::parse(text.as_bytes())
    }

    #[test]
    fn conditions_are_ored() {
        let d = definition(r#"{"annotations":{"^gpu$":"^(yes|true)$"},"commands":["/sleep$"]}"#, r#"["prestart"]"#)
            .unwrap();
        let none = HashMap::new();
        let gpu = HashMap::from([("gpu".to_string(), "yes".to_string())]);
        let gpu_no = HashMap::from([("gpu".to_string(), "no".to_string())]);
        assert!(d.matches(&facts(&gpu, None, false)));
        assert!(!d.matches(&facts(&gpu_no, Some("/bin/sh"), false)));
        assert!(d.matches(&facts(&none, Some("/bin/sleep"), false)));
        assert!(!d.matches(&facts(&none, Some("/bin/sleeper"), true)));
    }

    #[test]
    fn always_and_bind_mounts() {
        let none = HashMap::new();
        assert!(definition(r#"{"always":true}"#, r#"["poststop"]"#).unwrap().matches(&facts(&none, None, false)));
        let binds = definition(r#"{"hasBindMounts":true}"#, r#"["poststop"]"#).unwrap();
        assert!(binds.matches(&facts(&none, None, true)));
        assert!(!binds.matches(&facts(&none, None, false)));
        assert!(!definition("{}", r#"["poststop"]"#).unwrap().matches(&facts(&none, Some("/x"), true)));
    }

    #[test]
    fn invalid_definitions_are_refused() {
        assert!(matches!(definition("{}", "[]"), Err(DefinitionError::NoStages)));
        assert!(matches!(definition("{}", r#"["prestop"]"#), Err(DefinitionError::Stage(_))));
        assert!(matches!(definition(r#"{"commands":["("]}"#, r#"["prestart"]"#), Err(DefinitionError::Pattern { .. })));
        let relative = br#"{"version":"1.0.0","hook":{"path":"true"},"stages":["prestart"]}"#;
        assert!(matches!(Definition::parse(relative), Err(DefinitionError::RelativePath(_))));
        let missing = br#"{"version":"1.0.0","hook":{"path":"/nonexistent/hook"},"stages":["prestart"]}"#;
        assert!(matches!(Definition::parse(missing), Err(DefinitionError::NotExecutable { .. })));
        let not_exec = br#"{"version":"1.0.0","hook":{"path":"/etc/passwd"},"stages":["prestart"]}"#;
        assert!(matches!(Definition::parse(not_exec), Err(DefinitionError::NotExecutable { .. })));
        let version = br#"{"version":"2.0.0","hook":{"path":"/bin/true"},"stages":["prestart"]}"#;
        assert!(matches!(Definition::parse(version), Err(DefinitionError::Version(_))));
        let timeout = br#"{"version":"1.0.0","hook":{"path":"/bin/true","timeout":0},"stages":["prestart"]}"#;
        assert!(matches!(Definition::parse(timeout), Err(DefinitionError::Timeout(0))));
    }
}
