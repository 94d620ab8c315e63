//! The monitor's steady state. `nidus-monitor run` builds the container, then
//! execs this in place (same pid, so it stays the parent of the container's
//! init) with everything it needs on fixed descriptors (their numbers, the
//! argument order and the words are those of `src/wire/words.rs`, shared
//! with the std side):
//!
//!   3 control socket (listening, non-blocking)   4 signalfd for SIGCHLD
//!   5 stdout (or the terminal)   6 stderr (absent with a terminal)
//!   7 the log file (absent without one)   8 start pipe (write end)
//!   9 execve-error pipe (read end)   10 the run directory (O_PATH)
//!   11 the full monitor program (O_PATH)
//!   12 the container's stdin, write end (only held open, for attach)
//!
//! and argv `INIT_PID LOG_DIRECTORY RUN_DIR MEMORY_CGROUP LOG_RELATIVE`
//! (`-` for no log / no memory cgroup; the log file is LOG_RELATIVE below
//! LOG_DIRECTORY, opened beneath it). It copies output into the CRI log,
//! answers `start`, `reopen-log`, `attach` and `close-stdin`, and when the
//! init exits it drains the output and writes `exit.json` (OOMKilled when
//! the memory cgroup counted an OOM kill) — or, when execve had failed,
//! execs the program on fd 11 as `nidus-monitor finish RUN_DIR STATUS
//! FINISHED_AT_NS START_ERROR`, which writes a StartError record.
//!
//! `attach` (with one pipe per output stream passed as SCM_RIGHTS) adds an
//! attacher: every output chunk is also written, without blocking, to its
//! pipes, and the reply passes back the stdin write end and the terminal
//! when there are; `close-stdin` closes the stdin write end (stdin_once).
//! Nobody attached costs nothing but a small fixed table.
//!
//! No libc, no allocator: a few kilobytes of memory for the life of the
//! container.
#![no_std]
#![no_main]

#[path = "../../monitor/log.rs"]
mod log;
#[path = "sys.rs"]
mod sys;
#[path = "../../wire/words.rs"]
mod words;

use log::{LineSplitter, MAX_RECORD, Stream};
use words::{
    LOOP_CONTROL as CONTROL, LOOP_ERR as ERR, LOOP_EXEC_ERROR as EXEC_ERROR, LOOP_FINISH as FINISH, LOOP_LOG as LOG,
    LOOP_OUT as OUT, LOOP_RUN_DIR as RUN_DIR, LOOP_SIGNALS as SIGNALS, LOOP_START as START, LOOP_STDIN as STDIN,
    MAX_ATTACHERS,
};

const POLLIN: i16 = 1;
const POLLPRI: i16 = 2;
const F_DUPFD_CLOEXEC: usize = 1030;
/// The lowest number the OOM counter's descriptor may take.
const OOM_COUNTER_FD_MIN: usize = 64;
const POLLERR: i16 = 8;
const O_WRONLY: usize = 1;
const O_CREAT: usize = 0o100;
const O_TRUNC: usize = 0o1000;
const O_APPEND: usize = 0o2000;
const O_NONBLOCK: usize = 0o4000;
const O_CLOEXEC: usize = 0o2000000;
const O_DIRECTORY: usize = 0o200000;
const O_NOFOLLOW: usize = 0o400000;
const O_PATH: usize = 0o10000000;
const AT_FDCWD: isize = -100;
const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
const RESOLVE_NO_SYMLINKS: u64 = 0x04;
const RESOLVE_BENEATH: u64 = 0x08;

/// The argument of openat2 (struct open_how).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}
const F_GETFD: usize = 1;
const F_SETFL: usize = 4;
const AT_EMPTY_PATH: usize = 0x1000;
const PR_SET_DUMPABLE: usize = 4;

#[repr(C)]
struct PollFd {
    fd: i32,
    events: i16,
    revents: i16,
}

struct Output {
    fd: i32,
    open: bool,
    splitter: LineSplitter,
}

/// A byte string with a fixed capacity.
struct Text<const N: usize> {
    bytes: [u8; N],
    len: usize,
}

impl<const N: usize> Text<N> {
    const fn new() -> Self {
        Self { bytes: [0; N], len: 0 }
    }
    fn push(&mut self, data: &[u8]) {
        let take = data.len().min(N - self.len);
        self.bytes[self.len..self.len + take].copy_from_slice(&data[..take]);
        self.len += take;
    }
    fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

fn is_open(fd: i32) -> bool {
    // SAFETY: F_GETFD reads descriptor flags only.
    unsafe { sys::syscall(sys::FCNTL, fd as usize, F_GETFD, 0, 0) >= 0 }
}

struct Monitor<'a> {
    init_pid: i32,
    /// The pod's log directory and the log file's path below it; empty: no log.
    log_directory: &'a [u8],
    log_relative: &'a [u8],
    log_open: bool,
    outputs: [Output; 2],
    started: bool,
    start_error: Text<4096>,
    scratch: [u8; MAX_RECORD],
    /// A terminal on OUT (no separate stderr).
    tty: bool,
    /// Each attacher's pipes for stdout and stderr (-1: none).
    attachers: [[i32; 2]; MAX_ATTACHERS],
}

impl Monitor<'_> {
    fn write_log(&mut self, i: usize, data: &[u8]) {
        let now = sys::now();
        let log_open = self.log_open;
        let output = &mut self.outputs[i];
        output.splitter.feed(data, now, &mut self.scratch, &mut |record| {
            if log_open {
                sys::write_all(LOG, record);
            }
        });
    }

    /// Reads what one output has; false once it is at its end.
    fn pump(&mut self, i: usize) -> bool {
        let mut buf = [0u8; 64 * 1024];
        let n = sys::read(self.outputs[i].fd, &mut buf);
        if n == sys::EINTR || n == sys::EAGAIN {
            return true;
        }
        if n <= 0 {
            // 0: end of the pipe; EIO: a terminal whose last writer is gone.
            self.outputs[i].open = false;
            return false;
        }
        self.write_log(i, &buf[..n as usize]);
        self.copy_to_attachers(i, &buf[..n as usize]);
        true
    }

    /// Hands output to each attacher's pipe without waiting: a full pipe
    /// (a client that does not read) loses the chunk; a closed one ends the attacher.
    fn copy_to_attachers(&mut self, i: usize, data: &[u8]) {
        for pipes in self.attachers.iter_mut() {
            let fd = pipes[i];
            if fd < 0 {
                continue;
            }
            // SAFETY: data is a valid buffer of the length passed.
            let n = unsafe { sys::syscall(sys::WRITE, fd as usize, data.as_ptr() as usize, data.len(), 0) };
            if n < 0 && n != sys::EAGAIN && n != sys::EINTR {
                for end in pipes.iter_mut() {
                    if *end >= 0 {
                        sys::close(*end);
                        *end = -1;
                    }
                }
            }
        }
    }

    /// Ends the attachers whose client has gone (the read end of a pipe is
    /// closed: poll reports POLLERR), so that sessions that detached from a
    /// container writing nothing do not hold the slots.
    fn drop_gone_attachers(&mut self) {
        for pipes in self.attachers.iter_mut() {
            let gone = pipes.iter().filter(|fd| **fd >= 0).any(|fd| {
                let mut pfd = [PollFd { fd: *fd, events: 0, revents: 0 }];
                // SAFETY: pfd is a valid array of one pollfd; a zero timeout never blocks.
                let n = unsafe { sys::syscall(sys::POLL, pfd.as_mut_ptr() as usize, 1, 0, 0) };
                n > 0 && pfd[0].revents & POLLERR != 0
            });
            if gone {
                for end in pipes.iter_mut() {
                    if *end >= 0 {
                        sys::close(*end);
                        *end = -1;
                    }
                }
            }
        }
    }

    fn attach(&mut self, conn: i32, fds: [i32; 2]) {
        self.drop_gone_attachers();
        let Some(slot) = self.attachers.iter_mut().find(|pipes| pipes[0] < 0 && pipes[1] < 0) else {
            for fd in fds.into_iter().filter(|fd| *fd >= 0) {
                sys::close(fd);
            }
            refuse(conn, b"too many attachers");
            return;
        };
        *slot = fds;
        let mut passed = [-1i32; 2];
        let mut count = 0;
        let mut reply = Text::<32>::new();
        reply.push(words::OK);
        if is_open(STDIN) {
            reply.push(b" ");
            reply.push(words::PASSED_STDIN);
            passed[count] = STDIN;
            count += 1;
        }
        if self.tty {
            reply.push(b" ");
            reply.push(words::PASSED_TERMINAL);
            passed[count] = OUT;
            count += 1;
        }
        reply.push(b"\n");
        sys::send_with_fds(conn, reply.as_bytes(), &passed[..count]);
    }

    fn handle(&mut self, conn: i32) {
        // Give a slow or silent client 5 s, then drop it.
        let timeout: [i64; 2] = [5, 0];
        // SAFETY: timeout is a valid struct timeval (SOL_SOCKET 1, SO_RCVTIMEO 20).
        unsafe { sys::syscall6(sys::SETSOCKOPT, conn as usize, 1, 20, timeout.as_ptr() as usize, 16, 0) };
        let mut request = Text::<256>::new();
        let mut buf = [0u8; 256];
        let mut passed = [-1i32; 2];
        while !request.as_bytes().contains(&b'\n') && request.len < 256 {
            let (n, fds) = sys::recv_with_fds(conn, &mut buf);
            for fd in fds.into_iter().filter(|fd| *fd >= 0) {
                match passed.iter_mut().find(|slot| **slot < 0) {
                    Some(slot) => *slot = fd,
                    None => sys::close(fd),
                }
            }
            if n == sys::EINTR {
                continue;
            }
            if n <= 0 {
                break;
            }
            request.push(&buf[..n as usize]);
        }
        let line = request.as_bytes().split(|b| *b == b'\n').next().unwrap_or(&[]);
        match line {
            words::START => self.start(conn),
            words::REOPEN_LOG => self.reopen_log(conn),
            words::ATTACH if passed[0] >= 0 => {
                self.attach(conn, passed);
                passed = [-1; 2];
            }
            words::CLOSE_STDIN => {
                sys::close(STDIN);
                done(conn);
            }
            _ => refuse(conn, b"unknown request"),
        }
        for fd in passed.into_iter().filter(|fd| *fd >= 0) {
            sys::close(fd);
        }
        sys::close(conn);
    }

    fn start(&mut self, conn: i32) {
        if self.started {
            refuse(conn, b"the container was already started");
            return;
        }
        self.started = true;
        let released = sys::write_all(START, words::START_NOW);
        sys::close(START);
        if !released {
            refuse(conn, b"the container's init is gone");
            return;
        }
        let mut buf = [0u8; 1024];
        loop {
            let n = sys::read(EXEC_ERROR, &mut buf);
            if n == sys::EINTR {
                continue;
            }
            if n <= 0 {
                break;
            }
            self.start_error.push(&buf[..n as usize]);
        }
        sys::close(EXEC_ERROR);
        if self.start_error.len > 0 {
            refuse(conn, self.start_error.as_bytes());
            return;
        }
        let mut record = Text::<64>::new();
        let (secs, nanos) = sys::now();
        let mut digits = [0u8; 20];
        record.push(b"{\"started_at_ns\": ");
        record.push(sys::decimal(secs * 1_000_000_000 + nanos as u64, &mut digits));
        record.push(b"}");
        if write_atomically(b".tmp-started.json\0", b"started.json\0", record.as_bytes()) {
            done(conn);
        } else {
            refuse(conn, b"cannot record the start");
        }
    }

    fn reopen_log(&mut self, conn: i32) {
        if self.log_directory.is_empty() || self.log_relative.is_empty() {
            done(conn);
            return;
        }
        let fd = self.open_log_beneath();
        if fd < 0 {
            refuse(conn, b"cannot reopen the log file (missing, or behind a symbolic link)");
            return;
        }
        // SAFETY: dup3 onto our log descriptor number, then drop the original.
        unsafe { sys::syscall(sys::DUP3, fd as usize, LOG as usize, 0, 0) };
        sys::close(fd as i32);
        self.log_open = true;
        done(conn);
    }

    /// Opens the log file as the monitor first did (see linux/log_file.rs):
    /// the log directory without following a final symlink, then the file
    /// below it with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS); a
    /// negative errno on failure.
    fn open_log_beneath(&self) -> isize {
        let mut dir_path = Text::<4097>::new();
        dir_path.push(self.log_directory);
        dir_path.push(b"\0");
        // SAFETY: dir_path is NUL-terminated; integer flags only.
        let dir = unsafe {
            sys::syscall(
                sys::OPENAT,
                AT_FDCWD as usize,
                dir_path.as_bytes().as_ptr() as usize,
                O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC,
                0,
            )
        };
        if dir < 0 {
            return dir;
        }
        let mut relative = Text::<4097>::new();
        relative.push(self.log_relative);
        relative.push(b"\0");
        let how = OpenHow {
            flags: (O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC) as u64,
            mode: 0o640,
            resolve: RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
        };
        // SAFETY: relative is NUL-terminated; how is a valid open_how of the size passed.
        let fd = unsafe {
            sys::syscall(
                sys::OPENAT2,
                dir as usize,
                relative.as_bytes().as_ptr() as usize,
                &how as *const OpenHow as usize,
                core::mem::size_of::<OpenHow>(),
            )
        };
        sys::close(dir as i32);
        fd
    }

    /// The init's wait status once it has exited.
    fn reap(&self) -> Option<i32> {
        let mut status: i32 = 0;
        // SAFETY: status is a valid int; WNOHANG (1).
        let pid = unsafe { sys::syscall(sys::WAIT4, self.init_pid as usize, &mut status as *mut i32 as usize, 1, 0) };
        (pid == self.init_pid as isize).then_some(status)
    }
}

/// Replies `ok` to a request done.
fn done(conn: i32) {
    let mut reply = Text::<4>::new();
    reply.push(words::OK);
    reply.push(b"\n");
    sys::write_all(conn, reply.as_bytes());
}

/// Replies `error WHY` on one line (newlines in `why` become spaces).
fn refuse(conn: i32, why: &[u8]) {
    let mut reply = Text::<4200>::new();
    reply.push(words::ERROR);
    for b in why {
        reply.push(if *b == b'\n' { b" " } else { core::slice::from_ref(b) });
    }
    reply.push(b"\n");
    sys::write_all(conn, reply.as_bytes());
}

/// Writes `data` to TMP in the run directory and renames it to NAME (both NUL-terminated).
fn write_atomically(tmp: &[u8], name: &[u8], data: &[u8]) -> bool {
    // SAFETY: tmp is NUL-terminated; RUN_DIR is a directory descriptor.
    let fd = unsafe {
        sys::syscall(
            sys::OPENAT,
            RUN_DIR as usize,
            tmp.as_ptr() as usize,
            O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
            0o600,
        )
    };
    if fd < 0 {
        return false;
    }
    let written = sys::write_all(fd as i32, data);
    sys::close(fd as i32);
    // SAFETY: both names are NUL-terminated, relative to RUN_DIR.
    written
        && unsafe {
            sys::syscall(
                sys::RENAMEAT,
                RUN_DIR as usize,
                tmp.as_ptr() as usize,
                RUN_DIR as usize,
                name.as_ptr() as usize,
            )
        } == 0
}

/// The entry point: hands the initial stack pointer (argc, argv[..], NULL,
/// envp[..]) to `main` on a 16-byte aligned stack.
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn _start() -> ! {
    core::arch::naked_asm!("mov rdi, rsp", "and rsp, -16", "call {main}", "ud2", main = sym main)
}

/// # Safety
/// `stack` is the process's initial stack pointer.
unsafe extern "C" fn main(stack: *const usize) -> ! {
    // SAFETY: at entry the stack holds argc, then argv's pointers.
    let (argc, argv) = unsafe { (*stack, stack.add(1) as *const *const u8) };
    // Nothing of this process may be inspected from a container (exec
    // made it dumpable again).
    // SAFETY: prctl with integer arguments only.
    unsafe { sys::syscall(sys::PRCTL, PR_SET_DUMPABLE, 0, 0, 0) };
    if argc < words::LOOP_ARGC {
        sys::exit(2);
    }
    // SAFETY: argv holds argc NUL-terminated strings.
    let arg = |i: usize| unsafe { sys::cstr(*argv.add(i)) };
    let optional = |i: usize| if arg(i) == words::NONE { &[][..] } else { arg(i) };
    let Some(init_pid) = sys::parse_decimal(arg(words::ARG_INIT_PID)) else { sys::exit(2) };
    let log_directory = optional(words::ARG_LOG_DIRECTORY);
    let log_relative = optional(words::ARG_LOG_RELATIVE);
    let run_dir = arg(words::ARG_RUN_DIR);
    let memory_cgroup = optional(words::ARG_MEMORY_CGROUP);

    let mut monitor = Monitor {
        init_pid: init_pid as i32,
        log_directory,
        log_relative,
        log_open: is_open(LOG),
        outputs: [
            Output { fd: OUT, open: is_open(OUT), splitter: LineSplitter::new(Stream::Stdout) },
            Output { fd: ERR, open: is_open(ERR), splitter: LineSplitter::new(Stream::Stderr) },
        ],
        started: false,
        start_error: Text::new(),
        scratch: [0; MAX_RECORD],
        tty: is_open(OUT) && !is_open(ERR),
        attachers: [[-1; 2]; MAX_ATTACHERS],
    };

    // The OOM kill count, held open (opened once the fixed descriptors are
    // looked at, and moved above them): with the systemd driver the
    // scope's cgroup goes as soon as it is empty, maybe before the exit
    // record is written. v2 signals each change of memory.events
    // (POLLPRI); the count is also read at once when the init is reaped.
    let oom = open_oom_counter(memory_cgroup);
    let mut oom_killed = read_oom_kills(oom).unwrap_or(0);

    let status = loop {
        let mut fds = [
            PollFd { fd: CONTROL, events: POLLIN, revents: 0 },
            PollFd { fd: SIGNALS, events: POLLIN, revents: 0 },
            PollFd { fd: if monitor.outputs[0].open { OUT } else { -1 }, events: POLLIN, revents: 0 },
            PollFd { fd: if monitor.outputs[1].open { ERR } else { -1 }, events: POLLIN, revents: 0 },
            PollFd { fd: oom, events: POLLPRI, revents: 0 },
        ];
        // SAFETY: fds is a valid array of 5 pollfds; -1 blocks.
        let n = unsafe { sys::syscall(sys::POLL, fds.as_mut_ptr() as usize, 5, usize::MAX, 0) };
        if n < 0 {
            continue;
        }
        if fds[4].revents != 0 {
            // Reading it again also clears the event.
            oom_killed = oom_killed.max(read_oom_kills(oom).unwrap_or(0));
        }
        for i in 0..2 {
            if fds[2 + i].revents != 0 {
                monitor.pump(i);
            }
        }
        if fds[0].revents != 0 {
            loop {
                // SAFETY: accept4 on our listening socket, no peer address wanted.
                let conn = unsafe { sys::syscall(sys::ACCEPT4, CONTROL as usize, 0, 0, O_CLOEXEC) };
                if conn < 0 {
                    break;
                }
                monitor.handle(conn as i32);
            }
        }
        if fds[1].revents != 0 {
            let mut info = [0u8; 128];
            while sys::read(SIGNALS, &mut info) > 0 {}
            if let Some(status) = monitor.reap() {
                oom_killed = oom_killed.max(read_oom_kills(oom).unwrap_or(0));
                break status;
            }
        }
    };
    let finished_at = sys::now();

    // Take the rest of the output, briefly: a process the init left behind
    // may hold the pipes open.
    let deadline = finished_at.0 * 1_000 + finished_at.1 as u64 / 1_000_000 + 200;
    for i in 0..2 {
        if !monitor.outputs[i].open {
            continue;
        }
        // SAFETY: sets O_NONBLOCK on our own descriptor.
        unsafe { sys::syscall(sys::FCNTL, monitor.outputs[i].fd as usize, F_SETFL, O_NONBLOCK, 0) };
        loop {
            let (s, ns) = sys::now();
            if s * 1_000 + ns as u64 / 1_000_000 > deadline || !monitor.pump(i) {
                break;
            }
            let mut pfd = [PollFd { fd: monitor.outputs[i].fd, events: POLLIN, revents: 0 }];
            // SAFETY: one pollfd, 20 ms.
            if unsafe { sys::syscall(sys::POLL, pfd.as_mut_ptr() as usize, 1, 20, 0) } <= 0 {
                break;
            }
        }
    }
    let now = sys::now();
    for i in 0..2 {
        let log_open = monitor.log_open;
        monitor.outputs[i].splitter.finish(now, &mut monitor.scratch, &mut |record| {
            if log_open {
                sys::write_all(LOG, record);
            }
        });
    }

    // Attachers read end of file: the container's output is over.
    for pipes in monitor.attachers {
        for fd in pipes.into_iter().filter(|fd| *fd >= 0) {
            sys::close(fd);
        }
    }

    if monitor.start_error.len == 0 {
        write_exit_record(status, finished_at, oom_killed.max(read_oom_kills(oom).unwrap_or(0)));
        // SAFETY: the name is NUL-terminated, relative to RUN_DIR.
        unsafe { sys::syscall(sys::UNLINKAT, RUN_DIR as usize, b"monitor.sock\0".as_ptr() as usize, 0, 0) };
        sys::exit(0);
    }
    finish_start_error(status, finished_at, run_dir, monitor.start_error.as_bytes())
}

/// `exit.json` as `monitor::plan::ExitRecord` for an init that ran: exit code
/// (128 + signal when killed), the signal, when, and the reason kubelet shows.
fn write_exit_record(status: i32, finished_at: (u64, u32), oom_kills: u64) {
    let signal = status & 0x7f;
    let code = if signal == 0 { (status >> 8) & 0xff } else { 128 + signal };
    let reason: &[u8] = if oom_kills > 0 {
        b"OOMKilled"
    } else if code == 0 {
        b"Completed"
    } else {
        b"Error"
    };
    let mut digits = [0u8; 20];
    let mut json = Text::<256>::new();
    json.push(b"{\"exit_code\":");
    json.push(sys::decimal(code as u64, &mut digits));
    json.push(b",\"signal\":");
    if signal == 0 {
        json.push(b"null");
    } else {
        json.push(sys::decimal(signal as u64, &mut digits));
    }
    json.push(b",\"finished_at_ns\":");
    json.push(sys::decimal(finished_at.0 * 1_000_000_000 + finished_at.1 as u64, &mut digits));
    json.push(b",\"reason\":\"");
    json.push(reason);
    json.push(b"\",\"message\":\"\"}");
    write_atomically(b".tmp-exit.json\0", b"exit.json\0", json.as_bytes());
}

/// The file of the memory cgroup directory `dir` that counts its OOM kills
/// (v2 `memory.events`, v1 `memory.oom_control`), opened; -1 when there is
/// none (a poll then ignores it).
fn open_oom_counter(dir: &[u8]) -> i32 {
    if dir.is_empty() {
        return -1;
    }
    for file in [&b"/memory.events\0"[..], &b"/memory.oom_control\0"[..]] {
        let mut path = Text::<4200>::new();
        path.push(dir);
        path.push(file);
        // SAFETY: path is NUL-terminated.
        let fd = unsafe { sys::syscall(sys::OPEN, path.as_bytes().as_ptr() as usize, O_CLOEXEC, 0, 0) };
        if fd < 0 {
            continue;
        }
        // Above every fixed descriptor, so none is taken for a missing one.
        // SAFETY: fcntl on our own descriptor.
        let high = unsafe { sys::syscall(sys::FCNTL, fd as usize, F_DUPFD_CLOEXEC, OOM_COUNTER_FD_MIN, 0) };
        sys::close(fd as i32);
        return if high < 0 { -1 } else { high as i32 };
    }
    -1
}

/// The kernel's count of OOM kills in the open counter `fd` (its
/// `oom_kill` line); None when it cannot be read (the cgroup is gone).
fn read_oom_kills(fd: i32) -> Option<u64> {
    if fd < 0 {
        return None;
    }
    let mut buf = [0u8; 1024];
    let n = sys::read_at_start(fd, &mut buf);
    if n <= 0 {
        return None;
    }
    buf[..n as usize]
        .split(|b| *b == b'\n')
        .find_map(|line| line.strip_prefix(b"oom_kill "))
        .map(|count| sys::parse_decimal(count).unwrap_or(0))
}

/// Execs `nidus-monitor finish` (fd 11) for the StartError record, whose
/// message needs JSON escaping the full program does.
fn finish_start_error(status: i32, finished_at: (u64, u32), run_dir: &[u8], start_error: &[u8]) -> ! {
    let mut status_word = Text::<32>::new();
    let mut digits = [0u8; 20];
    if status & 0x7f == 0 {
        status_word.push(words::EXITED);
        status_word.push(sys::decimal(((status >> 8) & 0xff) as u64, &mut digits));
    } else {
        status_word.push(words::SIGNALED);
        status_word.push(sys::decimal((status & 0x7f) as u64, &mut digits));
    }
    status_word.push(b"\0");
    let mut finished_ns = Text::<24>::new();
    finished_ns.push(sys::decimal(finished_at.0 * 1_000_000_000 + finished_at.1 as u64, &mut digits));
    finished_ns.push(b"\0");
    let mut dir = Text::<4097>::new();
    dir.push(run_dir);
    dir.push(b"\0");
    let mut error = Text::<4098>::new();
    error.push(start_error);
    error.push(b"\0");
    for fd in [CONTROL, SIGNALS, OUT, ERR, LOG, START, EXEC_ERROR, RUN_DIR] {
        sys::close(fd);
    }
    let mut finish = Text::<16>::new();
    finish.push(words::FINISH_COMMAND);
    finish.push(b"\0");
    let args: [*const u8; 7] = [
        b"nidus-monitor\0".as_ptr(),
        finish.as_bytes().as_ptr(),
        dir.as_bytes().as_ptr(),
        status_word.as_bytes().as_ptr(),
        finished_ns.as_bytes().as_ptr(),
        error.as_bytes().as_ptr(),
        core::ptr::null(),
    ];
    let env: [*const u8; 1] = [core::ptr::null()];
    // SAFETY: args and env are null-terminated arrays of NUL-terminated
    // strings; the path is empty with AT_EMPTY_PATH (exec fd 11 itself).
    unsafe {
        sys::syscall6(
            sys::EXECVEAT,
            FINISH as usize,
            b"\0".as_ptr() as usize,
            args.as_ptr() as usize,
            env.as_ptr() as usize,
            AT_EMPTY_PATH,
            0,
        )
    };
    sys::exit(127)
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    sys::exit(1)
}
