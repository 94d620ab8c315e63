//! The restart: the daemon alone is stopped (SIGTERM and waited for, or
//! SIGKILL) with its pods running and on disk, and started again; timed from
//! its start to a Status that answers ready and to a ListContainers that
//! lists every container running (`Runtime::restart`). Afterwards every pod
//! must still be listed ready and every process the pods and the runtime ran
//! for them (pause, container, monitor or shim) must be the same one.

use std::collections::BTreeMap;
use std::fs;

use anyhow::Result;
use serde::Serialize;

use super::{AtN, Side};
use crate::runtime::{Restarted, Stop};
use crate::stats::{ratio, round3};

/// One restart.
#[derive(Debug, Clone, Serialize, Default)]
pub struct RestartFigures {
    /// From the signal to the daemon's exit.
    pub stop_ms: f64,
    /// From the new daemon's start to Status ready.
    pub ready_ms: f64,
    /// From the new daemon's start to all containers listed running.
    pub listed_ms: f64,
    /// Every pod listed ready and every pod process the same after it.
    pub pods_kept: bool,
}

/// One runtime's restarts at one pod count.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Restart {
    pub pods: usize,
    pub clean: Option<RestartFigures>,
    pub kill_9: Option<RestartFigures>,
}

impl Restart {
    pub fn set(&mut self, stop: Stop, figures: RestartFigures) {
        match stop {
            Stop::Clean => self.clean = Some(figures),
            Stop::Kill => self.kill_9 = Some(figures),
        }
    }
}

/// Restarts the side's daemon; the figures and what was wrong afterwards.
pub async fn measure(side: &mut Side<'_>, stop: Stop) -> Result<(RestartFigures, Vec<String>)> {
    let before = identities(&side.rt.processes().into_iter().collect::<Vec<_>>());
    let Restarted { stopped, ready, listed } = side.rt.restart(stop, side.pods.len()).await?;
    let mut problems = Vec::new();
    let gone: Vec<i32> =
        before.iter().filter(|(pid, start)| identity(**pid).as_ref() != Some(*start)).map(|(pid, _)| *pid).collect();
    if !gone.is_empty() {
        problems.push(format!(
            "{} of {} pod processes did not survive the restart ({}): {:?}",
            gone.len(),
            before.len(),
            stop.key(),
            &gone[..gone.len().min(10)]
        ));
    }
    match side.cri().list_pods().await {
        Ok(pods) => {
            let ready = pods.iter().filter(|p| p.state() == nidus::api::PodSandboxState::SandboxReady).count();
            if ready < side.pods.len() {
                problems.push(format!("{ready} of {} pods ready after the restart ({})", side.pods.len(), stop.key()));
            }
        }
        Err(e) => problems.push(format!("ListPodSandbox after the restart ({}): {e:#}", stop.key())),
    }
    let ms = |d: std::time::Duration| round3(d.as_secs_f64() * 1000.0);
    let figures = RestartFigures {
        stop_ms: ms(stopped),
        ready_ms: ms(ready),
        listed_ms: ms(listed),
        pods_kept: problems.is_empty(),
    };
    eprintln!(
        "    {}: stopped in {:.0} ms; ready after {:.1} ms, all {} containers listed after {:.1} ms",
        side.rt.name(),
        figures.stop_ms,
        figures.ready_ms,
        side.pods.len(),
        figures.listed_ms
    );
    Ok((figures, problems))
}

pub fn at_n(n: usize, nidus: Restart, containerd: Restart) -> AtN<Restart> {
    let listed = |r: &Restart, stop: Stop| match stop {
        Stop::Clean => r.clean.as_ref().map(|f| f.listed_ms),
        Stop::Kill => r.kill_9.as_ref().map(|f| f.listed_ms),
    };
    let ratios = [Stop::Clean, Stop::Kill]
        .into_iter()
        .map(|stop| {
            let key = match stop {
                Stop::Clean => "clean_listed_ms",
                Stop::Kill => "kill_9_listed_ms",
            };
            (key, listed(&nidus, stop).zip(listed(&containerd, stop)).and_then(|(a, b)| ratio(a, b)))
        })
        .collect::<BTreeMap<_, _>>();
    AtN { n, nidus, containerd, ratios }
}

/// The start time (field 22 of `/proc/PID/stat`) of each live pid.
fn identities(pids: &[i32]) -> BTreeMap<i32, u64> {
    pids.iter().filter_map(|&pid| Some((pid, identity(pid)?))).collect()
}

fn identity(pid: i32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.split_whitespace().nth(19)?.parse().ok()
}
