//! The monitor process itself: set-up (the init forked ahead, or at `go`,
//! and the wait until it is built), then the steady state — normally the
//! tiny `monitor_loop` exec'd in place (linux::tiny_programs), which comes
//! back through `finish` to write
//! the exit record; where that cannot be exec'd, the same loop in Rust here:
//! the container's output, the control socket and SIGCHLD, until the init
//! exits and the exit record is written.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use super::init::{self, InitPipes, InitStdio};
use super::log::{LineSplitter, Stream, MAX_RECORD};
use super::plan::{
    CgroupJoin, ExitRecord, MonitorAssignment, MonitorPlan, RunFiles, StartRecord, OOM_KILLED_REASON,
    START_ERROR_EXIT_CODE, START_ERROR_REASON,
};
use super::prepared::PreparedInit;
use crate::linux::clone3::{self, CloneIntoCgroupError};
use crate::linux::process::{self, ProcessIdentity};
use crate::linux::tiny_programs::ExecFailure;
use crate::store;
use crate::wire::{
    self, words, Answer, BuildStep, Built, CreateTimings, Created, Ended, Message, Passed, Request, Settled,
};

/// `nidus-monitor run DIR`: starts a session of its own and settles in DIR
/// (diagnostics to monitor.log, its identity and control socket), forks a
/// prepared init (`super::prepared`), all needing no assignment, and
/// prints `settled` (every word here is a message of `crate::wire`). Then
/// it reads its assignment (`MonitorAssignment`, one
/// JSON line on stdin: started as a spare, it waits here), by which time
/// the daemon has renamed DIR to the container's run dir. When the daemon
/// says `plan` (config.json and plan.json are written), it reads the plan
/// and sets the prepared init building, or, for a container that init does
/// not fit, reads the spec. At `go` (the cgroup is made too) it tells the
/// prepared init so (it joins the cgroup), or forks the init; it joins the
/// pod's cgroup while the init builds, then prints `created PID STARTTIME JOIN BUILD_US
/// SETTLE_US GO_WAIT_US` (or `error MESSAGE`) once the container is built,
/// and serves until the container ends.
pub fn run(dir: &Path) -> i32 {
    // Needs no assignment: done while a spare waits, off CreateContainer's path.
    let settled =
        nix::unistd::setsid().map(drop).map_err(|e| format!("setsid: {e}")).and_then(|()| settle(&RunFiles::new(dir)));
    let ((listener, dir_id), signals) = match settled.and_then(|settled| Ok((settled, sigchld_fd()?))) {
        Ok(settled) => settled,
        Err(e) => {
            say(&Answer::<Settled>::Refused(e));
            return 1;
        }
    };
    // Without one, every container's init is forked at `go`.
    let mut prepared = match PreparedInit::fork() {
        Ok(init) => {
            // It waits as we do, in the idle class; and leaves it with us.
            let _ = init.set_idle(true);
            Some(init)
        }
        Err(e) => {
            eprintln!("monitor: cannot fork an init ahead ({e}); it is forked when the container is built");
            None
        }
    };
    if writeln!(io::stdout(), "{}", Settled.encode()).and_then(|()| io::stdout().flush()).is_err() {
        return 1;
    }
    let mut line = String::new();
    if io::stdin().read_line(&mut line).is_err() || line.is_empty() {
        return 1;
    }
    let assignment = match MonitorAssignment::decode(line.trim_end()) {
        Ok(assignment) => assignment,
        Err(e) => {
            say(&Answer::<Created>::Refused(e.to_string()));
            return 1;
        }
    };
    let files = RunFiles::new(&assignment.run_dir);
    let assigned = Instant::now();
    let ready = leave_idle_class(prepared.as_ref()).and_then(|()| check_run_dir(&files, dir_id));
    let settle_us = assigned.elapsed().as_micros();
    // The daemon says `plan` once config.json and plan.json are written
    // (the init builds, or the spec is read, while the daemon finishes the
    // cgroup), then `go` once the cgroup is made. End of input, or
    // anything else, means it gave up (a prepared init dropped is killed).
    let mut builder = None;
    let builder = loop {
        line.clear();
        if io::stdin().read_line(&mut line).is_err() {
            return 1;
        }
        match (BuildStep::decode(line.trim_end()), builder.take()) {
            (Ok(BuildStep::Plan), None) => {
                let prepared = prepared.take();
                builder = Some(match &ready {
                    Ok(()) => begin_build(&files, &assignment, prepared),
                    Err(e) => Err(e.clone()),
                });
            }
            (Ok(BuildStep::Go), Some(builder)) => break builder,
            _ => return 1,
        }
    };
    let go_wait_us = assigned.elapsed().as_micros() - settle_us;
    if let Err(e) = ready {
        say(&Answer::<Created>::Refused(e));
        return 1;
    }
    let began = Instant::now();
    match builder.and_then(|builder| set_up(&files, listener, signals, &assignment, builder)) {
        Ok(mut monitor) => {
            // The last fields, for the create timings: how long the build
            // took here after `go`, how long settling took, and how long
            // `go` was then awaited, the plan's (or spec's) read included.
            // A daemon that died meanwhile finds the init recorded: no
            // reader is no reason to stop.
            let micros = |us: u128| u64::try_from(us).unwrap_or(u64::MAX);
            say(&Created {
                pid: monitor.init.pid,
                start_time: monitor.init.start_time,
                cgroup_join: Some(monitor.cgroup_join),
                timings: Some(CreateTimings {
                    build_us: micros(began.elapsed().as_micros()),
                    settle_us: micros(settle_us),
                    go_wait_us: micros(go_wait_us),
                }),
            });
            let _ = process::stdio_to_devnull_keep_stderr();
            let failure = monitor.hand_over();
            if failure.descriptors_changed {
                // Our descriptor objects no longer name what they did.
                eprintln!("monitor: exec of the monitor loop failed midway: {}", failure.error);
                return 1;
            }
            eprintln!("monitor: cannot exec the monitor loop ({}); serving in this process", failure.error);
            monitor.serve();
            0
        }
        Err(e) => {
            say(&Answer::<Created>::Refused(e));
            1
        }
    }
}

/// One line to the daemon on stdout. A daemon that died meanwhile is no
/// reason to stop: the init is recorded for the next one.
fn say(message: &impl Message) {
    let _ = writeln!(io::stdout(), "{}", message.encode());
    let _ = io::stdout().flush();
}

/// Who builds the container, decided when the plan is written.
enum Builder {
    /// The init forked ahead, building already.
    Prepared { plan: MonitorPlan, init: PreparedInit },
    /// An init forked at `go`, from this spec.
    Fork { plan: MonitorPlan, spec: Box<oci_spec::runtime::Spec> },
}

/// Reads the plan; sets the prepared init building if it fits the
/// container, else ends it (if any) and reads the spec for a fork at `go`.
fn begin_build(
    files: &RunFiles,
    assignment: &MonitorAssignment,
    prepared: Option<PreparedInit>,
) -> Result<Builder, String> {
    let plan: MonitorPlan = store::read_json(&files.plan())
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("{} is missing", files.plan().display()))?;
    if let Some(mut init) = prepared.filter(|_| plan.prepared_init_fits) {
        match init.build(&files.plan()) {
            Ok(()) => return Ok(Builder::Prepared { plan, init }),
            // Killed while it waited (the OOM killer, an operator): one is forked at `go`.
            Err(e) => eprintln!("monitor: the init forked ahead is gone ({e}); forking one"),
        }
    }
    Ok(Builder::Fork { spec: Box::new(init::read_spec(&assignment.bundle)?), plan })
}

struct Monitor {
    plan: MonitorPlan,
    files: RunFiles,
    init: ProcessIdentity,
    cgroup_join: CgroupJoin,
    listener: UnixListener,
    signals: SignalFd,
    outputs: Vec<Output>,
    log: Option<File>,
    start: Option<OwnedFd>,
    exec_error: Option<OwnedFd>,
    /// Why execve failed, when it did.
    start_error: Option<String>,
    /// The container's stdin write end, held for attach (until `close-stdin`).
    stdin: Option<OwnedFd>,
    /// Each attacher's pipes for the outputs, in the order of `outputs`.
    attachers: Vec<[Option<OwnedFd>; 2]>,
}

struct Output {
    fd: OwnedFd,
    splitter: LineSplitter,
    open: bool,
}

/// A close-on-exec pipe (read end, write end); the error names the call.
pub(super) fn pipe() -> Result<(OwnedFd, OwnedFd), String> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| format!("pipe: {e}"))
}

/// Whether the spec's process has a terminal.
fn has_terminal(spec: &oci_spec::runtime::Spec) -> bool {
    spec.process().as_ref().and_then(|p| p.terminal()).unwrap_or(false)
}

/// Which directory a monitor settled in: (device, inode).
type DirId = (u64, u64);

fn dir_id(dir: &Path) -> Result<DirId, String> {
    use std::os::unix::fs::MetadataExt;
    let meta = fs::metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok((meta.dev(), meta.ino()))
}

/// What needs no assignment, done in the monitor's own directory before
/// it is a container's run dir: diagnostics to monitor.log, our identity
/// (monitor.json) and the bound control socket (nothing calls it before
/// CreateContainer has answered; a call after a daemon restart waits in
/// the backlog until we serve). Renaming the directory keeps all three.
fn settle(files: &RunFiles) -> Result<(UnixListener, DirId), String> {
    let id = dir_id(&files.dir)?;
    if let Ok(diag) = OpenOptions::new().create(true).append(true).mode(0o600).open(files.monitor_log()) {
        let _ = nix::unistd::dup2_stderr(&diag);
    }
    let me = ProcessIdentity::of(std::process::id() as i32).map_err(|e| format!("reading our identity: {e}"))?;
    store::write_json_with(&files.monitor(), &me, store::Durability::Volatile).map_err(|e| e.to_string())?;
    let _ = fs::remove_file(files.socket());
    let listener = crate::linux::socket::bind(&files.socket())
        .map_err(|e| format!("binding {}: {e}", files.socket().display()))?;
    listener.set_nonblocking(true).map_err(|e| format!("socket: {e}"))?;
    Ok((listener, id))
}

/// A spare waits in the idle class; the daemon puts it back before its
/// assignment, and the container must never inherit the idle class.
fn leave_idle_class(prepared: Option<&PreparedInit>) -> Result<(), String> {
    if process::is_idle_scheduled().map_err(|e| format!("sched_getscheduler: {e}"))? {
        process::set_idle_scheduling(0, false).map_err(|e| format!("leaving SCHED_IDLE: {e}"))?;
    }
    prepared.map_or(Ok(()), |init| init.set_idle(false))
}

/// The assignment's run dir is the directory this monitor settled in.
fn check_run_dir(files: &RunFiles, settled_in: DirId) -> Result<(), String> {
    if dir_id(&files.dir)? != settled_in {
        return Err(format!("{} is not the directory this monitor settled in", files.dir.display()));
    }
    Ok(())
}

/// Records the init (init.json, cgroup-join.json) in the run dir: from then
/// on a restarted daemon finds this container's process. Written as soon as
/// the init exists, while it is being built; `forget_init` takes them back
/// when the build fails.
fn record_init(files: &RunFiles, child: i32, cgroup_join: CgroupJoin) -> Result<ProcessIdentity, String> {
    let init = ProcessIdentity::of(child).map_err(|e| format!("reading the init's identity: {e}"))?;
    store::write_json_with(&files.init(), &init, store::Durability::Volatile).map_err(|e| e.to_string())?;
    store::write_json_with(&files.cgroup_join(), &cgroup_join, store::Durability::Volatile)
        .map_err(|e| e.to_string())?;
    Ok(init)
}

/// The build failed: without an init record, a daemon restarted meanwhile
/// undoes this CreateContainer (as it does one interrupted before the fork).
fn forget_init(files: &RunFiles) {
    let _ = fs::remove_file(files.init());
    let _ = fs::remove_file(files.cgroup_join());
}

/// Moves this monitor into the pod's cgroup (`cgroup.procs` in every hierarchy).
fn join_pod_cgroup(pod_cgroup_procs: &[PathBuf]) -> Result<(), String> {
    for procs in pod_cgroup_procs {
        fs::write(procs, "0").map_err(|e| format!("cannot join the pod cgroup {}: {e}", procs.display()))?;
    }
    Ok(())
}

/// Builds the container (see `Builder`) and waits until its init is ready.
fn set_up(
    files: &RunFiles,
    listener: UnixListener,
    signals: SignalFd,
    assignment: &MonitorAssignment,
    builder: Builder,
) -> Result<Monitor, String> {
    let pod_cgroup_procs = assignment.pod_cgroup_procs.as_slice();
    let join_late = assignment.join_once_built;
    let (plan, spec, prepared) = match builder {
        Builder::Prepared { plan, mut init } => {
            // First: the init waits for it before it enters its cgroup namespace.
            init.cgroup_made()?;
            (plan, None, Some(init))
        }
        Builder::Fork { plan, spec } => (plan, Some(spec), None),
    };
    let log = match plan.log_location() {
        Some(location) => {
            Some(crate::linux::log_file::open(location).map_err(|e| format!("cannot open the log: {e}"))?)
        }
        None => None,
    };
    let forked = match (prepared, spec) {
        (Some(init), _) => {
            let (pid, ends) = init.hand_over();
            let stdin_keep = plan.stdin.then_some(ends.stdin);
            let outputs = vec![
                Output { fd: ends.stdout, splitter: LineSplitter::new(Stream::Stdout), open: true },
                Output { fd: ends.stderr, splitter: LineSplitter::new(Stream::Stderr), open: true },
            ];
            Forked {
                pid,
                cgroup_join: CgroupJoin::Procs,
                ready: ends.ready,
                outputs,
                stdin_keep,
                terminal: None,
                handshake: (ends.start, ends.exec_error),
            }
        }
        (None, Some(spec)) => {
            if let Some(restore) = plan.restore.clone() {
                if has_terminal(&spec) {
                    return Err("a container with a terminal cannot be restored from a checkpoint".into());
                }
                if !join_late {
                    join_pod_cgroup(pod_cgroup_procs)?;
                }
                let init = super::restore::restore(&plan, &restore, files)?;
                // Restored, not yet resumed: the runtime's hooks, as for a build.
                if let Err(e) = super::hooks::run_runtime_stages(&plan, init.pid) {
                    let _ = nix::sys::signal::kill(Pid::from_raw(init.pid), nix::sys::signal::Signal::SIGKILL);
                    return Err(e);
                }
                let outputs = vec![
                    Output { fd: init.stdout, splitter: LineSplitter::new(Stream::Stdout), open: true },
                    Output { fd: init.stderr, splitter: LineSplitter::new(Stream::Stderr), open: true },
                ];
                let handshake = (init.start, init.exec_error);
                // Restored into the container's cgroup: the monitor may leave it.
                if join_late {
                    join_pod_cgroup(pod_cgroup_procs)?;
                }
                let identity = record_init(files, init.pid, CgroupJoin::Procs)?;
                let started = Started { identity, cgroup_join: CgroupJoin::Procs, listener, handshake };
                return Ok(supervise(plan, files, started, signals, outputs, log, None));
            }
            fork_init(&plan, &spec)?
        }
        (None, None) => return Err("no init to build the container".into()),
    };
    let Forked { pid: child, cgroup_join, ready: ready_r, mut outputs, mut stdin_keep, terminal, handshake } = forked;
    // Both while the init builds, off the path to the reply: into the pod's
    // cgroup (the init joins its own by itself), and the init recorded.
    // (With systemd's scope around this monitor: once the init is built.)
    let joined = if join_late { Ok(()) } else { join_pod_cgroup(pod_cgroup_procs) };
    let recorded = joined.and_then(|()| record_init(files, child, cgroup_join));

    // The prestart and createRuntime hooks run meanwhile, when the init asks.
    let ready = super::hooks::await_ready(ready_r, &handshake.0, &plan, child);
    // The terminal's master, sent before "ok".
    let terminal = match (&ready, terminal) {
        (Ok(Answer::Done(Built)), Some(socket)) => Some(receive_terminal(&socket, plan.stdin)),
        _ => None,
    };
    // Built: the init is in its scope, which this monitor may leave now.
    let recorded = match (&ready, recorded) {
        (Ok(Answer::Done(Built)), Ok(identity)) if join_late => join_pod_cgroup(pod_cgroup_procs).map(|()| identity),
        (_, recorded) => recorded,
    };
    let identity = match (ready, recorded, terminal) {
        (Ok(Answer::Done(Built)), Ok(identity), None) => identity,
        (Ok(Answer::Done(Built)), Ok(identity), Some(Ok((master, stdin)))) => {
            stdin_keep = stdin;
            outputs = vec![Output { fd: master, splitter: LineSplitter::new(Stream::Stdout), open: true }];
            identity
        }
        (ready, recorded, terminal) => {
            forget_init(files);
            let _ = nix::sys::signal::kill(Pid::from_raw(child), nix::sys::signal::Signal::SIGKILL);
            let _ = waitpid(Pid::from_raw(child), None);
            return Err(match (ready, recorded, terminal) {
                (_, Err(e), _) => e,
                (_, _, Some(Err(e))) => e,
                (Ok(Answer::Refused(why)), _, _) => why,
                (_, _, _) => "the container's init died while being built".into(),
            });
        }
    };
    let started = Started { identity, cgroup_join, listener, handshake };
    Ok(supervise(plan, files, started, signals, outputs, log, stdin_keep))
}

/// An init being built, and our ends of its pipes.
struct Forked {
    pid: i32,
    cgroup_join: CgroupJoin,
    /// `wire::Built` once built, or its refusal.
    ready: OwnedFd,
    outputs: Vec<Output>,
    stdin_keep: Option<OwnedFd>,
    /// A container with a terminal: the socket its init sends the master on.
    terminal: Option<UnixStream>,
    /// Our ends of the start pipe and of the exec-error pipe.
    handshake: (OwnedFd, OwnedFd),
}

/// Forks the init at `go` (the spec read when the plan was written): its
/// stdio (a terminal, or pipes), then into the container's PID namespace.
fn fork_init(plan: &MonitorPlan, spec: &oci_spec::runtime::Spec) -> Result<Forked, String> {
    let tty = has_terminal(spec);
    // The container's stdio, and our ends of it (a terminal's, once the init sends it).
    let (init_stdio, outputs, stdin_keep, terminal) = if tty {
        let null = || {
            let flags = nix::fcntl::OFlag::O_RDWR | nix::fcntl::OFlag::O_CLOEXEC;
            nix::fcntl::open("/dev/null", flags, nix::sys::stat::Mode::empty())
                .map_err(|e| format!("opening /dev/null: {e}"))
        };
        let (ours, theirs) = UnixStream::pair().map_err(|e| format!("socketpair: {e}"))?;
        let stdio = InitStdio { stdin: null()?, stdout: null()?, stderr: null()?, terminal: Some(theirs.into()) };
        (stdio, Vec::new(), None, Some(ours))
    } else {
        let (out_r, out_w) = pipe()?;
        let (err_r, err_w) = pipe()?;
        let (stdin_r, stdin_keep) = if plan.stdin {
            let (r, w) = pipe()?;
            (r, Some(w))
        } else {
            // A pipe nobody writes reads as empty, like /dev/null, but is no
            // file of a host mount (CRIU cannot checkpoint one).
            let (r, _closed) = pipe()?;
            (r, None)
        };
        (
            InitStdio { stdin: stdin_r, stdout: out_w, stderr: err_w, terminal: None },
            vec![
                Output { fd: out_r, splitter: LineSplitter::new(Stream::Stdout), open: true },
                Output { fd: err_r, splitter: LineSplitter::new(Stream::Stderr), open: true },
            ],
            stdin_keep,
            None,
        )
    };
    let (ready_r, ready_w) = pipe()?;
    let (start_r, start_w) = pipe()?;
    let (exec_r, exec_w) = pipe()?;

    init::enter_pid_namespace_for_children(spec)?;
    let (forked, cgroup_join) = fork_process(plan)?;
    let child = match forked {
        process::Forked::Child => {
            drop((ready_r, start_w, exec_r, outputs, stdin_keep, terminal));
            init::run(spec, plan, init_stdio, InitPipes { ready: ready_w, start: start_r, exec_error: exec_w })
        }
        process::Forked::Parent { child } => child,
    };
    drop((init_stdio, ready_w, start_r, exec_w));
    Ok(Forked { pid: child, cgroup_join, ready: ready_r, outputs, stdin_keep, terminal, handshake: (start_w, exec_r) })
}

/// The master of the terminal a built init sent on `socket` (it did so
/// before it said "ok", so it waits in the socket already), and a copy of
/// it to keep as the container's stdin when it asked for one.
fn receive_terminal(socket: &UnixStream, stdin: bool) -> Result<(OwnedFd, Option<OwnedFd>), String> {
    let why = |e: io::Error| format!("receiving the container's terminal: {e}");
    socket.set_read_timeout(Some(Duration::from_secs(5))).map_err(why)?;
    let mut word = [0u8; 16];
    let (_, fds) = crate::linux::socket::receive_with_fds(socket, &mut word).map_err(why)?;
    let master = fds.into_iter().next().ok_or("the container's init sent no terminal")?;
    let stdin = if stdin { Some(master.try_clone().map_err(why)?) } else { None };
    Ok((master, stdin))
}

/// SIGCHLD through a signalfd; blocked before any fork so no exit is missed.
fn sigchld_fd() -> Result<SignalFd, String> {
    let mut chld = SigSet::empty();
    chld.add(Signal::SIGCHLD);
    chld.thread_block().map_err(|e| format!("blocking SIGCHLD: {e}"))?;
    SignalFd::with_flags(&chld, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK).map_err(|e| format!("signalfd: {e}"))
}

/// A ready init (built here, or restored from a checkpoint), recorded in
/// the run dir: its identity, how it joined its cgroup, our control socket,
/// and our ends of the start pipe and of the exec-error pipe.
struct Started {
    identity: ProcessIdentity,
    cgroup_join: CgroupJoin,
    listener: UnixListener,
    handshake: (OwnedFd, OwnedFd),
}

/// Hands a ready init to the supervision.
fn supervise(
    plan: MonitorPlan,
    files: &RunFiles,
    started: Started,
    signals: SignalFd,
    outputs: Vec<Output>,
    log: Option<File>,
    stdin_keep: Option<OwnedFd>,
) -> Monitor {
    let Started { identity: init, cgroup_join, listener, handshake: (start_w, exec_r) } = started;
    Monitor {
        plan,
        files: files.clone(),
        init,
        cgroup_join,
        listener,
        signals,
        outputs,
        log,
        start: Some(start_w),
        exec_error: Some(exec_r),
        start_error: None,
        stdin: stdin_keep,
        attachers: Vec::new(),
    }
}

/// Forks the container's init: on cgroup v2 straight into the container
/// cgroup (clone3), else a plain fork after which the init joins by writing
/// `cgroup.procs` (as it also does, harmlessly, after clone3).
fn fork_process(plan: &MonitorPlan) -> Result<(process::Forked, CgroupJoin), String> {
    if let Some(dir) = &plan.clone_into_cgroup {
        let flags = nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_DIRECTORY | nix::fcntl::OFlag::O_CLOEXEC;
        let cgroup = nix::fcntl::open(dir, flags, nix::sys::stat::Mode::empty())
            .map_err(|e| format!("cannot open the container cgroup {}: {e}", dir.display()))?;
        match clone3::fork_into_cgroup(cgroup.as_fd()) {
            Ok(forked) => return Ok((forked, CgroupJoin::Clone3)),
            Err(CloneIntoCgroupError::Unsupported(e)) => {
                eprintln!("monitor: clone3 into a cgroup is not available ({e}); forking instead");
            }
            Err(CloneIntoCgroupError::Failed(e)) => {
                return Err(format!("cannot start the init in cgroup {}: {e}", dir.display()))
            }
        }
    }
    Ok((process::fork().map_err(|e| format!("fork: {e}"))?, CgroupJoin::Procs))
}

impl Monitor {
    fn serve(&mut self) {
        loop {
            let mut fds = vec![
                PollFd::new(self.listener.as_fd(), PollFlags::POLLIN),
                PollFd::new(self.signals.as_fd(), PollFlags::POLLIN),
            ];
            let open: Vec<usize> = (0..self.outputs.len()).filter(|i| self.outputs[*i].open).collect();
            for i in &open {
                fds.push(PollFd::new(self.outputs[*i].fd.as_fd(), PollFlags::POLLIN));
            }
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => {
                    eprintln!("monitor: poll: {e}");
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                }
            }
            let ready = |pfd: &PollFd| pfd.revents().is_some_and(|r| !r.is_empty());
            let (listener_ready, signal_ready) = (ready(&fds[0]), ready(&fds[1]));
            let outputs_ready: Vec<usize> =
                open.iter().zip(&fds[2..]).filter(|(_, p)| ready(p)).map(|(i, _)| *i).collect();
            drop(fds);
            for i in outputs_ready {
                self.pump(i);
            }
            if listener_ready {
                self.accept();
            }
            if signal_ready {
                while let Ok(Some(_)) = self.signals.read_signal() {}
                if let Some(status) = self.reap() {
                    self.finish(status);
                    return;
                }
            }
        }
    }

    /// Copies what one output has into the log; false at EOF.
    fn pump(&mut self, i: usize) -> bool {
        let mut buf = [0u8; 64 * 1024];
        let output = &mut self.outputs[i];
        match nix::unistd::read(&output.fd, &mut buf) {
            Ok(0) | Err(nix::errno::Errno::EIO) => {
                // EIO: a terminal whose last writer is gone.
                output.open = false;
                false
            }
            Ok(n) => {
                if let Some(log) = &mut self.log {
                    let mut scratch = [0u8; MAX_RECORD];
                    output.splitter.feed(&buf[..n], now(), &mut scratch, &mut |record| {
                        if let Err(e) = log.write_all(record) {
                            eprintln!("monitor: writing the log: {e}");
                        }
                    });
                }
                self.copy_to_attachers(i, &buf[..n]);
                true
            }
            Err(nix::errno::Errno::EINTR) | Err(nix::errno::Errno::EAGAIN) => true,
            Err(e) => {
                eprintln!("monitor: reading container output: {e}");
                output.open = false;
                false
            }
        }
    }

    fn accept(&mut self) {
        while let Ok((stream, _)) = self.listener.accept() {
            let _ = stream.set_nonblocking(false);
            let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
            self.handle(stream);
        }
    }

    /// One request (with the descriptors passed along, for `attach`), one reply.
    fn handle(&mut self, stream: UnixStream) {
        let mut request = Vec::new();
        let mut passed = Vec::new();
        let mut buf = [0u8; 256];
        while !request.contains(&b'\n') && request.len() < buf.len() {
            match crate::linux::socket::receive_with_fds(&stream, &mut buf) {
                Ok((0, fds)) => {
                    passed.extend(fds);
                    break;
                }
                Ok((n, fds)) => {
                    passed.extend(fds);
                    request.extend_from_slice(&buf[..n]);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return,
            }
        }
        let line = String::from_utf8_lossy(request.split(|b| *b == b'\n').next().unwrap_or_default()).into_owned();
        let reply = match Request::decode(&line) {
            Ok(Request::Start) => self.start(),
            Ok(Request::ReopenLog) => self.reopen_log(),
            Ok(Request::CloseStdin) => {
                self.stdin = None;
                Ok(())
            }
            Ok(Request::Attach) if !passed.is_empty() => return self.attach(&stream, passed),
            Ok(Request::Attach) | Err(_) => Err(format!("unknown request {:?}", line.trim())),
        };
        let reply = Answer::from(reply.map(|()| Passed::default()));
        let _ = (&stream).write_all(format!("{}\n", reply.encode()).as_bytes());
    }

    /// Adds an attacher with its output pipes, and passes it back the
    /// container's stdin write end and terminal when there are.
    fn attach(&mut self, stream: &UnixStream, pipes: Vec<OwnedFd>) {
        self.drop_gone_attachers();
        if self.attachers.len() >= words::MAX_ATTACHERS {
            let reply = Answer::<Passed>::Refused("too many attachers".into());
            let _ = (&*stream).write_all(format!("{}\n", reply.encode()).as_bytes());
            return;
        }
        let mut pipes = pipes.into_iter();
        self.attachers.push([pipes.next(), pipes.next()]);
        // A terminal is the one output there is.
        let terminal = (self.outputs.len() == 1).then(|| &self.outputs[0].fd);
        let said = Passed { stdin: self.stdin.is_some(), terminal: terminal.is_some() };
        let fds: Vec<_> = self.stdin.iter().chain(terminal).map(|fd| fd.as_raw_fd()).collect();
        let _ = crate::linux::socket::send_with_fds(stream, format!("{}\n", said.encode()).as_bytes(), &fds);
    }

    /// Hands output to each attacher's pipe without waiting (the attacher
    /// made it non-blocking): a full pipe loses the chunk; a closed one ends
    /// the attacher.
    fn copy_to_attachers(&mut self, i: usize, data: &[u8]) {
        self.attachers.retain(|pipes| match &pipes[i] {
            Some(fd) => !matches!(
                nix::unistd::write(fd, data),
                Err(e) if e != nix::errno::Errno::EAGAIN && e != nix::errno::Errno::EINTR
            ),
            None => true,
        });
    }

    /// Ends the attachers whose client has gone (a pipe's read end is
    /// closed: poll says POLLERR), so that the slots of sessions that
    /// detached from a container writing nothing come free.
    fn drop_gone_attachers(&mut self) {
        self.attachers.retain(|pipes| {
            !pipes.iter().flatten().any(|fd| {
                let mut fds = [PollFd::new(fd.as_fd(), PollFlags::empty())];
                matches!(poll(&mut fds, PollTimeout::ZERO), Ok(n) if n > 0)
                    && fds[0].revents().is_some_and(|r| r.contains(PollFlags::POLLERR))
            })
        });
    }

    /// Releases the init and reports whether execve succeeded.
    fn start(&mut self) -> Result<(), String> {
        let (Some(start), Some(exec_error)) = (self.start.take(), self.exec_error.take()) else {
            return Err("the container was already started".into());
        };
        File::from(start).write_all(words::START_NOW).map_err(|_| "the container's init is gone".to_string())?;
        let mut why = String::new();
        let _ = File::from(exec_error).read_to_string(&mut why);
        if why.is_empty() {
            let record = StartRecord { started_at_ns: crate::clock::now_ns() };
            store::write_json_with(&self.files.started(), &record, store::Durability::Volatile)
                .map_err(|e| e.to_string())?;
            Ok(())
        } else {
            self.start_error = Some(why.clone());
            Err(why)
        }
    }

    fn reopen_log(&mut self) -> Result<(), String> {
        let Some(location) = self.plan.log_location() else {
            return Ok(());
        };
        let file = crate::linux::log_file::open(location).map_err(|e| format!("cannot reopen the log: {e}"))?;
        self.log = Some(file);
        Ok(())
    }

    fn reap(&mut self) -> Option<WaitStatus> {
        match waitpid(Pid::from_raw(self.init.pid), Some(WaitPidFlag::WNOHANG)) {
            Ok(status @ (WaitStatus::Exited(..) | WaitStatus::Signaled(..))) => Some(status),
            _ => None,
        }
    }

    /// The init is gone: take the rest of its output (briefly: a process it
    /// left behind may hold the pipes open), then write the exit record.
    fn finish(&mut self, status: WaitStatus) {
        let finished_at_ns = crate::clock::now_ns();
        let deadline = Instant::now() + Duration::from_millis(200);
        for i in 0..self.outputs.len() {
            let _ =
                nix::fcntl::fcntl(&self.outputs[i].fd, nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK));
            while self.outputs[i].open && Instant::now() < deadline {
                let before = self.outputs[i].open;
                if !self.pump(i) && before {
                    break;
                }
                let mut fds = [PollFd::new(self.outputs[i].fd.as_fd(), PollFlags::POLLIN)];
                if !matches!(poll(&mut fds, PollTimeout::from(20u8)), Ok(n) if n > 0) {
                    break;
                }
            }
        }
        for output in &mut self.outputs {
            if let Some(log) = &mut self.log {
                let mut scratch = [0u8; MAX_RECORD];
                output.splitter.finish(now(), &mut scratch, &mut |record| {
                    let _ = log.write_all(record);
                });
            }
        }
        // Attachers read end of file: the container's output is over.
        self.attachers.clear();
        let ended = match status {
            WaitStatus::Signaled(_, sig, _) => Ended::Signaled(sig as i32),
            WaitStatus::Exited(_, code) => Ended::Exited(code),
            _ => return,
        };
        record_exit(&self.plan, &self.files, ended, finished_at_ns, self.start_error.as_deref());
    }

    /// Execs the tiny monitor loop in place with this monitor's descriptors
    /// and arguments (numbered and ordered by `wire::words`). Returns only
    /// when that fails.
    fn hand_over(&self) -> ExecFailure {
        let path_flags = nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_CLOEXEC;
        let run_dir = match nix::fcntl::open(
            &self.files.dir,
            path_flags | nix::fcntl::OFlag::O_DIRECTORY,
            nix::sys::stat::Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(e) => return ExecFailure { error: e.into(), descriptors_changed: false },
        };
        // The loop comes back to this very program (`finish`) for the exit record.
        let this_program = match nix::fcntl::open("/proc/self/exe", path_flags, nix::sys::stat::Mode::empty()) {
            Ok(fd) => fd,
            Err(e) => return ExecFailure { error: e.into(), descriptors_changed: false },
        };
        let raw = |fd: Option<&OwnedFd>| fd.map(|f| f.as_raw_fd());
        let mut fds = wire::LoopDescriptors::default();
        fds.set(words::LOOP_CONTROL, Some(self.listener.as_raw_fd()))
            .set(words::LOOP_SIGNALS, Some(self.signals.as_fd().as_raw_fd()))
            .set(words::LOOP_OUT, raw(self.outputs.first().map(|o| &o.fd)))
            .set(words::LOOP_ERR, raw(self.outputs.get(1).map(|o| &o.fd)))
            .set(words::LOOP_LOG, self.log.as_ref().map(|l| l.as_raw_fd()))
            .set(words::LOOP_START, raw(self.start.as_ref()))
            .set(words::LOOP_EXEC_ERROR, raw(self.exec_error.as_ref()))
            .set(words::LOOP_RUN_DIR, Some(run_dir.as_raw_fd()))
            .set(words::LOOP_FINISH, Some(this_program.as_raw_fd()))
            .set(words::LOOP_STDIN, raw(self.stdin.as_ref()));
        let location = self.plan.log_location();
        let Some(run_dir_path) = self.files.dir.to_str() else {
            let error = io::Error::new(io::ErrorKind::InvalidInput, "the run directory's path is not UTF-8");
            return ExecFailure { error, descriptors_changed: false };
        };
        let args = wire::LoopArgs {
            init_pid: self.init.pid,
            log_directory: location.and_then(|l| l.directory.to_str()),
            run_dir: run_dir_path,
            memory_cgroup: self.plan.memory_cgroup.as_ref().and_then(|p| p.to_str()),
            log_relative: location.and_then(|l| l.relative.to_str()),
        }
        .encode();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        crate::linux::tiny_programs::MONITOR_LOOP.exec(fds.as_slice(), &args)
    }
}

/// `nidus-monitor finish RUN_DIR STATUS FINISHED_AT_NS [START_ERROR]`: the
/// monitor loop's last step when execve had failed (it writes the records of
/// inits that ran itself), in the monitor's pid — writes the exit record.
pub fn finish(run_dir: &Path, status: &str, finished_at_ns: &str, start_error: Option<&str>) -> i32 {
    let files = RunFiles::new(run_dir);
    let (Ok(ended), Ok(finished_at_ns)) = (Ended::decode(status), finished_at_ns.parse::<i64>()) else {
        eprintln!("monitor finish: bad status {status:?} or time {finished_at_ns:?}");
        return 2;
    };
    let plan: MonitorPlan = match store::read_json(&files.plan()) {
        Ok(Some(plan)) => plan,
        Ok(None) => {
            eprintln!("monitor finish: {} is missing", files.plan().display());
            return 1;
        }
        Err(e) => {
            eprintln!("monitor finish: {e}");
            return 1;
        }
    };
    record_exit(&plan, &files, ended, finished_at_ns, start_error.filter(|e| !e.is_empty()));
    0
}

/// Writes `exit.json` for an init that ended, and retires the control socket.
fn record_exit(plan: &MonitorPlan, files: &RunFiles, ended: Ended, finished_at_ns: i64, start_error: Option<&str>) {
    // Read before anything removes the cgroup: the kernel's own count.
    let oom_killed =
        plan.memory_cgroup.as_deref().and_then(crate::cgroups::oom::oom_kills).is_some_and(|kills| kills > 0);
    let reason = |code_reason: &str| {
        if oom_killed {
            OOM_KILLED_REASON.to_string()
        } else {
            code_reason.to_string()
        }
    };
    let record = match (start_error, ended) {
        (Some(why), _) => ExitRecord {
            exit_code: START_ERROR_EXIT_CODE,
            signal: None,
            finished_at_ns,
            reason: START_ERROR_REASON.into(),
            message: why.to_string(),
        },
        (None, Ended::Signaled(sig)) => ExitRecord {
            exit_code: 128 + sig,
            signal: Some(sig),
            finished_at_ns,
            reason: reason("Error"),
            message: String::new(),
        },
        (None, Ended::Exited(code)) => ExitRecord {
            exit_code: code,
            signal: None,
            finished_at_ns,
            reason: reason(if code == 0 { "Completed" } else { "Error" }),
            message: String::new(),
        },
    };
    if let Err(e) = store::write_json_with(&files.exit(), &record, store::Durability::Volatile) {
        eprintln!("monitor: cannot write the exit record: {e}");
    }
    let _ = fs::remove_file(files.socket());
}

/// The realtime clock as the log formatter takes it.
fn now() -> (u64, u32) {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    (since.as_secs(), since.subsec_nanos())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::monitor::plan::RootfsPlan;

    /// A monitor serving a container without a terminal: its stdout and
    /// stderr pipes (our write ends returned), its stdin write end held.
    fn monitor(dir: &Path) -> (Monitor, [OwnedFd; 2], OwnedFd) {
        let files = RunFiles::new(dir);
        let plan = MonitorPlan {
            container_id: "c".into(),
            bundle: dir.into(),
            run_dir: dir.into(),
            log_path: None,
            log_directory: None,
            rootfs: RootfsPlan { lower: Vec::new(), upper: dir.into(), work: dir.into() },
            cgroup_procs: Vec::new(),
            cgroup_mounts: Vec::new(),
            stdin: true,
            memory_cgroup: None,
            clone_into_cgroup: None,
            restore: None,
            prepared_init_fits: false,
            hooks: None,
        };
        let (out_r, out_w) = pipe().unwrap();
        let (err_r, err_w) = pipe().unwrap();
        let (stdin_r, stdin_w) = pipe().unwrap();
        let output = |fd, stream| Output { fd, splitter: LineSplitter::new(stream), open: true };
        let monitor = Monitor {
            plan,
            files: files.clone(),
            init: ProcessIdentity::of(std::process::id() as i32).unwrap(),
            cgroup_join: CgroupJoin::Procs,
            listener: crate::linux::socket::bind(&files.socket()).unwrap(),
            signals: SignalFd::with_flags(&SigSet::empty(), SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK).unwrap(),
            outputs: vec![output(out_r, Stream::Stdout), output(err_r, Stream::Stderr)],
            log: None,
            start: None,
            exec_error: None,
            start_error: None,
            stdin: Some(stdin_w),
            attachers: Vec::new(),
        };
        (monitor, [out_w, err_w], stdin_r)
    }

    /// Sends `request` with `fds` to the monitor; its reply and the descriptors passed back.
    fn ask(monitor: &mut Monitor, request: &str, fds: &[&OwnedFd]) -> (String, Vec<OwnedFd>) {
        let (client, server) = UnixStream::pair().unwrap();
        let raw: Vec<_> = fds.iter().map(|fd| fd.as_raw_fd()).collect();
        crate::linux::socket::send_with_fds(&client, format!("{request}\n").as_bytes(), &raw).unwrap();
        monitor.handle(server);
        let mut buf = [0u8; 256];
        let (n, passed) = crate::linux::socket::receive_with_fds(&client, &mut buf).unwrap();
        (String::from_utf8_lossy(&buf[..n]).into_owned(), passed)
    }

    fn attacher_pipes() -> [(OwnedFd, OwnedFd); 2] {
        let pair = || {
            let (r, w) = pipe().unwrap();
            nix::fcntl::fcntl(&w, nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK)).unwrap();
            nix::fcntl::fcntl(&r, nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK)).unwrap();
            (r, w)
        };
        [pair(), pair()]
    }

    /// The reply line refusing a request for `why`.
    fn refusal(why: &str) -> String {
        format!("{}\n", Answer::<Passed>::Refused(why.into()).encode())
    }

    fn read_now(fd: &OwnedFd) -> String {
        let mut buf = [0u8; 256];
        match nix::unistd::read(fd, &mut buf) {
            Ok(n) => String::from_utf8_lossy(&buf[..n]).into_owned(),
            Err(e) => format!("<{e}>"),
        }
    }

    /// The std loop (where the tiny one cannot be exec'd) serves the same
    /// control protocol: attach (output copies, stdin passed back),
    /// close-stdin, the attacher bound, unknown requests.
    #[test]
    fn the_fallback_loop_serves_attach_and_close_stdin() {
        let dir = tempfile::tempdir().unwrap();
        let (mut monitor, [out_w, err_w], stdin_r) = monitor(dir.path());

        let [(out_r, out_a), (err_r, err_a)] = attacher_pipes();
        let (reply, passed) = ask(&mut monitor, "attach", &[&out_a, &err_a]);
        assert_eq!(reply, "ok stdin\n");
        assert_eq!(passed.len(), 1, "the container's stdin write end comes back");
        nix::unistd::write(&passed[0], b"typed").unwrap();
        assert_eq!(read_now(&stdin_r), "typed");

        nix::unistd::write(&out_w, b"to stdout\n").unwrap();
        nix::unistd::write(&err_w, b"to stderr\n").unwrap();
        assert!(monitor.pump(0) && monitor.pump(1));
        assert_eq!(read_now(&out_r), "to stdout\n");
        assert_eq!(read_now(&err_r), "to stderr\n");

        let (reply, passed) = ask(&mut monitor, "close-stdin", &[]);
        assert_eq!((reply.as_str(), passed.len()), ("ok\n", 0));
        drop(passed);
        let [(_keep_out, a), (_keep_err, b)] = attacher_pipes();
        let (reply, passed) = ask(&mut monitor, "attach", &[&a, &b]);
        assert_eq!((reply.as_str(), passed.len()), ("ok\n", 0), "no stdin left to pass");

        // Attach without pipes, or a word the monitor does not know.
        for request in ["attach", "bogus"] {
            let (reply, _) = ask(&mut monitor, request, &[]);
            assert_eq!(reply, refusal(&format!("unknown request \"{request}\"")));
        }

        // The bound: attachers whose client is gone make room, live ones do not.
        let mut live = Vec::new();
        while monitor.attachers.len() < words::MAX_ATTACHERS {
            let [(r, w), (r2, w2)] = attacher_pipes();
            assert_eq!(ask(&mut monitor, "attach", &[&w, &w2]).0, "ok\n");
            live.push((r, r2));
        }
        let [(_r, w), (_r2, w2)] = attacher_pipes();
        assert_eq!(ask(&mut monitor, "attach", &[&w, &w2]).0, refusal("too many attachers"));
        drop((out_r, err_r));
        assert_eq!(ask(&mut monitor, "attach", &[&w, &w2]).0, "ok\n", "the first attacher's client is gone");

        // A closed pipe ends its attacher at the next output.
        drop(live.pop());
        nix::unistd::write(&out_w, b"more\n").unwrap();
        assert!(monitor.pump(0));
        assert_eq!(monitor.attachers.len(), words::MAX_ATTACHERS - 1);
        assert_eq!(read_now(&live[0].0), "more\n");
    }
}
