//! Container and sandbox lifecycle events (what `GetContainerEvents` streams):
//! the hub the managers report state changes to, where they happen, and the
//! subscribers' side. Without a subscriber an emit costs one atomic load: the
//! event (a snapshot of what changed) is not even built. Each subscriber's
//! backlog is bounded by the channel's ring; one that falls behind it is cut
//! off (it then relists), never slowing the runtime or the other subscribers.
//! Events of the start itself (exits found in records while the daemon was
//! down) are kept for the subscribers that connect soon after it.
//!
//! The hub carries one subject type (the daemon's is `cri::Subject`: a
//! container or a sandbox as it was right after the change); each manager
//! reports through an `Emitter` of its own view, which the hub's subject
//! wraps, so that this module names neither.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::broadcast;

use crate::clock::now_ns;

/// How many events a subscriber may be behind before it is cut off.
pub(crate) const SUBSCRIBER_BACKLOG: usize = 1024;
/// Most start-up events kept for the first subscribers (beyond it, later
/// ones are dropped: those subscribers relist anyway).
const STARTUP_EVENTS: usize = 4096;
/// How long after the daemon starts serving start-up events are kept.
pub(crate) const STARTUP_EVENTS_KEPT: Duration = Duration::from_secs(60);

/// What happened (the CRI's `ContainerEventType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventKind {
    Created,
    Started,
    Stopped,
    Deleted,
}

/// What happened, when, and to what (`S`: as it was right after).
#[derive(Debug, Clone)]
pub(crate) struct Event<S> {
    pub(crate) kind: EventKind,
    /// When it was seen, in nanoseconds since the epoch.
    pub(crate) at_ns: i64,
    pub(crate) subject: S,
}

/// Where events go. Cheap to clone: every clone feeds the same subscribers.
pub(crate) struct EventHub<S> {
    inner: Arc<Inner<S>>,
}

impl<S> Clone for EventHub<S> {
    fn clone(&self) -> Self {
        Self { inner: self.inner.clone() }
    }
}

struct Inner<S> {
    sender: broadcast::Sender<Arc<Event<S>>>,
    /// While the daemon starts (reads its records), events are also kept in
    /// `startup`, for subscribers that connect within `STARTUP_EVENTS_KEPT`.
    keeping: AtomicBool,
    startup: Mutex<Vec<Arc<Event<S>>>>,
}

/// One subscriber: the start-up events first, then what happens next.
pub(crate) struct Subscription<S> {
    pub(crate) startup: Vec<Arc<Event<S>>>,
    pub(crate) receiver: broadcast::Receiver<Arc<Event<S>>>,
}

impl<S: Send + Sync + 'static> Default for EventHub<S> {
    fn default() -> Self {
        Self::new(SUBSCRIBER_BACKLOG)
    }
}

impl<S: Send + Sync + 'static> EventHub<S> {
    pub(crate) fn new(backlog: usize) -> Self {
        let (sender, _) = broadcast::channel(backlog.max(1));
        Self { inner: Arc::new(Inner { sender, keeping: AtomicBool::new(true), startup: Mutex::new(Vec::new()) }) }
    }

    /// Reports `kind` for the subject `snapshot` returns (None: it is gone,
    /// nothing to report). `snapshot` runs only if someone can receive it.
    pub(crate) fn emit(&self, kind: EventKind, snapshot: impl FnOnce() -> Option<S>) {
        if !self.wanted() {
            return;
        }
        let keeping = self.inner.keeping.load(Ordering::Acquire);
        let Some(subject) = snapshot() else {
            return;
        };
        let event = Arc::new(Event { kind, at_ns: now_ns(), subject });
        if keeping {
            let mut startup = self.startup();
            if startup.len() < STARTUP_EVENTS {
                startup.push(event.clone());
            }
        }
        // No receiver is no error: nobody listens.
        let _ = self.inner.sender.send(event);
    }

    /// Whether an event now would reach anyone (for an emitter that must
    /// take its snapshot before the change, as a removal does).
    pub(crate) fn wanted(&self) -> bool {
        self.inner.keeping.load(Ordering::Acquire) || self.inner.sender.receiver_count() > 0
    }

    /// A new subscriber: the events of the start (while they are kept), then
    /// whatever happens from now on.
    pub(crate) fn subscribe(&self) -> Subscription<S> {
        let startup = self.startup().clone();
        Subscription { startup, receiver: self.inner.sender.subscribe() }
    }

    /// The daemon serves: events from now on are only sent; those of the
    /// start are kept `for_` longer for the first subscribers, then dropped.
    pub(crate) fn serving(&self, for_: Duration) {
        self.inner.keeping.store(false, Ordering::Release);
        let hub = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(for_).await;
            hub.startup().clear();
        });
    }

    /// An emitter of `V`s into this hub, each wrapped in the hub's subject by `wrap`.
    pub(crate) fn emitter<V: 'static>(&self, wrap: fn(V) -> S) -> Emitter<V> {
        Emitter { sink: Arc::new(Wrapping { hub: self.clone(), wrap }) }
    }

    fn startup(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Event<S>>>> {
        self.inner.startup.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// How one kind of subject (`V`, a manager's view) reaches a hub: what it
/// emits, the hub's subject wraps. Cheap to clone. The default feeds a hub
/// of its own that nobody subscribes to.
pub(crate) struct Emitter<V> {
    sink: Arc<dyn Sink<V>>,
}

impl<V> Clone for Emitter<V> {
    fn clone(&self) -> Self {
        Self { sink: self.sink.clone() }
    }
}

impl<V: Send + Sync + 'static> Default for Emitter<V> {
    fn default() -> Self {
        EventHub::<V>::default().emitter(|view| view)
    }
}

impl<V> Emitter<V> {
    /// Reports `kind` for what `snapshot` returns (None: it is gone, nothing
    /// to report). `snapshot` runs only if someone can receive it.
    pub(crate) fn emit(&self, kind: EventKind, snapshot: impl FnOnce() -> Option<V>) {
        let mut snapshot = Some(snapshot);
        self.sink.emit(kind, &mut || snapshot.take().and_then(|take| take()));
    }

    /// Whether an event now would reach anyone (see `EventHub::wanted`).
    pub(crate) fn wanted(&self) -> bool {
        self.sink.wanted()
    }
}

/// A hub as one kind of subject sees it.
trait Sink<V>: Send + Sync {
    fn wanted(&self) -> bool;
    fn emit(&self, kind: EventKind, snapshot: &mut dyn FnMut() -> Option<V>);
}

struct Wrapping<S, V> {
    hub: EventHub<S>,
    wrap: fn(V) -> S,
}

impl<S: Send + Sync + 'static, V> Sink<V> for Wrapping<S, V> {
    fn wanted(&self) -> bool {
        self.hub.wanted()
    }

    fn emit(&self, kind: EventKind, snapshot: &mut dyn FnMut() -> Option<V>) {
        self.hub.emit(kind, || snapshot().map(self.wrap))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_emitter_reaches_the_hub_wrapped_in_its_subject() {
        let hub: EventHub<String> = EventHub::new(4);
        let numbers = hub.emitter(|n: u32| format!("number {n}"));
        let mut subscription = hub.subscribe();
        assert!(numbers.wanted());
        numbers.emit(EventKind::Created, || Some(7));
        numbers.emit(EventKind::Deleted, || None);
        let event = subscription.receiver.try_recv().unwrap();
        assert_eq!((event.kind, event.subject.as_str()), (EventKind::Created, "number 7"));
        assert!(subscription.receiver.try_recv().is_err(), "a gone subject is no event");
    }
}
