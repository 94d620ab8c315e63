//! Calls that change state run to their end even when their caller goes
//! away. tonic drops a handler's future when the caller's deadline passes
//! (`grpc-timeout`, as kubelet and crictl send) or the caller cancels; a
//! lifecycle cut there would leave half of it made: a container's name kept,
//! its directories, cgroup and monitor, with nothing listed. So the work runs
//! in a task of its own, and the handler only waits for it.

use std::future::Future;

use tonic::Status;
use tracing::Instrument;

/// Runs `work` in a task of its own and returns its result, which the
/// caller may no longer be there to hear.
pub(crate) async fn to_the_end<T: Send + 'static>(work: impl Future<Output = T> + Send + 'static) -> Result<T, Status> {
    // The work keeps the call's span (cri::instrument).
    tokio::spawn(work.instrument(tracing::Span::current()))
        .await
        .map_err(|e| Status::internal(format!("the call's work failed: {e}")))
}

/// Runs `work`, which makes something (a pod, a container), in a task of
/// its own. When its caller has gone by the time it is made, `undo` takes it
/// back: a caller that never heard the id must not find the name taken when
/// it tries again, and nothing is left that nobody knows of.
pub(crate) async fn made_or_undone<T, E, W, U, F>(work: W, undo: U) -> Result<Result<T, E>, Status>
where
    T: Send + 'static,
    E: Send + 'static,
    W: Future<Output = Result<T, E>> + Send + 'static,
    U: FnOnce(T) -> F + Send + 'static,
    F: Future<Output = ()> + Send + 'static,
{
    let (answer, heard) = tokio::sync::oneshot::channel();
    tokio::spawn(
        async move {
            if let Err(Ok(made)) = answer.send(work.await) {
                undo(made).await;
            }
        }
        .instrument(tracing::Span::current()),
    );
    heard.await.map_err(|_| Status::internal("the call's work ended without an answer"))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn work_goes_on_when_its_caller_gives_up() {
        let done = Arc::new(AtomicUsize::new(0));
        let counter = done.clone();
        let call = to_the_end(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            counter.fetch_add(1, Ordering::SeqCst);
        });
        assert!(tokio::time::timeout(Duration::from_millis(5), call).await.is_err());
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(done.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn what_a_gone_caller_asked_for_is_undone_and_a_present_one_keeps_it() {
        let undone = Arc::new(AtomicUsize::new(0));
        let make = |undone: Arc<AtomicUsize>| {
            made_or_undone(
                async {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    Ok::<_, ()>(7)
                },
                move |made: usize| async move {
                    undone.fetch_add(made, Ordering::SeqCst);
                },
            )
        };
        assert!(tokio::time::timeout(Duration::from_millis(5), make(undone.clone())).await.is_err());
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(undone.load(Ordering::SeqCst), 7, "made after its caller left: undone");

        assert_eq!(make(undone.clone()).await.unwrap(), Ok(7));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(undone.load(Ordering::SeqCst), 7, "heard by its caller: kept");
    }
}
