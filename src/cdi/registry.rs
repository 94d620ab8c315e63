//! The CDI devices of the configured spec directories: loaded at first use
//! and again whenever a directory or a loaded file has changed (one `stat`
//! per directory and per file at each use; nothing at all for a container
//! that asks for no device). Only `*.json` and `*.yaml` files directly in a
//! directory count; each is read with `bounded_file` (1 MiB at most,
//! non-blocking, a regular file, never through a link leading out of its
//! directory). A file that cannot be read or breaks a rule is logged and
//! skipped, and remembered so that a request for a device it would have
//! given says why it is missing. A later directory's device overrides an
//! earlier one's of the same name; two files of one directory defining the
//! same device make it ambiguous (usable again once one of them goes or a
//! later directory defines it).

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use super::name::{parse_kind, QualifiedName};
use super::spec::{self, ContainerEdits, Format};
use super::validate::{self, ValidSpec};
use crate::bounded_file;

/// The largest spec file read.
pub(crate) const SPEC_FILE_LIMIT: u64 = 1 << 20;

/// What a file or directory looked like when loaded: None when absent.
type Snapshot = Option<(i64, i64, u64, u64)>;

fn snapshot(path: &Path) -> Snapshot {
    std::fs::metadata(path).ok().map(|m| (m.mtime(), m.mtime_nsec(), m.ino(), m.size()))
}

/// A valid spec file, where it was found.
#[derive(Debug)]
pub(crate) struct LoadedSpec {
    pub(crate) path: PathBuf,
    /// The index of its directory: a higher one overrides.
    pub(crate) priority: usize,
    pub(crate) spec: ValidSpec,
}

/// What a qualified name refers to.
#[derive(Debug, Clone)]
pub(crate) enum Entry {
    /// The device of this name in this spec.
    Device { spec: Arc<LoadedSpec>, name: String },
    /// Defined by two or more files of one directory (of this priority).
    Ambiguous { priority: usize, paths: Vec<PathBuf> },
}

/// A spec file that is not used, and why.
#[derive(Debug, Clone)]
pub(crate) struct Skipped {
    pub(crate) path: PathBuf,
    pub(crate) why: String,
}

/// The devices of the spec directories as they were at one load.
#[derive(Debug, Default)]
pub(crate) struct Devices {
    pub(crate) entries: BTreeMap<QualifiedName, Entry>,
    /// Files that could not be read or parsed (their devices are unknown).
    pub(crate) unreadable: Vec<Skipped>,
    /// Devices named by files that were read but break a rule.
    pub(crate) invalid: BTreeMap<QualifiedName, Skipped>,
}

#[derive(Default)]
struct Loaded {
    done: bool,
    dirs: Vec<Snapshot>,
    files: Vec<(PathBuf, Snapshot)>,
    devices: Arc<Devices>,
}

pub(crate) struct CdiRegistry {
    dirs: Vec<PathBuf>,
    loaded: Mutex<Loaded>,
}

impl CdiRegistry {
    pub(crate) fn new(dirs: Vec<PathBuf>) -> Self {
        Self { dirs, loaded: Mutex::default() }
    }

    fn lock(&self) -> MutexGuard<'_, Loaded> {
        self.loaded.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The devices now, reloaded first when anything changed.
    pub(crate) fn devices(&self) -> Arc<Devices> {
        let mut loaded = self.lock();
        let unchanged = loaded.done
            && self.dirs.iter().zip(&loaded.dirs).all(|(dir, was)| snapshot(dir) == *was)
            && loaded.files.iter().all(|(file, was)| snapshot(file) == *was);
        if !unchanged {
            *loaded = self.load();
        }
        loaded.devices.clone()
    }

    fn load(&self) -> Loaded {
        let dirs = self.dirs.iter().map(|d| snapshot(d)).collect();
        let mut files = Vec::new();
        let mut devices = Devices::default();
        let mut specs = 0;
        for (priority, dir) in self.dirs.iter().enumerate() {
            let entries = match std::fs::read_dir(dir) {
                Ok(entries) => entries,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), error = %e, "cannot read a CDI spec directory");
                    continue;
                }
            };
            let mut names: Vec<(String, Format)> = entries
                .flatten()
                .filter(|e| !e.file_type().is_ok_and(|t| t.is_dir()))
                .filter_map(|e| e.file_name().into_string().ok())
                .filter_map(|name| Format::of(&name).map(|format| (name, format)))
                .collect();
            names.sort_by(|a, b| a.0.cmp(&b.0));
            for (name, format) in names {
                let path = dir.join(&name);
                files.push((path.clone(), snapshot(&path)));
                let read = bounded_file::read_beneath(dir, name.as_ref(), SPEC_FILE_LIMIT)
                    .map_err(unreadable)
                    .and_then(|data| spec::parse(&data, format));
                let parsed = match read {
                    Ok(parsed) => parsed,
                    Err(why) => {
                        tracing::warn!(file = %path.display(), error = %why, "skipping a CDI spec file that cannot be read");
                        devices.unreadable.push(Skipped { path, why });
                        continue;
                    }
                };
                // The names a broken file would have given, for the errors.
                let claimed: Vec<QualifiedName> = match parse_kind(&parsed.kind) {
                    Ok((vendor, class)) => parsed
                        .devices
                        .iter()
                        .map(|d| QualifiedName { vendor: vendor.clone(), class: class.clone(), name: d.name.clone() })
                        .collect(),
                    Err(_) => Vec::new(),
                };
                match validate::spec(parsed) {
                    Ok(spec) => {
                        specs += 1;
                        add(&mut devices, Arc::new(LoadedSpec { path, priority, spec }));
                    }
                    Err(why) => {
                        tracing::warn!(file = %path.display(), error = %why, "skipping an invalid CDI spec file");
                        for name in claimed {
                            devices.invalid.insert(name, Skipped { path: path.clone(), why: why.clone() });
                        }
                    }
                }
            }
        }
        tracing::info!(dirs = ?self.dirs, specs, devices = devices.entries.len(), "CDI specs loaded");
        Loaded { done: true, dirs, files, devices: Arc::new(devices) }
    }
}

/// Why a spec file could not be read, said after its path.
fn unreadable(e: bounded_file::BoundedReadError) -> String {
    use bounded_file::BoundedReadError as E;
    match e {
        E::NotFound(_) => "is gone".into(),
        E::NotRegular { kind, .. } => format!("is {kind}, not a regular file"),
        E::TooLarge { size, limit, .. } => format!("is {size} bytes, over the limit of {limit} bytes"),
        E::Io { source, .. } => format!("cannot be read: {source}"),
        E::Outside { dir, .. } => format!("leads outside {} (a symbolic link out of it)", dir.display()),
    }
}

/// Adds a valid spec's devices: one of a higher priority replaces one of a
/// lower; two of the same priority make the name ambiguous.
fn add(devices: &mut Devices, spec: Arc<LoadedSpec>) {
    for name in spec.spec.devices.keys() {
        let qualified =
            QualifiedName { vendor: spec.spec.vendor.clone(), class: spec.spec.class.clone(), name: name.clone() };
        let new = Entry::Device { spec: spec.clone(), name: name.clone() };
        let slot = devices.entries.entry(qualified);
        match slot {
            std::collections::btree_map::Entry::Vacant(v) => {
                v.insert(new);
            }
            std::collections::btree_map::Entry::Occupied(mut o) => {
                let (priority, mut paths) = match o.get() {
                    Entry::Device { spec: other, .. } => (other.priority, vec![other.path.clone()]),
                    Entry::Ambiguous { priority, paths } => (*priority, paths.clone()),
                };
                // Directories are read in order: an existing entry's priority is never higher.
                if priority < spec.priority {
                    o.insert(new);
                } else {
                    paths.push(spec.path.clone());
                    o.insert(Entry::Ambiguous { priority, paths });
                }
            }
        }
    }
}

impl LoadedSpec {
    /// The spec-wide edits and those of its device `name`.
    pub(crate) fn edits_of(&self, name: &str) -> Option<(&ContainerEdits, &ContainerEdits)> {
        self.spec.devices.get(name).map(|own| (&self.spec.edits, own))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(kind: &str, device: &str, value: &str) -> String {
        format!(
            r#"{{"cdiVersion":"0.5.0","kind":"{kind}","devices":[{{"name":"{device}","containerEdits":{{"env":["V={value}"]}}}}]}}"#
        )
    }

    fn name(text: &str) -> QualifiedName {
        QualifiedName::parse(text).unwrap()
    }

    /// The env value the device of `text` sets, or how it is listed.
    fn lookup(devices: &Devices, text: &str) -> String {
        match devices.entries.get(&name(text)) {
            Some(Entry::Device { spec, name }) => spec.spec.devices[name].env[0].clone(),
            Some(Entry::Ambiguous { paths, .. }) => format!("ambiguous {}", paths.len()),
            None => "none".into(),
        }
    }

    #[test]
    fn later_directories_override_a_directory_conflicts_and_changes_count() {
        let scratch = tempfile::tempdir().unwrap();
        let base = scratch.path().to_path_buf();
        let (first, second) = (base.join("a"), base.join("b"));
        std::fs::create_dir_all(&first).unwrap();
        let registry = CdiRegistry::new(vec![first.clone(), second.clone()]);
        assert!(registry.devices().entries.is_empty());
        std::fs::write(first.join("10.json"), spec("a.com/x", "0", "first")).unwrap();
        std::fs::write(
            first.join("20.yaml"),
            "cdiVersion: 0.5.0\nkind: a.com/x\ndevices: [{name: '1', containerEdits: {env: [V=one]}}]\n",
        )
        .unwrap();
        std::fs::write(first.join("skip.txt"), "not a spec").unwrap();
        std::fs::create_dir_all(first.join("sub.json")).unwrap();
        let devices = registry.devices();
        assert_eq!((lookup(&devices, "a.com/x=0"), lookup(&devices, "a.com/x=1")), ("V=first".into(), "V=one".into()));
        assert!(devices.unreadable.is_empty(), "{:?}", devices.unreadable);
        // Unchanged: the same load.
        assert!(Arc::ptr_eq(&devices, &registry.devices()));

        std::fs::write(first.join("30.json"), spec("a.com/x", "0", "again")).unwrap();
        assert_eq!(lookup(&registry.devices(), "a.com/x=0"), "ambiguous 2");
        std::fs::create_dir_all(&second).unwrap();
        std::fs::write(second.join("00.json"), spec("a.com/x", "0", "second")).unwrap();
        assert_eq!(lookup(&registry.devices(), "a.com/x=0"), "V=second");
        std::fs::remove_file(second.join("00.json")).unwrap();
        std::fs::remove_file(first.join("30.json")).unwrap();
        assert_eq!(lookup(&registry.devices(), "a.com/x=0"), "V=first");
        // Changed in place.
        std::fs::write(first.join("10.json"), spec("a.com/x", "0", "edited")).unwrap();
        assert_eq!(lookup(&registry.devices(), "a.com/x=0"), "V=edited");

        // Broken files are skipped, and remembered with why.
        std::fs::write(first.join("40.json"), "{").unwrap();
        let invalid = spec("a.com/x", "9", "v").replace("0.5.0", "7.0.0");
        std::fs::write(first.join("50.json"), invalid).unwrap();
        let devices = registry.devices();
        assert_eq!(lookup(&devices, "a.com/x=0"), "V=edited");
        assert_eq!(devices.unreadable.len(), 1);
        assert!(devices.unreadable[0].path.ends_with("40.json") && devices.unreadable[0].why.contains("invalid JSON"));
        nix::unistd::mkfifo(&first.join("60.yaml"), nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let devices = registry.devices();
        assert_eq!(devices.unreadable[1].why, "is a FIFO, not a regular file");
        assert_eq!(lookup(&devices, "a.com/x=0"), "V=edited");
        let skipped = &devices.invalid[&name("a.com/x=9")];
        assert!(skipped.path.ends_with("50.json") && skipped.why.contains("7.0.0"), "{skipped:?}");
        std::fs::remove_dir_all(&base).unwrap();
        assert!(registry.devices().entries.is_empty());
    }
}
