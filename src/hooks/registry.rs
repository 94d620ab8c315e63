//! The hook definitions of the configured `hooks.d` directories: loaded at
//! first use, and again whenever a directory or a loaded file has changed
//! (checked at each use with one `stat` per directory and per loaded file;
//! with no directory there, that is all a container costs). A later
//! directory's file overrides an earlier one's of the same name; the
//! definitions apply in file-name order; an invalid file is logged and
//! skipped.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use oci_spec::runtime::{Hook, Hooks};

use super::definition::{ContainerFacts, Definition, Stage};
use crate::bounded_file::{self, FinalLink};

/// The largest definition file read.
const DEFINITION_LIMIT: u64 = 1 << 20;

/// What a file or directory looked like when loaded: None when absent.
type Snapshot = Option<(i64, i64, u64, u64)>;

fn snapshot(path: &Path) -> Snapshot {
    std::fs::metadata(path).ok().map(|m| (m.mtime(), m.mtime_nsec(), m.ino(), m.size()))
}

#[derive(Default)]
struct Loaded {
    /// Whether anything was loaded yet.
    done: bool,
    dirs: Vec<Snapshot>,
    files: Vec<(PathBuf, Snapshot)>,
    /// By file name, in file-name order.
    definitions: Vec<(String, Definition)>,
}

pub(crate) struct HookRegistry {
    dirs: Vec<PathBuf>,
    loaded: Mutex<Loaded>,
}

impl HookRegistry {
    pub(crate) fn new(dirs: Vec<PathBuf>) -> Self {
        Self { dirs, loaded: Mutex::default() }
    }

    /// Loads the definitions now (at daemon start, so an invalid file is
    /// reported before the first container).
    pub(crate) fn load_now(&self) {
        let mut loaded = self.lock();
        self.refresh(&mut loaded);
    }

    fn lock(&self) -> MutexGuard<'_, Loaded> {
        self.loaded.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The hooks, by stage, of every definition that applies to a container
    /// with these facts; None when none does.
    pub(crate) fn matching(&self, facts: &ContainerFacts<'_>) -> Option<Hooks> {
        let mut loaded = self.lock();
        self.refresh(&mut loaded);
        let mut by_stage: BTreeMap<Stage, Vec<Hook>> = BTreeMap::new();
        for (name, definition) in loaded.definitions.iter().filter(|(_, d)| d.matches(facts)) {
            tracing::debug!(hook = %name, stages = ?definition.stages, "OCI hook applies");
            for stage in &definition.stages {
                by_stage.entry(*stage).or_default().push(definition.hook.clone());
            }
        }
        if by_stage.is_empty() {
            return None;
        }
        let mut take = |stage| by_stage.remove(&stage);
        let mut hooks = Hooks::default();
        hooks.set_prestart(take(Stage::Prestart));
        hooks.set_create_runtime(take(Stage::CreateRuntime));
        hooks.set_create_container(take(Stage::CreateContainer));
        hooks.set_start_container(take(Stage::StartContainer));
        hooks.set_poststart(take(Stage::Poststart));
        hooks.set_poststop(take(Stage::Poststop));
        Some(hooks)
    }

    /// Reloads when a directory or a loaded file is not as it was.
    fn refresh(&self, loaded: &mut Loaded) {
        let unchanged = loaded.done
            && self.dirs.iter().zip(&loaded.dirs).all(|(dir, was)| snapshot(dir) == *was)
            && loaded.files.iter().all(|(file, was)| snapshot(file) == *was);
        if !unchanged {
            *loaded = self.load();
        }
    }

    fn load(&self) -> Loaded {
        let dirs = self.dirs.iter().map(|d| snapshot(d)).collect();
        // File name → path, a later directory's replacing an earlier one's.
        let mut chosen: BTreeMap<String, PathBuf> = BTreeMap::new();
        for dir in &self.dirs {
            let entries = match std::fs::read_dir(dir) {
                Ok(entries) => entries,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), error = %e, "cannot read an OCI hooks directory");
                    continue;
                }
            };
            for entry in entries.flatten() {
                let Some(name) = entry.file_name().to_str().map(str::to_string) else { continue };
                if name.ends_with(".json") {
                    chosen.insert(name, entry.path());
                }
            }
        }
        let mut files = Vec::new();
        let mut definitions = Vec::new();
        for (name, path) in chosen {
            files.push((path.clone(), snapshot(&path)));
            let parsed = bounded_file::read(&path, DEFINITION_LIMIT, FinalLink::Follow)
                .map_err(|e| e.to_string())
                .and_then(|data| Definition::parse(&data).map_err(|e| e.to_string()));
            match parsed {
                Ok(definition) => definitions.push((name, definition)),
                Err(error) => {
                    tracing::warn!(file = %path.display(), %error, "skipping an invalid OCI hook definition")
                }
            }
        }
        tracing::info!(
            dirs = ?self.dirs,
            hooks = definitions.len(),
            "OCI hook definitions loaded"
        );
        Loaded { done: true, dirs, files, definitions }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn write(dir: &Path, name: &str, path: &str, stage: &str) {
        let text = format!(
            r#"{{"version":"1.0.0","hook":{{"path":"{path}"}},"when":{{"always":true}},"stages":["{stage}"]}}"#
        );
        std::fs::write(dir.join(name), text).unwrap();
    }

    #[test]
    fn later_directories_override_and_changes_are_picked_up() {
        let scratch = tempfile::tempdir().unwrap();
        let base = scratch.path().to_path_buf();
        let (first, second) = (base.join("a"), base.join("b"));
        std::fs::create_dir_all(&first).unwrap();
        let registry = HookRegistry::new(vec![first.clone(), second.clone()]);
        let annotations = HashMap::new();
        let facts = ContainerFacts { annotations: &annotations, command: None, has_bind_mounts: false };
        assert!(registry.matching(&facts).is_none());
        write(&first, "10-x.json", "/bin/true", "prestart");
        write(&first, "20-y.json", "/bin/false", "prestart");
        write(&first, "30-bad.json", "bin/false", "prestart");
        let hooks = registry.matching(&facts).unwrap();
        let paths: Vec<_> = hooks.prestart().clone().unwrap().iter().map(|h| h.path().clone()).collect();
        assert_eq!(paths, [PathBuf::from("/bin/true"), PathBuf::from("/bin/false")]);
        std::fs::create_dir_all(&second).unwrap();
        write(&second, "10-x.json", "/bin/sh", "poststop");
        let hooks = registry.matching(&facts).unwrap();
        assert_eq!(hooks.prestart().clone().unwrap().len(), 1);
        assert_eq!(hooks.poststop().clone().unwrap()[0].path(), Path::new("/bin/sh"));
        std::fs::remove_dir_all(&base).unwrap();
        assert!(registry.matching(&facts).is_none());
    }

    #[test]
    fn the_benchmarks_definition_loads() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("oci-hooks/bench");
        let annotations = HashMap::new();
        let facts = ContainerFacts { annotations: &annotations, command: Some("sh"), has_bind_mounts: false };
        let hooks = HookRegistry::new(vec![dir]).matching(&facts).unwrap();
        assert_eq!(hooks.prestart().clone().unwrap()[0].path(), Path::new("/bin/true"));
        assert!(hooks.poststop().is_none());
    }
}
