//! The pause process's steady state: after `nidus-pause` has built the pod's
//! namespaces and dropped everything, it execs this (same pid, PID 1 of the
//! pod's PID namespace when it has one): exit on SIGTERM/SIGINT, reap every
//! child that is orphaned to it, sleep otherwise. A few kilobytes of memory.
#![no_std]
#![no_main]

#[path = "sys.rs"]
mod sys;

extern "C" fn exit_now(_: i32) {
    sys::exit(0)
}

extern "C" fn child_exited(_: i32) {}

#[unsafe(no_mangle)]
pub extern "C" fn _start() -> ! {
    // Exec made the process dumpable again: containers sharing the pod's PID
    // namespace must not reach anything through /proc/1.
    // SAFETY: prctl(PR_SET_DUMPABLE, 0) takes integers only.
    unsafe { sys::syscall(sys::PRCTL, 4, 0, 0, 0) };
    sys::sigaction(15, exit_now, 0);
    sys::sigaction(2, exit_now, 0);
    sys::sigaction(17, child_exited, sys::SA_NOCLDSTOP);
    // SIGCHLD stays blocked but in sigsuspend, so no exit slips between
    // the last wait and the sleep.
    let chld: u64 = 1 << (17 - 1);
    let none: u64 = 0;
    // SAFETY: masks are valid 8-byte sigsets.
    unsafe { sys::syscall(sys::RT_SIGPROCMASK, 0, &chld as *const u64 as usize, 0, 8) };
    loop {
        loop {
            let mut status: i32 = 0;
            // SAFETY: status is a valid int; WNOHANG (1).
            let pid = unsafe { sys::syscall(sys::WAIT4, usize::MAX, &mut status as *mut i32 as usize, 1, 0) };
            if pid <= 0 {
                break;
            }
        }
        // SAFETY: none is a valid 8-byte sigset.
        unsafe { sys::syscall(sys::RT_SIGSUSPEND, &none as *const u64 as usize, 8, 0, 0) };
    }
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    sys::exit(1)
}
