//! GetContainerEvents through the socket: every subscriber sees each
//! container's and the pod's created, started, stopped and deleted, in
//! order, with the pod's status and its containers' statuses; a subscriber
//! that never reads is cut off while the others and the runtime go on; an
//! exit that happened while the daemon was down is sent once after it
//! starts, and nothing is invented for containers that did not change.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::client::container_config;
use common::{Cri, TestEnv, Up};
use nidus::api::*;
use tonic::Streaming;

use ContainerEventType::*;

async fn subscribe(cri: &Cri) -> Streaming<ContainerEventResponse> {
    cri.runtime.clone().get_container_events(GetEventsRequest {}).await.expect("GetContainerEvents").into_inner()
}

/// The next event within `secs`, None if none comes.
async fn next(stream: &mut Streaming<ContainerEventResponse>, secs: u64) -> Option<ContainerEventResponse> {
    match tokio::time::timeout(Duration::from_secs(secs), stream.message()).await {
        Ok(Ok(Some(event))) => Some(event),
        Ok(Ok(None)) => panic!("the events stream ended"),
        Ok(Err(status)) => panic!("the events stream failed: {status:?}"),
        Err(_) => None,
    }
}

/// Events until `done` holds for the list so far (at most `secs` between two).
async fn collect(
    stream: &mut Streaming<ContainerEventResponse>,
    done: impl Fn(&[ContainerEventResponse]) -> bool,
) -> Vec<ContainerEventResponse> {
    let mut events = Vec::new();
    while !done(&events) {
        match next(stream, 20).await {
            Some(event) => events.push(event),
            None => panic!("no event for 20 s after {} events", events.len()),
        }
    }
    events
}

/// Whether a pod's own DELETED event is among `events`.
fn a_pod_deleted(events: &[ContainerEventResponse]) -> bool {
    events.iter().any(|e| {
        e.container_event_type() == ContainerDeletedEvent
            && e.pod_sandbox_status.as_ref().is_some_and(|p| p.id == e.container_id)
    })
}

/// Each id's event types, in the order they came.
fn by_id(events: &[ContainerEventResponse]) -> HashMap<String, Vec<ContainerEventType>> {
    let mut map: HashMap<String, Vec<ContainerEventType>> = HashMap::new();
    for event in events {
        map.entry(event.container_id.clone()).or_default().push(event.container_event_type());
    }
    map
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_subscribers_see_every_change_of_100_containers_in_order() {
    let mut env = TestEnv::new("events");
    let mut cri = env.start().await;
    let image = env.import_busybox(&mut cri).await;
    // Each subscriber reads as the events come (an unread one is cut off).
    let readers: Vec<_> = [subscribe(&cri).await, subscribe(&cri).await]
        .into_iter()
        .map(|mut stream| tokio::spawn(async move { collect(&mut stream, a_pod_deleted).await }))
        .collect();
    let pod = env.pod("watched");
    let pod_uid = pod.metadata.as_ref().unwrap().uid.clone();
    let started = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as i64;
    let pod_id = cri.run_pod(pod.clone()).await.unwrap();
    const CONTAINERS: usize = 100;
    let mut ids = Vec::new();
    for i in 0..CONTAINERS {
        // Half end on their own (the monitor reports the exit), half are stopped.
        let command: &[&str] = if i % 2 == 0 { &["true"] } else { &["sleep", "1000"] };
        let id = cri.run_container(&pod_id, &pod, container_config(&format!("c{i}"), &image, command)).await;
        if i % 2 == 0 {
            cri.wait_exited(&id, 10).await;
        } else {
            cri.stop_container(&id, 0).await.unwrap();
        }
        cri.remove_container(&id).await.unwrap();
        ids.push(id);
    }
    cri.stop_pod(&pod_id).await.unwrap();
    cri.remove_pod(&pod_id).await.unwrap();

    for reader in readers {
        let seen = &reader.await.unwrap();
        let order = by_id(seen);
        let lifecycle =
            vec![ContainerCreatedEvent, ContainerStartedEvent, ContainerStoppedEvent, ContainerDeletedEvent];
        assert_eq!(order.get(&pod_id), Some(&lifecycle), "the pod's own events");
        for id in &ids {
            assert_eq!(order.get(id), Some(&lifecycle), "container {id}");
        }
        assert_eq!(order.len(), CONTAINERS + 1, "nothing else happened");
        let mut last = started;
        for event in seen.iter() {
            assert!(event.created_at >= last, "created_at in nanoseconds, in order: {} after {last}", event.created_at);
            last = event.created_at;
            let status = event.pod_sandbox_status.as_ref().expect("the pod's status");
            assert_eq!(status.id, pod_id);
            assert_eq!(status.metadata.as_ref().unwrap().uid, pod_uid, "kubelet finds the pod by its metadata");
        }
        // The container's own status, as it was when it changed.
        for event in seen.iter().filter(|e| e.container_id != pod_id) {
            let own = event.containers_statuses.iter().find(|s| s.id == event.container_id);
            let state = own.map(|s| s.state());
            match event.container_event_type() {
                ContainerCreatedEvent => assert_eq!(state, Some(ContainerState::ContainerCreated)),
                // `true` may have ended already: the status is the latest.
                ContainerStartedEvent => assert!(
                    matches!(state, Some(ContainerState::ContainerRunning | ContainerState::ContainerExited)),
                    "{state:?}"
                ),
                ContainerStoppedEvent => assert_eq!(state, Some(ContainerState::ContainerExited)),
                ContainerDeletedEvent => assert_eq!(state, None, "a deleted container has no status"),
            }
        }
    }
    env.assert_no_leftovers();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_never_reads_is_cut_off_and_nobody_waits_for_it() {
    let mut env = TestEnv::new("eventslow");
    let mut cri = env.start().await;
    let image = env.import_busybox(&mut cri).await;
    let mut stalled = subscribe(&cri).await;
    let mut reader = subscribe(&cri).await;
    // The reader reads until the container made last has started.
    let last_started = |events: &[ContainerEventResponse]| {
        events.iter().any(|e| {
            e.container_event_type() == ContainerStartedEvent
                && e.containers_statuses
                    .iter()
                    .any(|s| s.id == e.container_id && s.metadata.as_ref().is_some_and(|m| m.name == "after"))
        })
    };
    let reader = tokio::spawn(async move { collect(&mut reader, last_started).await });
    let pod = env.pod("busy");
    let pod_id = cri.run_pod(pod.clone()).await.unwrap();
    // Each event carries the statuses of the pod's containers: 40 stay, so
    // each is tens of KiB, and the client's HTTP/2 window fills soon.
    for i in 0..40 {
        cri.run_container(&pod_id, &pod, container_config(&format!("k{i}"), &image, &["sleep", "1000"])).await;
    }
    let mut burst = Vec::new();
    let started = tokio::time::Instant::now();
    while !env.daemon_log().contains("an events subscriber is cut off") {
        assert!(burst.len() < 2000, "2,000 containers made and removed, and the stalled subscriber is still served");
        for _ in 0..50 {
            let name = format!("b{}", burst.len());
            let id = cri.create_container(&pod_id, &pod, container_config(&name, &image, &["true"])).await.unwrap();
            cri.remove_container(&id).await.unwrap();
            burst.push(id);
        }
    }
    let took = started.elapsed();
    // The runtime still answers at once, and the reader saw all of it.
    let id = cri.run_container(&pod_id, &pod, container_config("after", &image, &["sleep", "1000"])).await;
    assert_eq!(cri.status_of(&id).await.state(), ContainerState::ContainerRunning);
    let seen = by_id(&reader.await.unwrap());
    for id in &burst {
        assert_eq!(seen.get(id), Some(&vec![ContainerCreatedEvent, ContainerStoppedEvent, ContainerDeletedEvent]));
    }
    // The stalled one gets what was queued for it, then RESOURCE_EXHAUSTED.
    let mut got = 0;
    let status = loop {
        match tokio::time::timeout(Duration::from_secs(10), stalled.message()).await {
            Ok(Ok(Some(_))) => got += 1,
            Ok(Ok(None)) => panic!("the stalled stream ended without a status after {got} events"),
            Ok(Err(status)) => break status,
            Err(_) => panic!("the stalled stream was never cut off ({got} events read)"),
        }
    };
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("relist"), "{status:?}");
    let total: usize = seen.values().map(Vec::len).sum();
    assert!(got < total, "it was cut off before the end ({got} of {total} events)");
    eprintln!(
        "{} creates and removes took {took:?} beside a stalled subscriber, cut off after {got} events",
        burst.len()
    );
    cri.stop_pod(&pod_id).await.unwrap();
    cri.remove_pod(&pod_id).await.unwrap();
    env.assert_no_leftovers();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exit_while_the_daemon_was_down_is_sent_once_after_it_starts() {
    let Up { mut env, mut cri, image, pod, pod_id } = TestEnv::new("eventsdown").up("down").await;
    let dies = cri.run_container(&pod_id, &pod, container_config("dies", &image, &["sleep", "1000"])).await;
    let lives = cri.run_container(&pod_id, &pod, container_config("lives", &image, &["sleep", "1000"])).await;
    let pid = cri.container_pid(&dies).await;
    env.kill_daemon();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).unwrap();
    assert!(common::host::wait_gone(pid));

    let cri = env.start().await;
    let mut events = subscribe(&cri).await;
    let event = next(&mut events, 10).await.expect("the exit found at start");
    assert_eq!((event.container_id.as_str(), event.container_event_type()), (dies.as_str(), ContainerStoppedEvent));
    let own = event.containers_statuses.iter().find(|s| s.id == dies).expect("its status");
    assert_eq!(own.state(), ContainerState::ContainerExited);
    assert_eq!(own.exit_code, 137, "{own:?}");
    assert!(next(&mut events, 2).await.is_none(), "nothing for {lives}, which did not change");
    // A second subscriber soon after gets it too; a later start does not send it again.
    let mut late = subscribe(&cri).await;
    assert_eq!(next(&mut late, 10).await.map(|e| e.container_id), Some(dies.clone()));
    drop((events, late));
    env.terminate_daemon();
    let mut cri = env.start().await;
    let mut again = subscribe(&cri).await;
    assert!(next(&mut again, 2).await.is_none(), "the exit was recorded: no second event");
    cri.stop_pod(&pod_id).await.unwrap();
    cri.remove_pod(&pod_id).await.unwrap();
    env.assert_no_leftovers();
}
