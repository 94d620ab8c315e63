//! CNI network configuration lists: found in a directory the way kubelet,
//! libcni and containerd find them (`.conf`, `.conflist` and `.json` files,
//! sorted by name, the first valid one wins), validated (a name, a version,
//! at least one plugin, each plugin's program present), and re-read whenever
//! the directory changes.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde_json::{Map, Value};

/// Largest configuration file read.
const MAX_CONF_BYTES: u64 = 1 << 20;

/// A usable network configuration list.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NetworkList {
    /// The file it came from.
    pub(crate) file: PathBuf,
    pub(crate) name: String,
    pub(crate) cni_version: String,
    /// Each plugin's configuration as written (without name and version).
    pub(crate) plugins: Vec<Map<String, Value>>,
    /// `disableCheck`: the list asks for no CHECK.
    pub(crate) disable_check: bool,
    /// The list as written, kept in the attachment cache for DEL.
    pub(crate) raw: Value,
}

impl NetworkList {
    /// Parses a list (or a single-plugin `.conf`, which becomes a list of one).
    pub(crate) fn parse(file: &Path, text: &[u8]) -> Result<Self, String> {
        let raw: Value = serde_json::from_slice(text).map_err(|e| format!("not JSON: {e}"))?;
        Self::from_value(file, raw)
    }

    pub(crate) fn from_value(file: &Path, raw: Value) -> Result<Self, String> {
        let object = raw.as_object().ok_or("not a JSON object")?;
        let name = object.get("name").and_then(Value::as_str).unwrap_or_default().to_string();
        if name.is_empty() {
            return Err("no network name".into());
        }
        let cni_version = object.get("cniVersion").and_then(Value::as_str).unwrap_or("0.1.0").to_string();
        if !super::version::known(&cni_version) {
            return Err(format!("unsupported cniVersion {cni_version:?}"));
        }
        let plugins: Vec<Map<String, Value>> = match object.get("plugins") {
            Some(Value::Array(list)) => list
                .iter()
                .map(|p| p.as_object().cloned().ok_or("a plugin is not a JSON object"))
                .collect::<Result<_, _>>()?,
            Some(_) => return Err("\"plugins\" is not a list".into()),
            // A single plugin configuration (a `.conf` file).
            None => {
                let mut single = object.clone();
                single.remove("name");
                single.remove("cniVersion");
                vec![single]
            }
        };
        if plugins.is_empty() {
            return Err("no plugins".into());
        }
        for (i, plugin) in plugins.iter().enumerate() {
            let kind = plugin.get("type").and_then(Value::as_str).unwrap_or_default();
            if kind.is_empty() || kind.contains('/') {
                return Err(format!("plugin {i} has no valid \"type\""));
            }
        }
        let disable_check = object.get("disableCheck").and_then(Value::as_bool).unwrap_or(false);
        Ok(Self { file: file.to_path_buf(), name, cni_version, plugins, disable_check, raw })
    }

    /// The plugin types, in order.
    pub(crate) fn types(&self) -> impl Iterator<Item = &str> {
        self.plugins.iter().map(|p| p.get("type").and_then(Value::as_str).unwrap_or_default())
    }
}

/// The program of a plugin type: the first match in `bin_dirs`.
pub(crate) fn find_plugin(kind: &str, bin_dirs: &[PathBuf]) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    bin_dirs
        .iter()
        .map(|d| d.join(kind))
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

/// Why no list is usable, for NetworkReady's message.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum NoList {
    /// The directory has no configuration file at all.
    Empty(PathBuf),
    /// Files exist but none is valid; the reasons, file by file.
    Invalid(Vec<String>),
}

impl std::fmt::Display for NoList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoList::Empty(dir) => write!(f, "no CNI network configuration in {}", dir.display()),
            NoList::Invalid(reasons) => write!(f, "no valid CNI network configuration: {}", reasons.join("; ")),
        }
    }
}

/// Loads the first valid list in `dir` whose plugins all exist.
pub(crate) fn load_first(dir: &Path, bin_dirs: &[PathBuf]) -> Result<NetworkList, NoList> {
    let mut files: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("conf" | "conflist" | "json")))
            .collect(),
        Err(_) => Vec::new(),
    };
    files.sort();
    if files.is_empty() {
        return Err(NoList::Empty(dir.to_path_buf()));
    }
    let mut reasons = Vec::new();
    for file in files {
        let text = match crate::bounded_file::read(&file, MAX_CONF_BYTES, crate::bounded_file::FinalLink::Follow) {
            Ok(text) => text,
            Err(e) => {
                reasons.push(format!("{}: {e}", file.display()));
                continue;
            }
        };
        let list = match NetworkList::parse(&file, &text) {
            Ok(list) => list,
            Err(e) => {
                reasons.push(format!("{}: {e}", file.display()));
                continue;
            }
        };
        let missing: Vec<&str> = list.types().filter(|t| find_plugin(t, bin_dirs).is_none()).collect();
        if !missing.is_empty() {
            let dirs: Vec<String> = bin_dirs.iter().map(|d| d.display().to_string()).collect();
            reasons.push(format!("{}: plugin {} not found in {}", file.display(), missing.join(", "), dirs.join(":")));
            continue;
        }
        return Ok(list);
    }
    Err(NoList::Invalid(reasons))
}

/// A cheap fingerprint of what `load_first` reads: the configuration
/// directory's entries (names, sizes, modification times) and the plugin
/// directories' own modification times, which change as a plugin is
/// installed or removed. What is unchanged is not parsed again, and a list
/// refused for a missing plugin is looked at again once plugins come.
pub(crate) fn fingerprint(dir: &Path, bin_dirs: &[PathBuf]) -> Vec<(PathBuf, u64, Option<SystemTime>)> {
    let plugin_dirs = bin_dirs.iter().map(|d| (d.clone(), 0, std::fs::metadata(d).and_then(|m| m.modified()).ok()));
    let mut found: Vec<(PathBuf, u64, Option<SystemTime>)> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| {
                    let path = e.path();
                    let meta = std::fs::metadata(&path).ok()?;
                    Some((path, meta.len(), meta.modified().ok()))
                })
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found.extend(plugin_dirs);
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_single_confs_parse() {
        let list = NetworkList::parse(
            Path::new("a.conflist"),
            br#"{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"bridge"},{"type":"portmap"}]}"#,
        )
        .unwrap();
        assert_eq!(list.types().collect::<Vec<_>>(), ["bridge", "portmap"]);
        let single = NetworkList::parse(
            Path::new("a.conf"),
            br#"{"cniVersion":"0.3.1","name":"n","type":"bridge","bridge":"b"}"#,
        )
        .unwrap();
        assert_eq!(single.plugins.len(), 1);
        assert_eq!(single.plugins[0].get("bridge"), Some(&Value::from("b")));
        assert!(single.plugins[0].get("name").is_none());
    }

    #[test]
    fn invalid_lists_are_refused() {
        for bad in [
            &br#"{"cniVersion":"1.0.0","plugins":[{"type":"bridge"}]}"#[..],
            br#"{"cniVersion":"1.0.0","name":"n","plugins":[]}"#,
            br#"{"cniVersion":"1.0.0","name":"n","plugins":[{"bridge":"x"}]}"#,
            br#"{"cniVersion":"9.9.9","name":"n","plugins":[{"type":"bridge"}]}"#,
            br#"{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"../bin/sh"}]}"#,
            b"not json",
        ] {
            assert!(NetworkList::parse(Path::new("x"), bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }
}
