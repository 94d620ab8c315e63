//! The wire between the daemon and its helpers — a container's monitor, a
//! pod's pause launcher — and between a monitor and its container's init:
//! every message any of them says to another, as a Rust type with its
//! encoding and decoding. A message is one line (its newline not included)
//! on a helper's stdin or stdout or on the monitor's control socket, or all
//! a pipe carried until its end (an init's or a pause's report). Who says
//! what on which channel, step by step, is in docs/design.md ("The words
//! between daemon, monitor and init").
//!
//! The words themselves, the descriptor numbers each helper is handed and
//! the order of the monitor loop's arguments are plain constants in
//! `words.rs`, which the `no_std` tiny monitor loop includes too: each is
//! written once, there.

use std::os::fd::RawFd;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub mod words;

/// Why a message could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("expected {expected}, received {received:?}")]
    UnexpectedMessage { expected: &'static str, received: String },
    #[error("bad {what}: {reason}")]
    Json { what: &'static str, reason: String },
}

/// One message: its text, and the text back to it.
pub trait Message: Sized {
    /// What a decoder of it expects, for `WireError::UnexpectedMessage`.
    const EXPECTED: &'static str;
    fn encode(&self) -> String;
    fn decode(text: &str) -> Result<Self, WireError>;
}

/// A word of `words` as text (they are all ASCII).
const fn text(word: &'static [u8]) -> &'static str {
    match std::str::from_utf8(word) {
        Ok(text) => text,
        Err(_) => "",
    }
}

fn unexpected<T: Message>(received: &str) -> WireError {
    WireError::UnexpectedMessage { expected: T::EXPECTED, received: received.to_string() }
}

/// A message that is JSON on one line; an error for paths that are not UTF-8.
fn json(message: &impl serde::Serialize, what: &'static str) -> Result<String, WireError> {
    serde_json::to_string(message).map_err(|e| WireError::Json { what, reason: e.to_string() })
}

/// The word of `value` in a table of an enum's words.
fn word_of<T: PartialEq>(table: &[(T, &'static [u8])], value: T) -> String {
    table.iter().find(|(v, _)| *v == value).map_or("", |(_, word)| text(word)).to_string()
}

/// The value whose word `word` is (from `received`, for the error).
fn one_of<T: Message + Copy>(table: &[(T, &'static [u8])], word: &str, received: &str) -> Result<T, WireError> {
    table.iter().find(|(_, w)| *w == word.as_bytes()).map(|(v, _)| *v).ok_or_else(|| unexpected::<T>(received))
}

/// A message that is one fixed word.
macro_rules! word_message {
    ($(#[$doc:meta])* $name:ident, $word:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub(crate) struct $name;

        impl Message for $name {
            const EXPECTED: &'static str = text($word);
            fn encode(&self) -> String {
                text($word).to_string()
            }
            fn decode(received: &str) -> Result<Self, WireError> {
                if received.as_bytes() == $word {
                    Ok($name)
                } else {
                    Err(unexpected::<Self>(received))
                }
            }
        }
    };
}

/// What a helper answers: what it was asked for, or `error MESSAGE`. On a
/// line, the message's newlines become spaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer<T> {
    Done(T),
    Refused(String),
}

impl<T: Message> Message for Answer<T> {
    const EXPECTED: &'static str = T::EXPECTED;

    fn encode(&self) -> String {
        match self {
            Answer::Done(done) => done.encode(),
            Answer::Refused(why) => format!("{}{}", text(words::ERROR), why.replace('\n', " ")),
        }
    }

    fn decode(received: &str) -> Result<Self, WireError> {
        match received.strip_prefix(text(words::ERROR)) {
            Some(why) => Ok(Answer::Refused(why.to_string())),
            None => T::decode(received).map(Answer::Done),
        }
    }
}

impl<T> Answer<T> {}

impl<T> From<Result<T, String>> for Answer<T> {
    fn from(result: Result<T, String>) -> Self {
        match result {
            Ok(done) => Answer::Done(done),
            Err(why) => Answer::Refused(why),
        }
    }
}

// ---- daemon ↔ monitor, on the monitor's stdin and stdout ------------------

word_message!(
    /// monitor → daemon: settled in a directory of its own, its init forked
    /// ahead; it waits for its assignment.
    Settled,
    words::SETTLED
);

/// The first line a monitor reads (JSON): the container it is to build.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct MonitorAssignment {
    /// The container's run directory (plan.json comes there before `go`).
    pub(crate) run_dir: PathBuf,
    /// The bundle: its `config.json` is complete once the daemon says `spec`.
    pub(crate) bundle: PathBuf,
    /// `cgroup.procs` of the pod's sandbox cgroup, in every hierarchy: the
    /// monitor joins it while the init builds.
    pub(crate) pod_cgroup_procs: Vec<PathBuf>,
    /// The systemd driver starts the container's scope around the monitor:
    /// it then joins the pod's cgroup only once the init is in the scope
    /// (built, or restored), so the scope is never empty (systemd would
    /// stop it).
    #[serde(default)]
    pub(crate) join_once_built: bool,
}

impl Message for MonitorAssignment {
    const EXPECTED: &'static str = "assignment";

    /// daemon → monitor, first line: the container it is to build (JSON).
    /// Empty for paths JSON cannot carry (`try_encode` says why).
    fn encode(&self) -> String {
        self.try_encode().unwrap_or_default()
    }

    fn decode(received: &str) -> Result<Self, WireError> {
        serde_json::from_str(received).map_err(|e| WireError::Json { what: Self::EXPECTED, reason: e.to_string() })
    }
}

impl MonitorAssignment {
    /// The line, or why its paths cannot be one (not UTF-8).
    pub(crate) fn try_encode(&self) -> Result<String, WireError> {
        json(self, Self::EXPECTED)
    }
}

/// daemon → monitor, after the assignment: `plan` once config.json and
/// plan.json are written, then `go` once the container cgroup is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BuildStep {
    Plan,
    Go,
}

impl BuildStep {
    const WORDS: &'static [(Self, &'static [u8])] = &[(BuildStep::Plan, words::PLAN), (BuildStep::Go, words::GO)];
}

impl Message for BuildStep {
    const EXPECTED: &'static str = "plan or go";

    fn encode(&self) -> String {
        word_of(Self::WORDS, *self)
    }

    fn decode(received: &str) -> Result<Self, WireError> {
        one_of(Self::WORDS, received, received)
    }
}

/// How the container's init came to be in its cgroup.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum CgroupJoin {
    /// Born there: clone3 with CLONE_INTO_CGROUP (cgroup v2).
    Clone3,
    /// Forked in the monitor's cgroup, then wrote itself into `cgroup.procs`.
    Procs,
}

impl CgroupJoin {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            CgroupJoin::Clone3 => "clone3",
            CgroupJoin::Procs => "procs",
        }
    }

    pub(crate) fn parse(word: &str) -> Option<Self> {
        match word {
            "clone3" => Some(CgroupJoin::Clone3),
            "procs" => Some(CgroupJoin::Procs),
            _ => None,
        }
    }
}

/// monitor → daemon: the container is built (its init waits for
/// StartContainer): `created PID STARTTIME JOIN BUILD_US SETTLE_US GO_WAIT_US`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Created {
    pub(crate) pid: i32,
    pub(crate) start_time: u64,
    /// How the init came into its cgroup (None: a word this daemon does not know).
    pub(crate) cgroup_join: Option<CgroupJoin>,
    pub(crate) timings: Option<CreateTimings>,
}

/// How long the monitor took, for the create timings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CreateTimings {
    /// The build after `go`.
    pub(crate) build_us: u64,
    /// Settling into the assignment.
    pub(crate) settle_us: u64,
    /// Waiting for `go`, the plan's (or spec's) read included.
    pub(crate) go_wait_us: u64,
}

impl Message for Created {
    const EXPECTED: &'static str = "created PID STARTTIME JOIN BUILD_US SETTLE_US GO_WAIT_US";

    fn encode(&self) -> String {
        let join = self.cgroup_join.map_or(text(words::NONE), CgroupJoin::as_str);
        let mut line = format!("{} {} {} {join}", text(words::CREATED), self.pid, self.start_time);
        if let Some(t) = self.timings {
            line.push_str(&format!(" {} {} {}", t.build_us, t.settle_us, t.go_wait_us));
        }
        line
    }

    fn decode(received: &str) -> Result<Self, WireError> {
        let mut parts = received.split(' ');
        if parts.next().map(str::as_bytes) != Some(words::CREATED) {
            return Err(unexpected::<Self>(received));
        }
        let (Some(Ok(pid)), Some(Ok(start_time))) = (parts.next().map(str::parse), parts.next().map(str::parse)) else {
            return Err(unexpected::<Self>(received));
        };
        let cgroup_join = parts.next().and_then(CgroupJoin::parse);
        let mut number = || parts.next().and_then(|n| n.parse().ok());
        let timings = match (number(), number(), number()) {
            (Some(build_us), Some(settle_us), Some(go_wait_us)) => {
                Some(CreateTimings { build_us, settle_us, go_wait_us })
            }
            _ => None,
        };
        Ok(Created { pid, start_time, cgroup_join, timings })
    }
}

// ---- daemon ↔ pause launcher, on the launcher's stdin and stdout ----------

word_message!(
    /// daemon → pause launcher: the pod's cgroups are made, build it.
    Go,
    words::GO
);

/// pause launcher → daemon, its last act: `ok PID STARTTIME` of the pause it leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PauseStarted {
    pub(crate) pid: i32,
    pub(crate) start_time: u64,
}

impl Message for PauseStarted {
    const EXPECTED: &'static str = "ok PID STARTTIME";

    fn encode(&self) -> String {
        format!("{} {} {}", text(words::OK), self.pid, self.start_time)
    }

    fn decode(received: &str) -> Result<Self, WireError> {
        let mut parts = received.split(' ');
        if parts.next().map(str::as_bytes) != Some(words::OK) {
            return Err(unexpected::<Self>(received));
        }
        match (parts.next().map(str::parse), parts.next().map(str::parse)) {
            (Some(Ok(pid)), Some(Ok(start_time))) => Ok(PauseStarted { pid, start_time }),
            _ => Err(unexpected::<Self>(received)),
        }
    }
}

// ---- init → monitor, pause → launcher: the report pipe --------------------

word_message!(
    /// A container's init (ready pipe) or a pod's pause (report pipe): built,
    /// and waiting. The whole of what the pipe carries, no newline.
    Built,
    words::OK
);

// ---- monitor → prepared init, on its control pipe -------------------------

/// The path of the plan a prepared init is to build (one JSON line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PlanPath(pub(crate) PathBuf);

impl Message for PlanPath {
    const EXPECTED: &'static str = "plan path from the monitor";

    /// Empty for a path JSON cannot carry (`try_encode` says why).
    fn encode(&self) -> String {
        self.try_encode().unwrap_or_default()
    }

    fn decode(received: &str) -> Result<Self, WireError> {
        serde_json::from_str(received)
            .map(PlanPath)
            .map_err(|e| WireError::Json { what: Self::EXPECTED, reason: e.to_string() })
    }
}

impl PlanPath {
    /// The line, or why the path cannot be one (not UTF-8).
    pub(crate) fn try_encode(&self) -> Result<String, WireError> {
        json(&self.0, Self::EXPECTED)
    }
}

word_message!(
    /// monitor → prepared init: the container cgroup is made; join it.
    CgroupMade,
    words::CGROUP_MADE
);

// ---- daemon → monitor, on its control socket ------------------------------

/// Requests the daemon sends a monitor, one line per connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Request {
    /// Release the init to execve (StartContainer).
    Start,
    /// Reopen the log file (ReopenContainerLog, after kubelet rotated it).
    ReopenLog,
    /// Close the container's stdin (an attach with stdin_once ended).
    CloseStdin,
    /// Add an attacher (its output pipes passed along, SCM_RIGHTS).
    Attach,
}

impl Request {
    const WORDS: &'static [(Self, &'static [u8])] = &[
        (Request::Start, words::START),
        (Request::ReopenLog, words::REOPEN_LOG),
        (Request::CloseStdin, words::CLOSE_STDIN),
        (Request::Attach, words::ATTACH),
    ];
}

impl Message for Request {
    const EXPECTED: &'static str = "start, reopen-log, close-stdin or attach";

    fn encode(&self) -> String {
        word_of(Self::WORDS, *self)
    }

    /// Blanks around the word do not count.
    fn decode(received: &str) -> Result<Self, WireError> {
        one_of(Self::WORDS, received.trim(), received)
    }
}

/// monitor → daemon, a request done: `ok`, followed for `attach` by a word
/// for each descriptor passed back with the reply, in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Passed {
    /// The container's stdin write end.
    pub(crate) stdin: bool,
    /// The container's terminal.
    pub(crate) terminal: bool,
}

impl Message for Passed {
    const EXPECTED: &'static str = "ok [stdin] [tty]";

    fn encode(&self) -> String {
        let mut line = text(words::OK).to_string();
        for (passed, word) in [(self.stdin, words::PASSED_STDIN), (self.terminal, words::PASSED_TERMINAL)] {
            if passed {
                line.push(' ');
                line.push_str(text(word));
            }
        }
        line
    }

    /// Words it does not know are passed over.
    fn decode(received: &str) -> Result<Self, WireError> {
        let mut parts = received.split_whitespace();
        if parts.next().map(str::as_bytes) != Some(words::OK) {
            return Err(unexpected::<Self>(received));
        }
        let mut passed = Passed::default();
        for word in parts {
            match word.as_bytes() {
                words::PASSED_STDIN => passed.stdin = true,
                words::PASSED_TERMINAL => passed.terminal = true,
                _ => {}
            }
        }
        Ok(passed)
    }
}

// ---- monitor → the tiny monitor loop, and back ----------------------------

/// The descriptors the monitor loop is handed, by number (`words::LOOP_*`):
/// `as_slice()[i]` becomes descriptor `LOOP_FIRST_FD + i`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LoopDescriptors([Option<RawFd>; words::LOOP_FDS]);

impl Default for LoopDescriptors {
    fn default() -> Self {
        Self([None; words::LOOP_FDS])
    }
}

impl LoopDescriptors {
    /// Hands `fd` over as descriptor `number`, one of `words::LOOP_*`.
    pub(crate) fn set(&mut self, number: i32, fd: Option<RawFd>) -> &mut Self {
        let slot = usize::try_from(number - words::LOOP_FIRST_FD).ok().and_then(|i| self.0.get_mut(i));
        if let Some(slot) = slot {
            *slot = fd;
        }
        self
    }

    pub(crate) fn as_slice(&self) -> &[Option<RawFd>] {
        &self.0
    }
}

/// The monitor loop's arguments after its name (see `words::ARG_*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LoopArgs<'a> {
    pub(crate) init_pid: i32,
    pub(crate) log_directory: Option<&'a str>,
    pub(crate) run_dir: &'a str,
    pub(crate) memory_cgroup: Option<&'a str>,
    pub(crate) log_relative: Option<&'a str>,
}

impl LoopArgs<'_> {
    pub(crate) fn encode(&self) -> Vec<String> {
        let mut argv = vec![String::new(); words::LOOP_ARGC - 1];
        let none = text(words::NONE);
        for (index, value) in [
            (words::ARG_INIT_PID, self.init_pid.to_string()),
            (words::ARG_LOG_DIRECTORY, self.log_directory.unwrap_or(none).to_string()),
            (words::ARG_RUN_DIR, self.run_dir.to_string()),
            (words::ARG_MEMORY_CGROUP, self.memory_cgroup.unwrap_or(none).to_string()),
            (words::ARG_LOG_RELATIVE, self.log_relative.unwrap_or(none).to_string()),
        ] {
            if let Some(slot) = argv.get_mut(index - 1) {
                *slot = value;
            }
        }
        argv
    }
}

/// How the init ended, as the monitor loop tells `nidus-monitor finish`:
/// `exited:N` / `signaled:N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    Exited(i32),
    Signaled(i32),
}

impl Message for Ended {
    const EXPECTED: &'static str = "exited:N or signaled:N";

    fn encode(&self) -> String {
        match self {
            Ended::Exited(n) => format!("{}{n}", text(words::EXITED)),
            Ended::Signaled(n) => format!("{}{n}", text(words::SIGNALED)),
        }
    }

    fn decode(received: &str) -> Result<Self, WireError> {
        let number = |rest: &str| rest.parse::<i32>().map_err(|_| unexpected::<Self>(received));
        if let Some(rest) = received.strip_prefix(text(words::EXITED)) {
            return number(rest).map(Ended::Exited);
        }
        match received.strip_prefix(text(words::SIGNALED)) {
            Some(rest) => number(rest).map(Ended::Signaled),
            None => Err(unexpected::<Self>(received)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip<T: Message + PartialEq + std::fmt::Debug>(message: T) {
        let encoded = message.encode();
        assert!(!encoded.contains('\n'), "{encoded:?} is one line");
        assert_eq!(T::decode(&encoded), Ok(message), "{encoded:?}");
    }

    fn refuses<T: Message + std::fmt::Debug>(received: &str) {
        match T::decode(received) {
            Err(WireError::UnexpectedMessage { expected, received: r }) => {
                assert_eq!(expected, T::EXPECTED);
                assert_eq!(r, received);
            }
            other => panic!("{received:?} decoded as {other:?}"),
        }
    }

    #[test]
    fn the_monitor_s_stdout_round_trips() {
        round_trip(Settled);
        round_trip(Answer::<Settled>::Refused("setsid: EPERM".into()));
        let timings = CreateTimings { build_us: 1234, settle_us: 56, go_wait_us: 789 };
        for cgroup_join in [Some(CgroupJoin::Clone3), Some(CgroupJoin::Procs)] {
            round_trip(Created { pid: 42, start_time: 1_000_000, cgroup_join, timings: Some(timings) });
            round_trip(Answer::Done(Created { pid: 7, start_time: 9, cgroup_join, timings: None }));
        }
        round_trip(Created { pid: 1, start_time: 2, cgroup_join: None, timings: None });
        round_trip(Answer::<Created>::Refused("cannot open the log: ENOENT".into()));
        assert_eq!(
            Created::decode("created 42 1000 clone3 10 20 30"),
            Ok(Created {
                pid: 42,
                start_time: 1000,
                cgroup_join: Some(CgroupJoin::Clone3),
                timings: Some(CreateTimings { build_us: 10, settle_us: 20, go_wait_us: 30 }),
            })
        );
    }

    #[test]
    fn the_monitor_s_stdin_round_trips() {
        round_trip(BuildStep::Plan);
        round_trip(BuildStep::Go);
        round_trip(MonitorAssignment {
            run_dir: "/run/nidus/containers/abc".into(),
            bundle: "/var/lib/nidus/containers/abc".into(),
            pod_cgroup_procs: vec!["/sys/fs/cgroup/pod/cgroup.procs".into()],
            join_once_built: true,
        });
        assert!(matches!(MonitorAssignment::decode("{\"run_dir\":"), Err(WireError::Json { .. })));
        assert!(MonitorAssignment::decode("plan").unwrap_err().to_string().starts_with("bad assignment: "));
    }

    #[test]
    fn the_launcher_s_words_round_trip() {
        round_trip(Go);
        round_trip(PauseStarted { pid: 4242, start_time: 987_654 });
        round_trip(Answer::<PauseStarted>::Refused("cannot join cgroup /x: EACCES".into()));
        assert_eq!(
            Answer::<PauseStarted>::decode("ok 12 34"),
            Ok(Answer::Done(PauseStarted { pid: 12, start_time: 34 }))
        );
    }

    #[test]
    fn the_init_s_words_round_trip() {
        round_trip(Built);
        round_trip(Answer::<Built>::Refused("mount /proc: EPERM".into()));
        round_trip(CgroupMade);
        round_trip(PlanPath("/run/nidus/containers/a b/plan.json".into()));
        round_trip(PlanPath("/odd\n\"path\"".into()));
        assert_eq!(
            PlanPath::decode("not json").unwrap_err().to_string().split(':').next(),
            Some("bad plan path from the monitor")
        );
    }

    #[test]
    fn control_requests_and_replies_round_trip() {
        for request in [Request::Start, Request::ReopenLog, Request::CloseStdin, Request::Attach] {
            round_trip(request);
        }
        assert_eq!(Request::decode("start\n"), Ok(Request::Start));
        for stdin in [false, true] {
            for terminal in [false, true] {
                round_trip(Passed { stdin, terminal });
                round_trip(Answer::Done(Passed { stdin, terminal }));
            }
        }
        assert_eq!(Passed::decode("ok tty"), Ok(Passed { stdin: false, terminal: true }));
        assert_eq!(Passed::decode("ok stdin later"), Ok(Passed { stdin: true, terminal: false }));
        round_trip(Answer::<Passed>::Refused("the container was already started".into()));
    }

    #[test]
    fn a_refusal_stays_on_its_line() {
        let refusal = Answer::<Passed>::Refused("exec: \"x\":\nnot found".into());
        assert_eq!(refusal.encode(), "error exec: \"x\": not found");
        assert_eq!(Answer::<Passed>::decode(&refusal.encode()), Ok(Answer::Refused("exec: \"x\": not found".into())));
        assert_eq!(Answer::<Built>::decode("error "), Ok(Answer::Refused(String::new())));
    }

    #[test]
    fn malformed_input_is_a_typed_error() {
        for bad in ["", "settle", "settled ", "Settled", "error"] {
            refuses::<Settled>(bad);
        }
        for bad in ["", "created", "created x 1", "created 1", "created 1 -2", "ok 1 2", "created 99999999999 1"] {
            refuses::<Created>(bad);
            refuses::<Answer<Created>>(bad);
        }
        for bad in ["", "ok", "ok 1", "ok x 2", "ok 1 y", "okay 1 2", "created 1 2"] {
            refuses::<PauseStarted>(bad);
        }
        for bad in ["", "go ", "GO", "goo", "plan"] {
            refuses::<Go>(bad);
        }
        for bad in ["", "plans", "go go"] {
            refuses::<BuildStep>(bad);
        }
        for bad in ["", "ok\n", "okay", "hooks\n", "error"] {
            refuses::<Built>(bad);
        }
        for bad in ["", "cgroups", "cgroup\n"] {
            refuses::<CgroupMade>(bad);
        }
        for bad in ["", "stop", "attach me", "start start"] {
            refuses::<Request>(bad);
        }
        for bad in ["", "okay", "stdin ok", "error"] {
            refuses::<Passed>(bad);
        }
        for bad in ["", "exited", "exited:", "exited:x", "stopped:1", "signaled:-", "signaled:1:2"] {
            refuses::<Ended>(bad);
        }
        assert!(matches!(PlanPath::decode(""), Err(WireError::Json { .. })));
        assert_eq!(Settled::decode("x").unwrap_err().to_string(), "expected settled, received \"x\"");
        // Not UTF-8 safe bytes, long input: still an error, never a panic.
        let long = "created ".repeat(10_000);
        refuses::<Created>(&long);
        refuses::<Request>("\u{fffd}\u{0}");
    }

    #[test]
    fn the_loop_s_status_words_round_trip() {
        for ended in [Ended::Exited(0), Ended::Exited(137), Ended::Signaled(9)] {
            round_trip(ended);
        }
        assert_eq!(Ended::decode("exited:0"), Ok(Ended::Exited(0)));
        assert_eq!(Ended::decode("signaled:9"), Ok(Ended::Signaled(9)));
    }

    #[test]
    fn the_loop_s_descriptors_and_arguments_are_numbered_by_the_words() {
        let mut fds = LoopDescriptors::default();
        fds.set(words::LOOP_CONTROL, Some(40)).set(words::LOOP_STDIN, Some(41)).set(words::LOOP_ERR, None);
        // Out of the contract: ignored.
        fds.set(2, Some(99)).set(words::LOOP_FIRST_FD + words::LOOP_FDS as i32, Some(99));
        let slice = fds.as_slice();
        assert_eq!(slice.len(), words::LOOP_FDS);
        assert_eq!(slice[0], Some(40));
        assert_eq!(slice[(words::LOOP_STDIN - words::LOOP_FIRST_FD) as usize], Some(41));
        assert_eq!(slice.iter().flatten().count(), 2);
        // The numbers are the ones 3… in order, each once.
        let numbers = [
            words::LOOP_CONTROL,
            words::LOOP_SIGNALS,
            words::LOOP_OUT,
            words::LOOP_ERR,
            words::LOOP_LOG,
            words::LOOP_START,
            words::LOOP_EXEC_ERROR,
            words::LOOP_RUN_DIR,
            words::LOOP_FINISH,
            words::LOOP_STDIN,
        ];
        let expected: Vec<i32> = (words::LOOP_FIRST_FD..).take(words::LOOP_FDS).collect();
        assert_eq!(numbers.to_vec(), expected);

        let args = LoopArgs {
            init_pid: 77,
            log_directory: Some("/var/log/pods/p"),
            run_dir: "/run/nidus/c",
            memory_cgroup: None,
            log_relative: Some("c/0.log"),
        };
        let argv = args.encode();
        assert_eq!(argv.len(), words::LOOP_ARGC - 1);
        assert_eq!(argv[words::ARG_INIT_PID - 1], "77");
        assert_eq!(argv[words::ARG_LOG_DIRECTORY - 1], "/var/log/pods/p");
        assert_eq!(argv[words::ARG_RUN_DIR - 1], "/run/nidus/c");
        assert_eq!(argv[words::ARG_MEMORY_CGROUP - 1], "-");
        assert_eq!(argv[words::ARG_LOG_RELATIVE - 1], "c/0.log");
    }
}
