//! systemd as the cgroup manager (the systemd cgroup driver): whether the
//! node's PID 1 is systemd and answers, and its D-Bus API for transient
//! scopes: start one around a process (`StartTransientUnit`, waiting for
//! its job), change its properties, stop it, list those nidus left.
//!
//! nidus talks to systemd over the system bus, as runc, containerd and
//! kubelet do. (systemd's private socket, which needs no bus daemon, is not
//! used: its replies carry a sender that is not a unique bus name, which
//! zbus refuses.) A job's end comes as the manager's `JobRemoved` signal,
//! matched on the bus; one reader per connection hands each to the caller
//! waiting for that job. A call that finds its connection gone (the bus
//! daemon restarted) connects again once.

pub(crate) mod properties;
pub(crate) mod slice;

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::oneshot;
use zbus::zvariant::{OwnedObjectPath, OwnedValue, Value};

/// The system bus.
pub(crate) const SYSTEM_BUS: &str = "/run/dbus/system_bus_socket";

const DESTINATION: &str = "org.freedesktop.systemd1";
const MANAGER_PATH: &str = "/org/freedesktop/systemd1";
const MANAGER: &str = "org.freedesktop.systemd1.Manager";

/// How long a call or a job may take before nidus gives up on it (systemd
/// answers in milliseconds; a hung PID 1 must not hang a request).
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Job results remembered for a waiter that asks after the signal came.
const FINISHED_KEPT: usize = 1024;

#[derive(Debug, thiserror::Error)]
pub(crate) enum SystemdError {
    #[error("cannot reach systemd on the system bus {SYSTEM_BUS}: {0}")]
    Connect(String),
    #[error("systemd refused {what}: {message}")]
    Call { what: String, message: String },
    #[error("systemd's job for {unit} ended with {result:?}")]
    Job { unit: String, result: String },
    #[error("systemd did not finish {what} within {CALL_TIMEOUT:?}")]
    Timeout { what: String },
}

impl SystemdError {
    /// True when the unit named is not loaded (gone already).
    pub(crate) fn is_no_such_unit(&self) -> bool {
        matches!(self, Self::Call { message, .. } if message.contains("NoSuchUnit") || message.contains("not loaded"))
    }
}

/// True when PID 1 is systemd (it made /run/systemd/system, as
/// `sd_booted()` checks).
pub(crate) fn booted() -> bool {
    Path::new("/run/systemd/system").is_dir()
}

/// A transient scope to start around a process.
pub(crate) struct Scope<'a> {
    /// `nidus-<id>.scope`.
    pub(crate) unit: &'a str,
    /// The slice it goes in, e.g. `kubepods-burstable-pod1.slice`.
    pub(crate) slice: &'a str,
    pub(crate) description: String,
    pub(crate) pid: u32,
    /// Its resource properties (see `properties`).
    pub(crate) properties: Vec<(String, OwnedValue)>,
}

/// Jobs being waited for, and those that ended before anyone asked.
#[derive(Default)]
struct Jobs {
    waiting: HashMap<String, oneshot::Sender<String>>,
    finished: VecDeque<(String, String)>,
}

/// One connection and its signal reader.
struct Link {
    connection: zbus::Connection,
    jobs: Arc<Mutex<Jobs>>,
    reader: tokio::task::JoinHandle<()>,
}

impl Drop for Link {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// The systemd manager, reached over the system bus.
pub(crate) struct Systemd {
    link: tokio::sync::Mutex<Option<Arc<Link>>>,
    /// systemd's version, as it reports it (e.g. `252.30-1~deb12u2`).
    pub(crate) version: String,
}

impl Systemd {
    /// Connects and asks systemd's version: an error says why systemd cannot
    /// be the cgroup manager here.
    pub(crate) async fn connect() -> Result<Self, SystemdError> {
        let link = tokio::time::timeout(CALL_TIMEOUT, Link::open())
            .await
            .map_err(|_| SystemdError::Connect("no answer".into()))??;
        let version = link.manager_property("Version").await?;
        let version = String::try_from(version).unwrap_or_default();
        Ok(Self { link: tokio::sync::Mutex::new(Some(Arc::new(link))), version })
    }

    /// The open connection, opened again when systemd closed it.
    async fn link(&self) -> Result<Arc<Link>, SystemdError> {
        let mut guard = self.link.lock().await;
        if let Some(link) = guard.as_ref().filter(|l| !l.reader.is_finished()) {
            return Ok(link.clone());
        }
        let link = Arc::new(Link::open().await?);
        *guard = Some(link.clone());
        Ok(link)
    }

    /// Starts transient scope `scope` around its process with
    /// `Delegate=yes` and waits until systemd has moved the process in.
    pub(crate) async fn start_scope(&self, scope: Scope<'_>) -> Result<(), SystemdError> {
        let what = format!("starting {}", scope.unit);
        let mut props: Vec<(&str, Value<'_>)> = vec![
            ("Description", Value::from(scope.description.as_str())),
            ("Slice", Value::from(scope.slice)),
            ("Delegate", Value::from(true)),
            ("PIDs", Value::from(vec![scope.pid])),
            // No ordering against shutdown and the like: a container's
            // scope stops when nidus stops it or its processes end.
            ("DefaultDependencies", Value::from(false)),
            // Unloaded once it ends, also when it failed: nothing left behind.
            ("CollectMode", Value::from("inactive-or-failed")),
        ];
        props.extend(scope.properties.iter().map(|(n, v)| (n.as_str(), Value::from(v.clone()))));
        let aux: Vec<(&str, Vec<(&str, Value<'_>)>)> = Vec::new();
        let link = self.link().await?;
        link.run_job(&what, scope.unit, "StartTransientUnit", &(scope.unit, "fail", props, aux)).await
    }

    /// Sets `properties` on loaded unit `unit` (for this boot).
    pub(crate) async fn set_properties(
        &self,
        unit: &str,
        properties: &[(String, OwnedValue)],
    ) -> Result<(), SystemdError> {
        let props: Vec<(&str, Value<'_>)> =
            properties.iter().map(|(n, v)| (n.as_str(), Value::from(v.clone()))).collect();
        let link = self.link().await?;
        link.call(&format!("setting the properties of {unit}"), "SetUnitProperties", &(unit, true, props)).await?;
        Ok(())
    }

    /// Stops `unit` and waits for it; a unit not loaded is stopped already.
    pub(crate) async fn stop(&self, unit: &str) -> Result<(), SystemdError> {
        let link = self.link().await?;
        match link.run_job(&format!("stopping {unit}"), unit, "StopUnit", &(unit, "replace")).await {
            Err(e) if e.is_no_such_unit() => Ok(()),
            other => other,
        }
    }

    /// Sends `signal` to every process of `unit`.
    pub(crate) async fn kill(&self, unit: &str, signal: i32) -> Result<(), SystemdError> {
        let link = self.link().await?;
        link.call(&format!("killing {unit}"), "KillUnit", &(unit, "all", signal)).await?;
        Ok(())
    }

    /// The names of the loaded units matching `pattern` (e.g. `nidus-*.scope`).
    pub(crate) async fn units(&self, pattern: &str) -> Result<Vec<String>, SystemdError> {
        type Unit = (String, String, String, String, String, String, OwnedObjectPath, u32, String, OwnedObjectPath);
        let link = self.link().await?;
        let states: Vec<&str> = Vec::new();
        let reply = link.call("listing units", "ListUnitsByPatterns", &(states, vec![pattern])).await?;
        let units: Vec<Unit> = reply
            .body()
            .deserialize()
            .map_err(|e| SystemdError::Call { what: "listing units".into(), message: e.to_string() })?;
        Ok(units.into_iter().map(|u| u.0).collect())
    }
}

impl Link {
    async fn open() -> Result<Self, SystemdError> {
        let connect = |e: zbus::Error| SystemdError::Connect(e.to_string());
        let stream =
            tokio::net::UnixStream::connect(SYSTEM_BUS).await.map_err(|e| SystemdError::Connect(e.to_string()))?;
        let connection = zbus::connection::Builder::unix_stream(stream)
            .max_queued(4096)
            .method_timeout(CALL_TIMEOUT)
            .build()
            .await
            .map_err(connect)?;
        let jobs = Arc::new(Mutex::new(Jobs::default()));
        // Matched and read before subscribing: no JobRemoved is missed.
        let rule = zbus::MatchRule::builder()
            .msg_type(zbus::message::Type::Signal)
            .path(MANAGER_PATH)
            .map_err(connect)?
            .interface(MANAGER)
            .map_err(connect)?
            .member("JobRemoved")
            .map_err(connect)?
            .build();
        let messages = zbus::MessageStream::for_match_rule(rule, &connection, Some(4096)).await.map_err(connect)?;
        let reader = tokio::spawn(read_job_ends(messages, jobs.clone()));
        let link = Self { connection, jobs, reader };
        link.call("subscribing to job signals", "Subscribe", &()).await?;
        Ok(link)
    }

    async fn call<B>(&self, what: &str, method: &str, body: &B) -> Result<zbus::Message, SystemdError>
    where
        B: serde::Serialize + zbus::zvariant::DynamicType,
    {
        let call = self.connection.call_method(Some(DESTINATION), MANAGER_PATH, Some(MANAGER), method, body);
        match tokio::time::timeout(CALL_TIMEOUT, call).await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(e)) => Err(SystemdError::Call { what: what.to_string(), message: e.to_string() }),
            Err(_) => Err(SystemdError::Timeout { what: what.to_string() }),
        }
    }

    async fn manager_property(&self, name: &str) -> Result<OwnedValue, SystemdError> {
        let what = format!("reading its {name}");
        let body = (MANAGER, name);
        let call = self.connection.call_method(
            Some(DESTINATION),
            MANAGER_PATH,
            Some("org.freedesktop.DBus.Properties"),
            "Get",
            &body,
        );
        let reply = tokio::time::timeout(CALL_TIMEOUT, call)
            .await
            .map_err(|_| SystemdError::Timeout { what: what.clone() })?
            .map_err(|e| SystemdError::Call { what: what.clone(), message: e.to_string() })?;
        reply.body().deserialize::<OwnedValue>().map_err(|e| SystemdError::Call { what, message: e.to_string() })
    }

    /// Calls `method` (which queues a job and returns its path) and waits
    /// for that job's end: `done` is success.
    async fn run_job<B>(&self, what: &str, unit: &str, method: &str, body: &B) -> Result<(), SystemdError>
    where
        B: serde::Serialize + zbus::zvariant::DynamicType,
    {
        let reply = self.call(what, method, body).await?;
        let job: OwnedObjectPath = reply
            .body()
            .deserialize()
            .map_err(|e| SystemdError::Call { what: what.to_string(), message: e.to_string() })?;
        let result = self.job_result(job.as_str());
        let result = match tokio::time::timeout(CALL_TIMEOUT, result).await {
            Ok(Some(result)) => result,
            // The reader ended: systemd closed the connection mid-job.
            Ok(None) => return Err(SystemdError::Job { unit: unit.to_string(), result: "connection closed".into() }),
            Err(_) => {
                lock(&self.jobs).waiting.remove(job.as_str());
                return Err(SystemdError::Timeout { what: what.to_string() });
            }
        };
        match result.as_str() {
            "done" => Ok(()),
            _ => Err(SystemdError::Job { unit: unit.to_string(), result }),
        }
    }

    /// The result of job `path`: remembered already, or once its signal comes.
    async fn job_result(&self, path: &str) -> Option<String> {
        let receiver = {
            let mut jobs = lock(&self.jobs);
            if let Some(at) = jobs.finished.iter().position(|(p, _)| p == path) {
                return jobs.finished.remove(at).map(|(_, result)| result);
            }
            let (sender, receiver) = oneshot::channel();
            jobs.waiting.insert(path.to_string(), sender);
            receiver
        };
        receiver.await.ok()
    }
}

fn lock(jobs: &Mutex<Jobs>) -> std::sync::MutexGuard<'_, Jobs> {
    jobs.lock().unwrap_or_else(|p| p.into_inner())
}

/// Hands every `JobRemoved` to its waiter, or keeps it (a bounded number)
/// for a waiter still to come. Ends with the connection, dropping the
/// waiters (their calls then fail).
async fn read_job_ends(mut messages: zbus::MessageStream, jobs: Arc<Mutex<Jobs>>) {
    while let Some(message) = messages.next().await {
        let Ok(message) = message else { continue };
        let header = message.header();
        let is_job_end = message.message_type() == zbus::message::Type::Signal
            && header.member().is_some_and(|m| m.as_str() == "JobRemoved")
            && header.interface().is_some_and(|i| i.as_str() == MANAGER);
        if !is_job_end {
            continue;
        }
        let Ok((_id, job, _unit, result)) = message.body().deserialize::<(u32, OwnedObjectPath, String, String)>()
        else {
            continue;
        };
        let mut jobs = lock(&jobs);
        match jobs.waiting.remove(job.as_str()) {
            Some(waiter) => {
                let _ = waiter.send(result);
            }
            None => {
                if jobs.finished.len() >= FINISHED_KEPT {
                    jobs.finished.pop_front();
                }
                jobs.finished.push_back((job.to_string(), result));
            }
        }
    }
    lock(&jobs).waiting.clear();
}
