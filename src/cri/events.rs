//! GetContainerEvents: one subscriber's stream. A task of its own turns the
//! hub's events into `ContainerEventResponse`s (the pod's status and its
//! containers' statuses read as the event is sent, the changed one as it was
//! right after the change) and queues them for the client. A subscriber that
//! falls `SUBSCRIBER_BACKLOG` events behind the hub, or lets `QUEUE`
//! responses pile up unread, is cut off: its stream ends with
//! RESOURCE_EXHAUSTED, and kubelet relists.

use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

use crate::api::{ContainerEventResponse, ContainerEventType};
use crate::container::ContainerView;
use crate::cri::Daemon;
use crate::events::{EventKind, SUBSCRIBER_BACKLOG};
use crate::pod::SandboxView;

use super::convert;
use super::runtime_service::StreamOf;

/// What an event happened to, as it was right after: a container or a
/// sandbox (the managers' views, wrapped as each reports to the daemon's hub).
#[derive(Debug, Clone)]
pub(crate) enum Subject {
    Container(Box<ContainerView>),
    Sandbox(Box<SandboxView>),
}

impl Subject {
    /// The containers' emitter's wrap.
    pub(crate) fn container(view: ContainerView) -> Self {
        Self::Container(Box::new(view))
    }

    /// The sandboxes' emitter's wrap.
    pub(crate) fn sandbox(view: SandboxView) -> Self {
        Self::Sandbox(Box::new(view))
    }

    /// The container's or the sandbox's id.
    pub(crate) fn id(&self) -> &str {
        match self {
            Self::Container(view) => &view.record.id,
            Self::Sandbox(view) => &view.record.id,
        }
    }

    /// The pod it belongs to (a sandbox's own id).
    pub(crate) fn pod_id(&self) -> &str {
        match self {
            Self::Container(view) => &view.record.sandbox_id,
            Self::Sandbox(view) => &view.record.id,
        }
    }
}

type Event = crate::events::Event<Subject>;

/// Responses converted but not yet taken by the client.
const QUEUE: usize = 256;

/// A new subscriber's stream of events.
pub(crate) fn stream(daemon: Arc<Daemon>) -> StreamOf<ContainerEventResponse> {
    let subscription = daemon.events.subscribe();
    let (sender, receiver) = mpsc::channel(QUEUE);
    let cut_off: Arc<Mutex<Option<Status>>> = Arc::default();
    let why = cut_off.clone();
    tokio::spawn(async move {
        let mut hub = subscription.receiver;
        for event in &subscription.startup {
            if let Err(status) = queue(&sender, &daemon, event) {
                return end(&why, status);
            }
        }
        loop {
            let event = tokio::select! {
                // The client went away: let go of the hub at once.
                _ = sender.closed() => return,
                event = hub.recv() => event,
            };
            match event {
                Ok(event) => {
                    if let Err(status) = queue(&sender, &daemon, &event) {
                        return end(&why, status);
                    }
                }
                Err(RecvError::Lagged(missed)) => {
                    return end(
                        &why,
                        Status::resource_exhausted(format!(
                            "this subscriber fell more than {SUBSCRIBER_BACKLOG} events behind ({missed} missed); \
                             relist and subscribe again"
                        )),
                    )
                }
                Err(RecvError::Closed) => return,
            }
        }
    });
    let ending = futures_util::stream::once(async move { cut_off.lock().unwrap_or_else(|p| p.into_inner()).take() })
        .filter_map(|status| async move { status.map(Err) });
    Box::pin(ReceiverStream::new(receiver).chain(ending))
}

fn end(why: &Mutex<Option<Status>>, status: Status) {
    tracing::warn!(reason = %status.message(), "an events subscriber is cut off");
    *why.lock().unwrap_or_else(|p| p.into_inner()) = Some(status);
}

/// Queues `event` for the client; Err when the client lets its queue fill.
fn queue(
    sender: &mpsc::Sender<Result<ContainerEventResponse, Status>>,
    daemon: &Daemon,
    event: &Event,
) -> Result<(), Status> {
    match sender.try_send(Ok(response(daemon, event))) {
        Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => Ok(()),
        Err(mpsc::error::TrySendError::Full(_)) => Err(Status::resource_exhausted(format!(
            "this subscriber left {QUEUE} events unread; relist and subscribe again"
        ))),
    }
}

/// The CRI's message for `event`: the pod's status and every container of
/// the pod as they are now, except the one that changed, as it was then.
pub(crate) fn response(daemon: &Daemon, event: &Event) -> ContainerEventResponse {
    let pod_id = event.subject.pod_id();
    let pod_sandbox_status = match &event.subject {
        Subject::Sandbox(view) => Some(convert::pod_sandbox_status(view)),
        Subject::Container(_) => daemon.sandboxes.get(pod_id).ok().map(|view| convert::pod_sandbox_status(&view)),
    };
    let changed = match &event.subject {
        Subject::Container(view) if event.kind != EventKind::Deleted => Some(view.as_ref()),
        _ => None,
    };
    let mut containers_statuses: Vec<_> = daemon
        .containers
        .of_sandbox(pod_id)
        .iter()
        .filter(|view| view.record.id != event.subject.id())
        .map(convert::container_status)
        .collect();
    if let Some(view) = changed {
        containers_statuses.push(convert::container_status(view));
    }
    ContainerEventResponse {
        container_id: event.subject.id().to_string(),
        container_event_type: event_type(event.kind) as i32,
        created_at: event.at_ns,
        pod_sandbox_status,
        containers_statuses,
    }
}

fn event_type(kind: EventKind) -> ContainerEventType {
    match kind {
        EventKind::Created => ContainerEventType::ContainerCreatedEvent,
        EventKind::Started => ContainerEventType::ContainerStartedEvent,
        EventKind::Stopped => ContainerEventType::ContainerStoppedEvent,
        EventKind::Deleted => ContainerEventType::ContainerDeletedEvent,
    }
}
