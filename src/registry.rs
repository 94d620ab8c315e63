//! The in-memory index of one kind of object, pods or containers: ids and
//! the unique prefixes crictl accepts, names reserved while a create is in
//! flight, each entry's operation lock, and the entry's record changed in
//! memory and written through to disk at once.
//!
//! An entry is the live state of one object (`L`: its record and the
//! processes it holds). The index keeps each entry under its id and its
//! name (unique among the objects of its kind); a create reserves the name
//! first, under the id it drew, and either commits its entry under both or
//! gives the name back.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::Serialize;

use crate::ids::{self, Resolved};
use crate::quote::quote;
use crate::store::{self, StoreError};

/// Why an id or id prefix found no single entry. The managers answer each
/// with an error of their own that names the kind (`container … not found`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum LookupError {
    #[error("{} not found", quote(.0))]
    NotFound(String),
    #[error("id prefix {} matches more than one entry", quote(.0))]
    Ambiguous(String),
}

/// A name that is already taken, by the entry (or the create in flight) `id`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the name is taken by {id}")]
pub(crate) struct NameTaken {
    pub(crate) id: String,
}

/// The live state of an entry, which holds the entry's persisted record.
pub(crate) trait Tracked {
    type Record: Serialize + Clone;
    /// The record, shared with the views made of it: a change copies it
    /// only while a view still holds the old one.
    fn record_mut(&mut self) -> &mut Arc<Self::Record>;
}

/// One object of the index.
pub(crate) struct Entry<L> {
    /// Serialises lifecycle operations (and so record writes) on the object.
    op: tokio::sync::Mutex<()>,
    live: Mutex<L>,
    /// Set as the entry leaves the index: whoever still holds it sees it gone.
    removed: AtomicBool,
}

impl<L> Entry<L> {
    fn new(live: L) -> Arc<Self> {
        Arc::new(Self { op: tokio::sync::Mutex::new(()), live: Mutex::new(live), removed: AtomicBool::new(false) })
    }

    /// The live state (a panic that held it does not poison it for others).
    pub(crate) fn live(&self) -> MutexGuard<'_, L> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The operation lock: held by every lifecycle operation on the object
    /// from its first look at the state to its last record write.
    pub(crate) async fn lock_op(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.op.lock().await
    }

    /// Whether the entry was removed from the index.
    pub(crate) fn is_removed(&self) -> bool {
        self.removed.load(Ordering::SeqCst)
    }
}

impl<L: Tracked> Entry<L> {
    /// Changes the record in memory and writes it to `path`; callers hold
    /// the operation lock, so writes of the record never cross.
    pub(crate) fn update_record(&self, path: &Path, change: impl FnOnce(&mut L::Record)) -> Result<(), StoreError> {
        let record = {
            let mut live = self.live();
            let record = live.record_mut();
            change(Arc::make_mut(record));
            record.clone()
        };
        store::write_json(path, &*record)
    }
}

struct Indexed<L> {
    entry: Arc<Entry<L>>,
    name: String,
}

struct Index<L> {
    by_id: HashMap<String, Indexed<L>>,
    /// Name → id, for the entries and for the creates in flight.
    names: HashMap<String, String>,
}

/// The index of one kind of object.
pub(crate) struct Registry<L> {
    index: Mutex<Index<L>>,
}

impl<L> Default for Registry<L> {
    fn default() -> Self {
        Self { index: Mutex::new(Index { by_id: HashMap::new(), names: HashMap::new() }) }
    }
}

impl<L> Registry<L> {
    fn index(&self) -> MutexGuard<'_, Index<L>> {
        self.index.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The full id of the entry `id` names: itself, or the one id it is a prefix of.
    pub(crate) fn resolve(&self, id: &str) -> Result<String, LookupError> {
        Self::resolve_in(&self.index(), id)
    }

    fn resolve_in(index: &Index<L>, id: &str) -> Result<String, LookupError> {
        match ids::resolve(id, index.by_id.keys().map(String::as_str)) {
            Resolved::One(found) => Ok(found.to_string()),
            Resolved::None => Err(LookupError::NotFound(id.to_string())),
            Resolved::Ambiguous => Err(LookupError::Ambiguous(id.to_string())),
        }
    }

    /// The entry `id` names (see `resolve`), with its full id.
    pub(crate) fn get(&self, id: &str) -> Result<(String, Arc<Entry<L>>), LookupError> {
        let index = self.index();
        let id = Self::resolve_in(&index, id)?;
        let entry = index.by_id.get(&id).map(|i| i.entry.clone()).ok_or_else(|| LookupError::NotFound(id.clone()))?;
        Ok((id, entry))
    }

    /// Every entry, in no particular order.
    pub(crate) fn entries(&self) -> Vec<Arc<Entry<L>>> {
        self.index().by_id.values().map(|i| i.entry.clone()).collect()
    }

    /// Whether `id` (a full id) is an entry's.
    pub(crate) fn contains(&self, id: &str) -> bool {
        self.index().by_id.contains_key(id)
    }

    /// Reserves `name` for the create of `id`, until the returned
    /// reservation commits the entry or is dropped (the create failed, or
    /// was abandoned): then the name is free again.
    pub(crate) fn reserve(&self, name: &str, id: &str) -> Result<Reservation<'_, L>, NameTaken> {
        let mut index = self.index();
        if let Some(existing) = index.names.get(name) {
            return Err(NameTaken { id: existing.clone() });
        }
        index.names.insert(name.to_string(), id.to_string());
        Ok(Reservation { registry: self, name: name.to_string(), id: id.to_string(), committed: false })
    }

    /// Indexes an entry under `id` and `name` at once: an object reloaded
    /// from its record.
    pub(crate) fn insert(&self, id: &str, name: &str, live: L) -> Arc<Entry<L>> {
        let entry = Entry::new(live);
        let mut index = self.index();
        index.names.insert(name.to_string(), id.to_string());
        index.by_id.insert(id.to_string(), Indexed { entry: entry.clone(), name: name.to_string() });
        entry
    }

    /// Takes the entry `id` (a full id) out of the index and frees its name;
    /// whoever still holds the entry sees it removed. Nothing when it is not there.
    pub(crate) fn remove(&self, id: &str) {
        let mut index = self.index();
        if let Some(removed) = index.by_id.remove(id) {
            removed.entry.removed.store(true, Ordering::SeqCst);
            if index.names.get(&removed.name).is_some_and(|holder| holder == id) {
                index.names.remove(&removed.name);
            }
        }
    }

    /// Frees `name` if `id` still holds it.
    fn release(&self, name: &str, id: &str) {
        let mut index = self.index();
        if index.names.get(name).is_some_and(|holder| holder == id) {
            index.names.remove(name);
        }
    }
}

/// A name held for a create in flight; dropped without `commit`, it frees the name.
#[must_use = "a reservation dropped at once frees its name again"]
pub(crate) struct Reservation<'a, L> {
    registry: &'a Registry<L>,
    name: String,
    id: String,
    committed: bool,
}

impl<L> Reservation<'_, L> {
    /// The create succeeded: its entry joins the index under the reserved
    /// name and the id, and is returned.
    pub(crate) fn commit(mut self, live: L) -> Arc<Entry<L>> {
        self.committed = true;
        let entry = Entry::new(live);
        let mut index = self.registry.index();
        index.by_id.insert(self.id.clone(), Indexed { entry: entry.clone(), name: self.name.clone() });
        entry
    }
}

impl<L> Drop for Reservation<'_, L> {
    fn drop(&mut self) {
        if !self.committed {
            self.registry.release(&self.name, &self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;

    #[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Record {
        id: String,
        note: String,
    }

    struct Live {
        record: Arc<Record>,
    }

    impl Tracked for Live {
        type Record = Record;
        fn record_mut(&mut self) -> &mut Arc<Record> {
            &mut self.record
        }
    }

    fn live(id: &str) -> Live {
        Live { record: Arc::new(Record { id: id.into(), note: String::new() }) }
    }

    fn registry_of(ids: &[&str]) -> Registry<Live> {
        let registry = Registry::default();
        for id in ids {
            registry.insert(id, &format!("name-{id}"), live(id));
        }
        registry
    }

    #[test]
    fn ids_resolve_whole_or_by_a_unique_prefix() {
        let registry = registry_of(&["abc1", "abc2", "def0"]);
        assert_eq!(registry.resolve("def"), Ok("def0".into()));
        assert_eq!(registry.resolve("abc1"), Ok("abc1".into()));
        assert_eq!(registry.resolve("abc"), Err(LookupError::Ambiguous("abc".into())));
        assert_eq!(registry.resolve("0"), Err(LookupError::NotFound("0".into())));
        let (id, entry) = registry.get("de").unwrap();
        assert_eq!((id.as_str(), entry.live().record.id.as_str()), ("def0", "def0"));
        assert!(matches!(registry.get("abc"), Err(LookupError::Ambiguous(_))));
        assert!(matches!(registry.get("f"), Err(LookupError::NotFound(_))));
    }

    #[test]
    fn a_whole_id_wins_over_the_longer_ids_it_prefixes() {
        let registry = registry_of(&["ab", "abc"]);
        assert_eq!(registry.resolve("ab"), Ok("ab".into()));
        assert_eq!(registry.resolve("abc"), Ok("abc".into()));
    }

    #[test]
    fn a_name_is_reserved_while_its_create_is_in_flight_and_freed_if_it_fails() {
        let registry: Registry<Live> = Registry::default();
        let first = registry.reserve("web", "id1").unwrap();
        assert_eq!(registry.reserve("web", "id2").err(), Some(NameTaken { id: "id1".into() }));
        // In flight, it is no entry yet.
        assert!(matches!(registry.get("id1"), Err(LookupError::NotFound(_))));
        assert!(registry.entries().is_empty());
        drop(first);
        let second = registry.reserve("web", "id2").expect("the failed create's name is free");
        second.commit(live("id2"));
        assert_eq!(registry.reserve("web", "id3").err(), Some(NameTaken { id: "id2".into() }));
    }

    #[test]
    fn a_committed_create_is_an_entry_under_its_id_and_name() {
        let registry: Registry<Live> = Registry::default();
        let entry = registry.reserve("web", "id1").unwrap().commit(live("id1"));
        let (id, found) = registry.get("id1").unwrap();
        assert_eq!(id, "id1");
        assert!(Arc::ptr_eq(&entry, &found));
        assert!(registry.contains("id1"));
        assert_eq!(registry.entries().len(), 1);
        assert!(registry.reserve("web", "id2").is_err());
        assert!(registry.reserve("other", "id2").is_ok());
    }

    #[test]
    fn a_removed_entry_is_gone_for_its_holders_and_frees_its_name() {
        let registry = registry_of(&["id1", "id2"]);
        let (_, held) = registry.get("id1").unwrap();
        registry.remove("id1");
        assert!(held.is_removed());
        assert!(matches!(registry.get("id1"), Err(LookupError::NotFound(_))));
        assert_eq!(registry.resolve("id"), Ok("id2".into()), "the prefix is unique again");
        assert!(!registry.contains("id1"));
        assert_eq!(registry.entries().len(), 1);
        assert!(registry.reserve("name-id1", "id3").is_ok());
        registry.remove("id1");
        registry.remove("unknown");
        assert!(!registry.get("id2").unwrap().1.is_removed());
    }

    #[test]
    fn removing_an_entry_leaves_its_name_to_another_holder() {
        let registry: Registry<Live> = Registry::default();
        registry.insert("id1", "web", live("id1"));
        registry.insert("id2", "web", live("id2"));
        registry.remove("id1");
        assert_eq!(registry.reserve("web", "id3").err(), Some(NameTaken { id: "id2".into() }));
        // Nor does a reservation dropped after its name changed hands free it.
        let registry: Registry<Live> = Registry::default();
        let reservation = registry.reserve("db", "id1").unwrap();
        registry.insert("id2", "db", live("id2"));
        drop(reservation);
        assert_eq!(registry.reserve("db", "id3").err(), Some(NameTaken { id: "id2".into() }));
    }

    #[tokio::test]
    async fn the_operation_lock_admits_one_operation_at_a_time() {
        let registry = registry_of(&["id1", "id2"]);
        let (_, entry) = registry.get("id1").unwrap();
        let held = entry.lock_op().await;
        assert!(entry.lock_op().now_or_never().is_none(), "a second operation waits");
        let (_, other) = registry.get("id2").unwrap();
        assert!(other.lock_op().now_or_never().is_some(), "another entry's operations do not wait");
        drop(held);
        assert!(entry.lock_op().now_or_never().is_some());
    }

    #[test]
    fn a_record_update_changes_memory_and_disk_at_once() {
        let scratch = tempfile::tempdir().unwrap();
        let path = scratch.path().join("record.json");
        let registry = registry_of(&["id1"]);
        let (_, entry) = registry.get("id1").unwrap();
        entry.update_record(&path, |r| r.note = "stopped".into()).unwrap();
        let on_disk: Record = store::read_existing_json(&path).unwrap();
        assert_eq!(on_disk, Record { id: "id1".into(), note: "stopped".into() });
        assert_eq!(*entry.live().record, on_disk);
        // A write that fails is reported (the change stays in memory).
        let missing = scratch.path().join("no-such-dir").join("record.json");
        assert!(entry.update_record(&missing, |r| r.note = "removed".into()).is_err());
        assert_eq!(entry.live().record.note, "removed");
    }
}
