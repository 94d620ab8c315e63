//! The undo of a create that fails half-way (a container, a pod, a pod's
//! network, a pull): each step that makes something registers its undo,
//! under a name, right where it is made; a create that fails runs every
//! registered undo in reverse order (`rollback`), one that succeeds disarms
//! them (`commit`). An undo that fails is logged (warn, naming the step and
//! the pod or container) and the next one runs all the same. Undos that
//! must wait (a process's end, a network plugin's DEL) are futures, run in
//! turn by `rollback`.
//!
//! Dropped armed (the future of its create dropped: the daemon's runtime
//! ending, or a panic), the stack runs its synchronous undos from the newest
//! down to the newest asynchronous one and stops there, warning about the
//! steps it leaves: what is left is what a daemon killed at that step would
//! leave, which the next start undoes from the records (an async undo cannot
//! be awaited in `drop`, and running the older synchronous ones past it would
//! remove the record that the next start needs to find what it made).
//!
//! A leaf: it knows nothing of what it undoes.

use std::fmt::Display;
use std::future::Future;
use std::sync::{Mutex, MutexGuard};

use futures_util::future::BoxFuture;
use futures_util::FutureExt;

type Now<'a> = Box<dyn FnOnce() -> Result<(), String> + Send + 'a>;
type Later<'a> = Box<dyn FnOnce() -> BoxFuture<'a, Result<(), String>> + Send + 'a>;

enum Action<'a> {
    /// Runs where it is called.
    Now(Now<'a>),
    /// A future, awaited by `rollback`.
    Later(Later<'a>),
}

struct Step<'a> {
    name: &'static str,
    action: Action<'a>,
}

/// An undo that failed during a rollback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failed {
    pub(crate) step: &'static str,
    pub(crate) error: String,
}

/// The undos registered by one create, newest last. `'a`: what they borrow
/// (the manager that made the things they undo).
pub(crate) struct Undo<'a> {
    /// The call, for the log (`CreateContainer`, `RunPodSandbox`, …).
    call: &'static str,
    pod_id: Option<String>,
    container_id: Option<String>,
    image: Option<String>,
    /// Behind a lock so that steps made side by side (joined futures)
    /// register through a shared reference, in the order they are made.
    steps: Mutex<Vec<Step<'a>>>,
}

impl<'a> Undo<'a> {
    /// An empty stack for `call`.
    pub(crate) fn new(call: &'static str) -> Self {
        Self { call, pod_id: None, container_id: None, image: None, steps: Mutex::default() }
    }

    /// Names the pod in the log lines.
    pub(crate) fn pod(mut self, id: &str) -> Self {
        self.pod_id = Some(id.to_string());
        self
    }

    /// Names the container in the log lines.
    pub(crate) fn container(mut self, id: &str) -> Self {
        self.container_id = Some(id.to_string());
        self
    }

    /// Names the image in the log lines.
    pub(crate) fn image(mut self, reference: &str) -> Self {
        self.image = Some(reference.to_string());
        self
    }

    fn steps(&self) -> MutexGuard<'_, Vec<Step<'a>>> {
        self.steps.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers the undo of `step`, just made: `undo` runs if the create fails.
    pub(crate) fn push<E: Display>(&self, step: &'static str, undo: impl FnOnce() -> Result<(), E> + Send + 'a) {
        let action = Action::Now(Box::new(move || undo().map_err(|e| e.to_string())));
        self.steps().push(Step { name: step, action });
    }

    /// Registers an undo that must wait (a process's end, a plugin run):
    /// `undo()` is awaited if the create fails.
    pub(crate) fn push_async<E, F>(&self, step: &'static str, undo: impl FnOnce() -> F + Send + 'a)
    where
        E: Display,
        F: Future<Output = Result<(), E>> + Send + 'a,
    {
        let action = Action::Later(Box::new(move || undo().map(|r| r.map_err(|e| e.to_string())).boxed()));
        self.steps().push(Step { name: step, action });
    }

    /// The names of the steps registered so far, oldest first.
    #[cfg(test)]
    pub(crate) fn step_names(&self) -> Vec<&'static str> {
        self.steps().iter().map(|s| s.name).collect()
    }

    /// The create succeeded: nothing is undone.
    pub(crate) fn commit(self) {
        self.steps().clear();
    }

    /// The create failed: runs every undo, newest first, each once; one
    /// that fails is logged and the others still run. Returns those that failed.
    pub(crate) async fn rollback(self) -> Vec<Failed> {
        let steps = std::mem::take(&mut *self.steps());
        tracing::debug!(
            call = self.call,
            pod_id = self.pod_id.as_deref(),
            container_id = self.container_id.as_deref(),
            image = self.image.as_deref(),
            steps = steps.len(),
            "undoing"
        );
        let mut failed = Vec::new();
        for Step { name, action } in steps.into_iter().rev() {
            let outcome = match action {
                Action::Now(undo) => undo(),
                Action::Later(undo) => undo().await,
            };
            self.report(name, outcome, &mut failed);
        }
        failed
    }

    fn report(&self, step: &'static str, outcome: Result<(), String>, failed: &mut Vec<Failed>) {
        let (pod_id, container_id, image) =
            (self.pod_id.as_deref(), self.container_id.as_deref(), self.image.as_deref());
        match outcome {
            Ok(()) => tracing::debug!(call = self.call, step, pod_id, container_id, image, "undone"),
            Err(error) => {
                tracing::warn!(call = self.call, step, pod_id, container_id, image, error = %error,
                    "an undo failed; the others still run");
                failed.push(Failed { step, error });
            }
        }
    }
}

impl Drop for Undo<'_> {
    /// Armed (neither committed nor rolled back): the synchronous undos down
    /// to the newest asynchronous one, the rest left for the next start (see
    /// the module's doc).
    fn drop(&mut self) {
        let mut steps = std::mem::take(&mut *self.steps());
        if steps.is_empty() {
            return;
        }
        let mut failed = Vec::new();
        while matches!(steps.last(), Some(Step { action: Action::Now(_), .. })) {
            if let Some(Step { name, action: Action::Now(undo) }) = steps.pop() {
                self.report(name, undo(), &mut failed);
            }
        }
        if !steps.is_empty() {
            let left: Vec<&str> = steps.iter().map(|s| s.name).collect();
            tracing::warn!(
                call = self.call,
                pod_id = self.pod_id.as_deref(),
                container_id = self.container_id.as_deref(),
                image = self.image.as_deref(),
                ?left,
                "a create ended half-way without its undo; what these steps made is left for the next start"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use super::*;

    type Log = Arc<Mutex<Vec<String>>>;

    fn note(log: &Log, what: &str) {
        log.lock().unwrap().push(what.to_string());
    }

    fn noted(log: &Log) -> Vec<String> {
        log.lock().unwrap().clone()
    }

    /// A sync undo that notes its name.
    fn sync_step(undo: &Undo<'_>, log: &Log, name: &'static str) {
        let log = log.clone();
        undo.push(name, move || {
            note(&log, name);
            Ok::<_, String>(())
        });
    }

    /// An async undo that yields to the runtime before it notes its name.
    fn async_step(undo: &Undo<'_>, log: &Log, name: &'static str) {
        let log = log.clone();
        undo.push_async(name, move || async move {
            tokio::time::sleep(Duration::from_millis(5)).await;
            note(&log, name);
            Ok::<_, String>(())
        });
    }

    #[tokio::test]
    async fn a_rollback_runs_every_undo_newest_first() {
        let log = Log::default();
        let undo = Undo::new("test").container("c1");
        sync_step(&undo, &log, "directory");
        async_step(&undo, &log, "monitor");
        sync_step(&undo, &log, "record");
        async_step(&undo, &log, "network");
        assert_eq!(undo.step_names(), ["directory", "monitor", "record", "network"]);
        assert_eq!(undo.rollback().await, Vec::new());
        assert_eq!(noted(&log), ["network", "record", "monitor", "directory"]);
    }

    #[tokio::test]
    async fn a_commit_undoes_nothing_now_or_when_dropped() {
        let log = Log::default();
        let undo = Undo::new("test");
        sync_step(&undo, &log, "directory");
        async_step(&undo, &log, "monitor");
        undo.commit();
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(noted(&log), Vec::<String>::new());
    }

    #[tokio::test]
    async fn an_undo_that_fails_is_reported_and_the_others_still_run() {
        let log = Log::default();
        let undo = Undo::new("test").pod("p1");
        sync_step(&undo, &log, "first");
        undo.push("sync failure", || Err("disk gone"));
        async_step(&undo, &log, "middle");
        undo.push_async("async failure", || async { Err(std::io::Error::other("plugin failed")) });
        sync_step(&undo, &log, "last");
        let failed = undo.rollback().await;
        assert_eq!(noted(&log), ["last", "middle", "first"]);
        assert_eq!(
            failed,
            [
                Failed { step: "async failure", error: "plugin failed".into() },
                Failed { step: "sync failure", error: "disk gone".into() },
            ]
        );
    }

    #[tokio::test]
    async fn undos_registered_side_by_side_keep_the_order_they_were_made_in() {
        let log = Log::default();
        let undo = Undo::new("test");
        let first = async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            sync_step(&undo, &log, "later");
        };
        let second = async { sync_step(&undo, &log, "sooner") };
        tokio::join!(first, second);
        undo.rollback().await;
        assert_eq!(noted(&log), ["later", "sooner"]);
    }

    #[tokio::test]
    async fn undos_may_borrow_what_outlives_the_stack() {
        let made = Mutex::new(vec!["a", "b"]);
        {
            let undo = Undo::new("test");
            undo.push("a", || {
                made.lock().unwrap().retain(|m| *m != "a");
                Ok::<_, String>(())
            });
            undo.push_async("b", || async {
                made.lock().unwrap().retain(|m| *m != "b");
                Ok::<_, String>(())
            });
            undo.rollback().await;
        }
        assert!(made.lock().unwrap().is_empty());
    }

    #[test]
    fn dropped_armed_it_undoes_down_to_the_newest_async_step_and_leaves_the_rest() {
        let log = Log::default();
        {
            let undo = Undo::new("test");
            sync_step(&undo, &log, "record");
            async_step(&undo, &log, "monitor");
            sync_step(&undo, &log, "plan");
            sync_step(&undo, &log, "spec");
        }
        assert_eq!(noted(&log), ["spec", "plan"], "the record stays for the next start");
        let log = Log::default();
        {
            let undo = Undo::new("test");
            sync_step(&undo, &log, "name");
            sync_step(&undo, &log, "directory");
        }
        assert_eq!(noted(&log), ["directory", "name"], "no async step: everything is undone");
    }

    /// The log lines a rollback writes, as the daemon's subscriber formats them.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn a_failed_undo_is_logged_with_its_step_and_the_ids() {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_max_level(tracing::Level::WARN)
            .with_ansi(false)
            .finish();
        let _default = tracing::subscriber::set_default(subscriber);
        let undo = Undo::new("CreateContainer").pod("p1").container("c1");
        undo.push("container cgroup", || Err("busy"));
        undo.push("directory", || Ok::<_, String>(()));
        undo.rollback().await;
        let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1, "one warning, for the undo that failed: {text}");
        for part in ["WARN", "step=\"container cgroup\"", "pod_id=\"p1\"", "container_id=\"c1\"", "error=busy"] {
            assert!(lines[0].contains(part), "{part} in {text}");
        }
    }
}
