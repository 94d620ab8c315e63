//! The plain constants of the wire between the daemon, a container's
//! monitor, a pod's pause launcher and a container's init: the words they
//! say, the descriptor numbers each helper is handed, and the order of the
//! monitor loop's arguments. Written once, here, for both sides: the std
//! side (`crate::wire`, which types them) and the `no_std` tiny monitor
//! loop (`src/linux/tiny/monitor_loop.rs`, which includes this file with
//! `#[path]`). So this file uses nothing but `core`: integers and byte
//! strings.

// ---- The words ---------------------------------------------------------

/// The first word of every refusal, on every channel: `error MESSAGE`.
pub(crate) const ERROR: &[u8] = b"error ";
/// The word of success: a built init, a pause set up, a control request done.
pub(crate) const OK: &[u8] = b"ok";

/// monitor → daemon (stdout): settled in its directory, ready for an assignment.
pub(crate) const SETTLED: &[u8] = b"settled";
/// monitor → daemon (stdout): `created PID STARTTIME JOIN BUILD_US SETTLE_US GO_WAIT_US`.
pub(crate) const CREATED: &[u8] = b"created";
/// daemon → monitor (stdin): config.json and plan.json are written.
pub(crate) const PLAN: &[u8] = b"plan";
/// daemon → monitor or pause launcher (stdin): the cgroups are made, build.
pub(crate) const GO: &[u8] = b"go";

/// pause launcher → the pause it cloned into a user namespace (maps pipe):
/// the namespace's ID maps are written, become its root.
pub(crate) const MAPS_WRITTEN: &[u8] = b"m";
/// monitor → prepared init (control pipe): the container cgroup is made.
pub(crate) const CGROUP_MADE: &[u8] = b"cgroup";
/// init → monitor (ready pipe): run the runtime's hooks (prestart,
/// createRuntime), then write `HOOKS_RAN` on the start pipe.
pub(crate) const RUNTIME_HOOKS: &[u8] = b"hooks\n";
/// monitor → init (start pipe): the runtime's hooks ran, go on building.
pub(crate) const HOOKS_RAN: &[u8] = b"h";
/// monitor → init (start pipe): StartContainer, exec now.
pub(crate) const START_NOW: &[u8] = b"s";

/// daemon → monitor (control socket) requests, one line each.
pub(crate) const START: &[u8] = b"start";
pub(crate) const REOPEN_LOG: &[u8] = b"reopen-log";
pub(crate) const CLOSE_STDIN: &[u8] = b"close-stdin";
/// With one pipe per output stream passed along (SCM_RIGHTS).
pub(crate) const ATTACH: &[u8] = b"attach";
/// Words after `ok` in the reply to `attach`, each naming a descriptor
/// passed back with it, in this order.
pub(crate) const PASSED_STDIN: &[u8] = b"stdin";
pub(crate) const PASSED_TERMINAL: &[u8] = b"tty";
/// Most attachers a monitor serves at once.
pub(crate) const MAX_ATTACHERS: usize = 8;

/// monitor loop → `nidus-monitor finish`: how the init ended, `exited:N` or `signaled:N`.
pub(crate) const EXITED: &[u8] = b"exited:";
pub(crate) const SIGNALED: &[u8] = b"signaled:";
/// The subcommand the monitor loop execs for a StartError record.
pub const FINISH_COMMAND: &[u8] = b"finish";

// ---- The monitor loop's descriptors --------------------------------------

/// `nidus-monitor run` execs the loop with these numbers (a missing one stays closed).
pub(crate) const LOOP_FIRST_FD: i32 = 3;
/// The control socket (listening, non-blocking).
pub(crate) const LOOP_CONTROL: i32 = 3;
/// The signalfd for SIGCHLD.
pub(crate) const LOOP_SIGNALS: i32 = 4;
/// The container's stdout, or its terminal.
pub(crate) const LOOP_OUT: i32 = 5;
/// The container's stderr (absent with a terminal).
pub(crate) const LOOP_ERR: i32 = 6;
/// The log file (absent without one).
pub(crate) const LOOP_LOG: i32 = 7;
/// The start pipe, write end.
pub(crate) const LOOP_START: i32 = 8;
/// The execve-error pipe, read end.
pub(crate) const LOOP_EXEC_ERROR: i32 = 9;
/// The run directory (O_PATH).
pub(crate) const LOOP_RUN_DIR: i32 = 10;
/// The full monitor program (O_PATH), exec'd for `finish`.
pub(crate) const LOOP_FINISH: i32 = 11;
/// The container's stdin, write end (only held open, for attach).
pub(crate) const LOOP_STDIN: i32 = 12;
/// How many numbers from `LOOP_FIRST_FD` the loop is handed.
pub(crate) const LOOP_FDS: usize = 10;

// ---- The monitor loop's arguments ----------------------------------------

/// argv[i] of the loop (argv[0] is its name); `NONE` stands for an absent one.
pub(crate) const ARG_INIT_PID: usize = 1;
/// The pod's log directory, or `NONE`.
pub(crate) const ARG_LOG_DIRECTORY: usize = 2;
/// The run directory's path (for `finish`).
pub(crate) const ARG_RUN_DIR: usize = 3;
/// The container's memory cgroup directory, or `NONE`.
pub(crate) const ARG_MEMORY_CGROUP: usize = 4;
/// The log file's path below the log directory, or `NONE`.
pub(crate) const ARG_LOG_RELATIVE: usize = 5;
/// argc, the name included.
pub(crate) const LOOP_ARGC: usize = 6;
pub(crate) const NONE: &[u8] = b"-";

// ---- A container init's descriptors --------------------------------------

/// init → monitor: `ok`, or `error MESSAGE` (`RUNTIME_HOOKS` before either).
pub(crate) const INIT_READY: i32 = 3;
/// monitor → init: `HOOKS_RAN`, `START_NOW`.
pub(crate) const INIT_START: i32 = 4;
/// init → monitor: why execve failed; closed by a successful execve.
pub(crate) const INIT_EXEC_ERROR: i32 = 5;
/// A prepared init's control pipe (its plan's path, then `CGROUP_MADE`).
pub(crate) const INIT_CONTROL: i32 = 6;
/// A terminal init's socket for its terminal's master (never prepared, so
/// never with a control pipe).
pub(crate) const INIT_TERMINAL: i32 = 6;
