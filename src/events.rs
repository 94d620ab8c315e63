//! Container and sandbox lifecycle events (what `GetContainerEvents` streams):
//! the hub the managers report state changes to, where they happen, and the
//! subscribers' side. Without a subscriber an emit costs one atomic load: the
//! event (a snapshot of what changed) is not even built. Each subscriber's
//! backlog is bounded by the channel's ring; one that falls behind it is cut
//! off (it then relists), never slowing the runtime or the other subscribers.
//! Events of the start itself (exits found in records while the daemon was
//! down) are kept for the subscribers that connect soon after it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::broadcast;

use crate::clock::now_ns;
use crate::container::manager::ContainerView;
use crate::pod::manager::SandboxView;

/// How many events a subscriber may be behind before it is cut off.
pub const SUBSCRIBER_BACKLOG: usize = 1024;
/// Most start-up events kept for the first subscribers (beyond it, later
/// ones are dropped: those subscribers relist anyway).
const STARTUP_EVENTS: usize = 4096;
/// How long after the daemon starts serving start-up events are kept.
pub const STARTUP_EVENTS_KEPT: Duration = Duration::from_secs(60);

/// What happened (the CRI's `ContainerEventType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Created,
    Started,
    Stopped,
    Deleted,
}

/// What it happened to, as it was right after.
#[derive(Debug, Clone)]
pub enum Subject {
    Container(Box<ContainerView>),
    Sandbox(Box<SandboxView>),
}

impl Subject {
    /// The container's or the sandbox's id.
    pub fn id(&self) -> &str {
        match self {
            Self::Container(view) => &view.record.id,
            Self::Sandbox(view) => &view.record.id,
        }
    }

    /// The pod it belongs to (a sandbox's own id).
    pub fn pod_id(&self) -> &str {
        match self {
            Self::Container(view) => &view.record.sandbox_id,
            Self::Sandbox(view) => &view.record.id,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Event {
    pub kind: EventKind,
    /// When it was seen, in nanoseconds since the epoch.
    pub at_ns: i64,
    pub subject: Subject,
}

/// Where events go. Cheap to clone: every clone feeds the same subscribers.
#[derive(Clone)]
pub struct EventHub {
    inner: Arc<Inner>,
}

struct Inner {
    sender: broadcast::Sender<Arc<Event>>,
    /// While the daemon starts (reads its records), events are also kept in
    /// `startup`, for subscribers that connect within `STARTUP_EVENTS_KEPT`.
    keeping: AtomicBool,
    startup: Mutex<Vec<Arc<Event>>>,
}

/// One subscriber: the start-up events first, then what happens next.
pub struct Subscription {
    pub startup: Vec<Arc<Event>>,
    pub receiver: broadcast::Receiver<Arc<Event>>,
}

impl Default for EventHub {
    fn default() -> Self {
        Self::new(SUBSCRIBER_BACKLOG)
    }
}

impl EventHub {
    pub fn new(backlog: usize) -> Self {
        let (sender, _) = broadcast::channel(backlog.max(1));
        Self { inner: Arc::new(Inner { sender, keeping: AtomicBool::new(true), startup: Mutex::new(Vec::new()) }) }
    }

    /// Reports `kind` for the subject `snapshot` returns (None: it is gone,
    /// nothing to report). `snapshot` runs only if someone can receive it.
    pub fn emit(&self, kind: EventKind, snapshot: impl FnOnce() -> Option<Subject>) {
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
    pub fn wanted(&self) -> bool {
        self.inner.keeping.load(Ordering::Acquire) || self.inner.sender.receiver_count() > 0
    }

    /// A new subscriber: the events of the start (while they are kept), then
    /// whatever happens from now on.
    pub fn subscribe(&self) -> Subscription {
        let startup = self.startup().clone();
        Subscription { startup, receiver: self.inner.sender.subscribe() }
    }

    /// The daemon serves: events from now on are only sent; those of the
    /// start are kept `for_` longer for the first subscribers, then dropped.
    pub fn serving(&self, for_: Duration) {
        self.inner.keeping.store(false, Ordering::Release);
        let hub = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(for_).await;
            hub.startup().clear();
        });
    }

    /// How many subscribers there are now.
    pub fn subscribers(&self) -> usize {
        self.inner.sender.receiver_count()
    }

    fn startup(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Event>>> {
        self.inner.startup.lock().unwrap_or_else(|p| p.into_inner())
    }
}
