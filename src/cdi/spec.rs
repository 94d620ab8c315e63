//! The CDI spec file format (cdiVersion 0.1.0 to 1.1.0, the newest the CNCF
//! spec defines), read from JSON (`.json`) or YAML (`.yaml`) text. Unknown
//! fields are refused, as the reference implementation refuses them; a
//! `null` where a list or map goes counts as empty. YAML is read with a
//! budget (nesting, nodes, scalar bytes and alias replays, counted with what
//! aliases expand to), so an alias bomb is refused long before it costs
//! memory.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer};

/// A list or map field that may be `null` or absent.
fn nullable<'de, D: Deserializer<'de>, T: Default + Deserialize<'de>>(d: D) -> Result<T, D::Error> {
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct SpecFile {
    #[serde(rename = "cdiVersion")]
    pub(crate) version: String,
    pub(crate) kind: String,
    #[serde(default, deserialize_with = "nullable")]
    pub(crate) annotations: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "nullable")]
    pub(crate) devices: Vec<Device>,
    #[serde(rename = "containerEdits", default, deserialize_with = "nullable")]
    pub(crate) container_edits: ContainerEdits,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct Device {
    pub(crate) name: String,
    #[serde(default, deserialize_with = "nullable")]
    pub(crate) annotations: BTreeMap<String, String>,
    #[serde(rename = "containerEdits", default, deserialize_with = "nullable")]
    pub(crate) container_edits: ContainerEdits,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct ContainerEdits {
    #[serde(default, deserialize_with = "nullable")]
    pub(crate) env: Vec<String>,
    #[serde(rename = "deviceNodes", default, deserialize_with = "nullable")]
    pub(crate) device_nodes: Vec<DeviceNode>,
    #[serde(default, deserialize_with = "nullable")]
    pub(crate) hooks: Vec<Hook>,
    #[serde(default, deserialize_with = "nullable")]
    pub(crate) mounts: Vec<Mount>,
    #[serde(rename = "intelRdt", default)]
    pub(crate) intel_rdt: Option<IntelRdt>,
    #[serde(rename = "additionalGids", default, deserialize_with = "nullable")]
    pub(crate) additional_gids: Vec<u32>,
    #[serde(rename = "netDevices", default, deserialize_with = "nullable")]
    pub(crate) net_devices: Vec<NetDevice>,
}

impl ContainerEdits {
    pub(crate) fn is_empty(&self) -> bool {
        self.env.is_empty()
            && self.device_nodes.is_empty()
            && self.hooks.is_empty()
            && self.mounts.is_empty()
            && self.intel_rdt.is_none()
            && self.additional_gids.is_empty()
            && self.net_devices.is_empty()
    }
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct DeviceNode {
    pub(crate) path: String,
    #[serde(rename = "hostPath", default, deserialize_with = "nullable")]
    pub(crate) host_path: String,
    #[serde(rename = "type", default, deserialize_with = "nullable")]
    pub(crate) kind: String,
    #[serde(default, deserialize_with = "nullable")]
    pub(crate) major: i64,
    #[serde(default, deserialize_with = "nullable")]
    pub(crate) minor: i64,
    #[serde(rename = "fileMode", default)]
    pub(crate) file_mode: Option<u32>,
    #[serde(default, deserialize_with = "nullable")]
    pub(crate) permissions: String,
    #[serde(default)]
    pub(crate) uid: Option<u32>,
    #[serde(default)]
    pub(crate) gid: Option<u32>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct Mount {
    #[serde(rename = "hostPath")]
    pub(crate) host_path: String,
    #[serde(rename = "containerPath")]
    pub(crate) container_path: String,
    #[serde(rename = "type", default, deserialize_with = "nullable")]
    pub(crate) kind: String,
    #[serde(default, deserialize_with = "nullable")]
    pub(crate) options: Vec<String>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct Hook {
    #[serde(rename = "hookName")]
    pub(crate) hook_name: String,
    pub(crate) path: String,
    #[serde(default, deserialize_with = "nullable")]
    pub(crate) args: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub(crate) env: Vec<String>,
    #[serde(default)]
    pub(crate) timeout: Option<i64>,
}

/// Linux resctrl settings (nidus applies none: a device asking for them is refused).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct IntelRdt {
    #[serde(rename = "closID", default)]
    pub(crate) clos_id: Option<String>,
    #[serde(rename = "l3CacheSchema", default)]
    pub(crate) l3_cache_schema: Option<String>,
    #[serde(rename = "memBwSchema", default)]
    pub(crate) mem_bw_schema: Option<String>,
    #[serde(default)]
    pub(crate) schemata: Option<Vec<String>>,
    #[serde(rename = "enableMonitoring", default, deserialize_with = "nullable")]
    pub(crate) enable_monitoring: bool,
}

/// A host network interface moved into the container (nidus moves none: a
/// device asking for one is refused).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct NetDevice {
    #[serde(rename = "hostInterfaceName")]
    pub(crate) host_interface_name: String,
    pub(crate) name: String,
}

/// How a spec file is written, by its name's extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    Json,
    Yaml,
}

impl Format {
    /// The format of a file named `name`; None: not a spec file.
    pub(crate) fn of(name: &str) -> Option<Self> {
        if name.ends_with(".json") {
            Some(Self::Json)
        } else if name.ends_with(".yaml") {
            Some(Self::Yaml)
        } else {
            None
        }
    }
}

/// The budget a YAML spec is read within. The largest spec file read is
/// 1 MiB; real specs (a vendor's devices, each with a few nodes, mounts and
/// hooks) are a few hundred KiB at most and nest six levels deep.
fn yaml_options() -> serde_saphyr::Options {
    let mut budget = serde_saphyr::Budget::default();
    budget.max_depth = 32;
    budget.max_documents = 1;
    budget.max_nodes = 200_000;
    budget.max_aliases = 10_000;
    budget.max_anchors = 10_000;
    // Counted with what aliases expand to: a 1 MiB file expands to at most 4 MiB of text.
    budget.max_total_scalar_bytes = 4 << 20;
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(budget);
    options.alias_limits.max_total_replayed_events = 100_000;
    options.alias_limits.max_replay_stack_depth = 16;
    // Errors name a line and column; they quote no input.
    options.with_snippet = false;
    options
}

/// The longest parse error kept (a YAML error may quote its input).
const MAX_ERROR: usize = 300;

fn one_line(error: impl std::fmt::Display) -> String {
    let text = error.to_string().split_whitespace().collect::<Vec<_>>().join(" ");
    if text.len() <= MAX_ERROR {
        return text;
    }
    let mut end = MAX_ERROR;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// Parses a spec file's bytes.
pub(crate) fn parse(data: &[u8], format: Format) -> Result<SpecFile, String> {
    match format {
        Format::Json => serde_json::from_slice(data).map_err(|e| format!("is invalid JSON: {}", one_line(e))),
        Format::Yaml => serde_saphyr::from_slice_with_options(data, yaml_options())
            .map_err(|e| format!("is invalid YAML: {}", one_line(e))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const JSON: &str = r#"{
        "cdiVersion": "0.7.0",
        "kind": "vendor.com/gpu",
        "devices": [
            {"name": "0", "containerEdits": {"deviceNodes": [{"path": "/dev/gpu0", "type": "c", "major": 195, "minor": 0, "fileMode": 438}]}},
            {"name": "all", "containerEdits": {"env": ["A=1"], "additionalGids": [44], "hostPath": null}}
        ],
        "containerEdits": {"mounts": [{"hostPath": "/usr/lib/x", "containerPath": "/usr/lib/x", "options": ["ro", "bind"]}]}
    }"#;

    #[test]
    fn json_and_yaml_read_the_same_and_unknown_fields_are_refused() {
        let err = parse(JSON.as_bytes(), Format::Json).unwrap_err();
        assert!(err.contains("unknown field `hostPath`"), "{err}");
        let json = JSON.replace(", \"hostPath\": null", "");
        let from_json = parse(json.as_bytes(), Format::Json).unwrap();
        assert_eq!(from_json.devices[0].container_edits.device_nodes[0].file_mode, Some(0o666));
        assert_eq!(from_json.devices[1].container_edits.additional_gids, [44]);
        let yaml = r#"
cdiVersion: 0.7.0
kind: vendor.com/gpu
devices:
  - name: "0"
    containerEdits:
      deviceNodes:
        - {path: /dev/gpu0, type: c, major: 195, minor: 0, fileMode: 438}
  - name: all
    containerEdits:
      env: [A=1]
      additionalGids: [44]
containerEdits:
  mounts:
    - hostPath: /usr/lib/x
      containerPath: /usr/lib/x
      options: [ro, bind]
"#;
        assert_eq!(parse(yaml.as_bytes(), Format::Yaml).unwrap(), from_json);
        let nulls = "cdiVersion: 0.3.0\nkind: a.com/b\ndevices: [{name: x, containerEdits: {env: null}}]\ncontainerEdits: null\n";
        let spec = parse(nulls.as_bytes(), Format::Yaml).unwrap();
        assert!(spec.devices[0].container_edits.is_empty() && spec.container_edits.is_empty());
        assert!(parse(b"cdiVersion: 0.3.0\nkind: a.com/b\nextra: 1\n", Format::Yaml).unwrap_err().contains("extra"));
    }

    #[test]
    fn yaml_bombs_are_refused_within_the_budget() {
        // Nine levels of nine aliases: 9^9 strings once expanded.
        let mut bomb = String::from("cdiVersion: 0.3.0\nkind: a.com/b\nannotations:\n  l0: &l0 \"lol\"\n");
        for level in 1..10 {
            let refs = vec![format!("*l{}", level - 1); 9].join(", ");
            bomb.push_str(&format!("  l{level}: &l{level} [{refs}]\n"));
        }
        bomb.push_str("devices: []\n");
        let began = std::time::Instant::now();
        let err = parse(bomb.as_bytes(), Format::Yaml).unwrap_err();
        assert!(err.starts_with("is invalid YAML"), "{err}");
        assert!(began.elapsed() < std::time::Duration::from_secs(5));
        // One large scalar aliased many times: few events, much text.
        let big = "x".repeat(512 << 10);
        let mut wide = format!("cdiVersion: 0.3.0\nkind: a.com/b\ndevices:\n  - name: a\n    containerEdits:\n      env:\n        - &big \"A={big}\"\n");
        for _ in 0..64 {
            wide.push_str("        - *big\n");
        }
        let err = parse(wide.as_bytes(), Format::Yaml).unwrap_err();
        assert!(err.starts_with("is invalid YAML: budget breached: ScalarBytes"), "{err}");
        // A small scalar aliased very many times.
        let mut many = String::from(
            "cdiVersion: 0.3.0\nkind: a.com/b\ndevices:\n  - name: a\n    containerEdits:\n      env: [&a A=1",
        );
        many.push_str(&", *a".repeat(20_000));
        many.push_str("]\n");
        let err = parse(many.as_bytes(), Format::Yaml).unwrap_err();
        assert!(err.starts_with("is invalid YAML: budget breached"), "{err}");
        // Deep nesting.
        let deep =
            format!("cdiVersion: 0.3.0\nkind: a.com/b\nannotations: {}{}\n", "[".repeat(10_000), "]".repeat(10_000));
        assert!(parse(deep.as_bytes(), Format::Yaml).is_err());
        let deep_json = format!("{{\"cdiVersion\": {}{}}}", "[".repeat(10_000), "]".repeat(10_000));
        assert!(parse(deep_json.as_bytes(), Format::Json).is_err());
    }

    #[test]
    fn long_errors_are_cut_to_one_line() {
        let text = format!("line one\n{}", "y".repeat(5000));
        let cut = one_line(text);
        assert!(!cut.contains('\n') && cut.len() <= MAX_ERROR + 3, "{cut}");
    }
}
