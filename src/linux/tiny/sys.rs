//! Raw Linux system calls for the tiny steady-state programs (x86_64): no
//! libc, no std, no allocator. Every function here is a thin wrapper.

use core::arch::asm;

pub const READ: usize = 0;
pub const PREAD64: usize = 17;
pub const WRITE: usize = 1;
pub const OPEN: usize = 2;
pub const CLOSE: usize = 3;
pub const POLL: usize = 7;
pub const RT_SIGACTION: usize = 13;
pub const RT_SIGPROCMASK: usize = 14;
pub const FCNTL: usize = 72;
pub const ACCEPT4: usize = 288;
pub const SETSOCKOPT: usize = 54;
pub const EXECVE: usize = 59;
pub const EXIT_GROUP: usize = 231;
pub const WAIT4: usize = 61;
pub const DUP3: usize = 292;
pub const OPENAT: usize = 257;
pub const OPENAT2: usize = 437;
pub const RENAMEAT: usize = 264;
pub const CLOCK_GETTIME: usize = 228;
pub const RT_SIGSUSPEND: usize = 130;
pub const PRCTL: usize = 157;
pub const EXECVEAT: usize = 322;
pub const UNLINKAT: usize = 263;
pub const SENDMSG: usize = 46;
pub const RECVMSG: usize = 47;

pub const EINTR: isize = -4;
pub const EAGAIN: isize = -11;

/// # Safety
/// The caller passes arguments valid for system call `n`.
#[inline(always)]
pub unsafe fn syscall6(n: usize, a: usize, b: usize, c: usize, d: usize, e: usize, f: usize) -> isize {
    let ret: isize;
    // SAFETY: the syscall instruction with the kernel's x86_64 calling
    // convention; the caller vouches for the arguments.
    unsafe {
        asm!("syscall", inlateout("rax") n as isize => ret, in("rdi") a, in("rsi") b, in("rdx") c,
             in("r10") d, in("r8") e, in("r9") f, lateout("rcx") _, lateout("r11") _, options(nostack));
    }
    ret
}

/// # Safety
/// As for `syscall6`.
#[inline(always)]
pub unsafe fn syscall(n: usize, a: usize, b: usize, c: usize, d: usize) -> isize {
    // SAFETY: forwarded.
    unsafe { syscall6(n, a, b, c, d, 0, 0) }
}

pub fn exit(code: i32) -> ! {
    // SAFETY: exit_group takes a status and never returns.
    unsafe { syscall(EXIT_GROUP, code as usize, 0, 0, 0) };
    loop {}
}

/// Writes all of `data` to `fd`, retrying short writes and EINTR.
pub fn write_all(fd: i32, mut data: &[u8]) -> bool {
    while !data.is_empty() {
        // SAFETY: data is a valid buffer of the length passed.
        let n = unsafe { syscall(WRITE, fd as usize, data.as_ptr() as usize, data.len(), 0) };
        if n == EINTR {
            continue;
        }
        if n <= 0 {
            return false;
        }
        data = &data[n as usize..];
    }
    true
}

pub fn read(fd: i32, buf: &mut [u8]) -> isize {
    // SAFETY: buf is a valid, writable buffer of the length passed.
    unsafe { syscall(READ, fd as usize, buf.as_mut_ptr() as usize, buf.len(), 0) }
}

/// Reads from offset 0 of `fd` (a file whose contents are made at each read, such as a cgroup's).
pub fn read_at_start(fd: i32, buf: &mut [u8]) -> isize {
    // SAFETY: buf is a valid, writable buffer of the length passed.
    unsafe { syscall(PREAD64, fd as usize, buf.as_mut_ptr() as usize, buf.len(), 0) }
}

/// The kernel's struct iovec.
#[repr(C)]
pub struct IoVec {
    pub base: usize,
    pub len: usize,
}

/// The kernel's struct msghdr (x86_64 layout).
#[repr(C)]
pub struct MsgHdr {
    pub name: usize,
    pub name_len: u32,
    pub iov: usize,
    pub iov_len: usize,
    pub control: usize,
    pub control_len: usize,
    pub flags: i32,
}

/// Room for one SCM_RIGHTS message of up to two descriptors (a cmsghdr of
/// 16 bytes, then the ints), 8-byte aligned.
#[repr(C, align(8))]
pub struct Rights(pub [u8; 24]);

const SOL_SOCKET: i32 = 1;
const SCM_RIGHTS: i32 = 1;
const MSG_CMSG_CLOEXEC: usize = 0x4000_0000;
const MSG_NOSIGNAL: usize = 0x4000;

/// Reads what a Unix socket peer sent into `buf`, with the descriptors it
/// passed (at most two, -1 where none): (bytes read, fds).
pub fn recv_with_fds(fd: i32, buf: &mut [u8]) -> (isize, [i32; 2]) {
    let mut rights = Rights([0; 24]);
    let mut iov = IoVec { base: buf.as_mut_ptr() as usize, len: buf.len() };
    let mut msg = MsgHdr {
        name: 0,
        name_len: 0,
        iov: &mut iov as *mut IoVec as usize,
        iov_len: 1,
        control: rights.0.as_mut_ptr() as usize,
        control_len: rights.0.len(),
        flags: 0,
    };
    // SAFETY: msg points at a valid msghdr whose iovec and control buffers
    // live on this stack frame, with their lengths.
    let n = unsafe { syscall(RECVMSG, fd as usize, &mut msg as *mut MsgHdr as usize, MSG_CMSG_CLOEXEC, 0) };
    let mut fds = [-1i32; 2];
    if n >= 0 && msg.control_len >= 20 {
        let word = |at: usize| i32::from_ne_bytes([rights.0[at], rights.0[at + 1], rights.0[at + 2], rights.0[at + 3]]);
        let len = usize::from_ne_bytes([
            rights.0[0], rights.0[1], rights.0[2], rights.0[3], rights.0[4], rights.0[5], rights.0[6], rights.0[7],
        ]);
        if word(8) == SOL_SOCKET && word(12) == SCM_RIGHTS {
            let count = (len.saturating_sub(16) / 4).min(2);
            for (i, slot) in fds.iter_mut().enumerate().take(count) {
                *slot = word(16 + 4 * i);
            }
        }
    }
    (n, fds)
}

/// Sends `data` with `fds` (at most two) as SCM_RIGHTS.
pub fn send_with_fds(fd: i32, data: &[u8], fds: &[i32]) -> bool {
    let count = fds.len().min(2);
    let mut rights = Rights([0; 24]);
    rights.0[..8].copy_from_slice(&(16 + 4 * count).to_ne_bytes());
    rights.0[8..12].copy_from_slice(&SOL_SOCKET.to_ne_bytes());
    rights.0[12..16].copy_from_slice(&SCM_RIGHTS.to_ne_bytes());
    for (i, passed) in fds.iter().take(count).enumerate() {
        rights.0[16 + 4 * i..20 + 4 * i].copy_from_slice(&passed.to_ne_bytes());
    }
    let mut iov = IoVec { base: data.as_ptr() as usize, len: data.len() };
    let msg = MsgHdr {
        name: 0,
        name_len: 0,
        iov: &mut iov as *mut IoVec as usize,
        iov_len: 1,
        control: if count == 0 { 0 } else { rights.0.as_ptr() as usize },
        control_len: if count == 0 { 0 } else { (16 + 4 * count + 7) & !7 },
        flags: 0,
    };
    // SAFETY: msg points at a valid msghdr whose buffers live on this stack frame.
    let n = unsafe { syscall(SENDMSG, fd as usize, &msg as *const MsgHdr as usize, MSG_NOSIGNAL, 0) };
    n == data.len() as isize
}

pub fn close(fd: i32) {
    // SAFETY: closing a descriptor passes no memory.
    unsafe { syscall(CLOSE, fd as usize, 0, 0, 0) };
}

/// Realtime clock: (seconds, nanoseconds) since the epoch.
pub fn now() -> (u64, u32) {
    let mut ts = [0i64; 2];
    // SAFETY: ts is a valid timespec-sized buffer.
    unsafe { syscall(CLOCK_GETTIME, 0, ts.as_mut_ptr() as usize, 0, 0) };
    (ts[0].max(0) as u64, ts[1].max(0) as u32)
}

/// A NUL-terminated string from argv/envp.
///
/// # Safety
/// `p` points at a NUL-terminated string that outlives the result.
pub unsafe fn cstr<'a>(p: *const u8) -> &'a [u8] {
    let mut len = 0;
    // SAFETY: the caller guarantees a terminating NUL.
    unsafe {
        // Volatile, so the compiler does not turn the loop into a call to strlen.
        while core::ptr::read_volatile(p.add(len)) != 0 {
            len += 1;
        }
        core::slice::from_raw_parts(p, len)
    }
}

/// Formats `n` in decimal into `out`; returns the digits used.
pub fn decimal(mut n: u64, out: &mut [u8; 20]) -> &[u8] {
    let mut i = out.len();
    loop {
        i -= 1;
        out[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &out[i..]
}

pub fn parse_decimal(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 19 {
        return None;
    }
    let mut n: u64 = 0;
    for c in s {
        if !c.is_ascii_digit() {
            return None;
        }
        n = n * 10 + (c - b'0') as u64;
    }
    Some(n)
}

#[repr(C)]
pub struct SigAction {
    pub handler: usize,
    pub flags: usize,
    pub restorer: usize,
    pub mask: u64,
}

pub const SA_RESTORER: usize = 0x0400_0000;
pub const SA_NOCLDSTOP: usize = 1;

#[unsafe(naked)]
pub unsafe extern "C" fn restore_rt() {
    // rt_sigreturn (15): the kernel's signal-return trampoline.
    core::arch::naked_asm!("mov rax, 15", "syscall")
}

/// Installs `handler` for `signal`.
pub fn sigaction(signal: usize, handler: extern "C" fn(i32), flags: usize) {
    let action = SigAction {
        handler: handler as *const () as usize,
        flags: flags | SA_RESTORER,
        restorer: restore_rt as *const () as usize,
        mask: 0,
    };
    // SAFETY: action is a valid kernel sigaction of the size passed (8-byte mask).
    unsafe { syscall(RT_SIGACTION, signal, &action as *const SigAction as usize, 0, 8) };
}

// The memory primitives the compiler emits calls to. Written with string
// instructions (memcpy/memset) and volatile reads (memcmp), so the compiler
// cannot turn them back into calls to themselves.

/// # Safety
/// `dst` and `src` are valid for `n` bytes and do not overlap.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memcpy(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    // SAFETY: rep movsb copies exactly n bytes from src to dst.
    unsafe { asm!("rep movsb", inout("rcx") n => _, inout("rdi") dst => _, inout("rsi") src => _, options(nostack)) };
    dst
}

/// # Safety
/// `dst` and `src` are valid for `n` bytes; they may overlap.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memmove(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    if (dst as usize) <= (src as usize) || (dst as usize) >= (src as usize) + n {
        // SAFETY: forward copy is safe when dst is below src or past its end.
        return unsafe { memcpy(dst, src, n) };
    }
    // SAFETY: backward copy (std flag set for the length of the copy).
    unsafe {
        asm!("std", "rep movsb", "cld", inout("rcx") n => _, inout("rdi") dst.add(n - 1) => _, inout("rsi") src.add(n - 1) => _, options(nostack));
    }
    dst
}

/// # Safety
/// `dst` is valid for `n` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memset(dst: *mut u8, value: i32, n: usize) -> *mut u8 {
    // SAFETY: rep stosb stores n bytes at dst.
    unsafe { asm!("rep stosb", inout("rcx") n => _, inout("rdi") dst => _, in("al") value as u8, options(nostack)) };
    dst
}

/// # Safety
/// `a` and `b` are valid for `n` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    for i in 0..n {
        // SAFETY: i < n, within both buffers.
        let (x, y) = unsafe { (core::ptr::read_volatile(a.add(i)), core::ptr::read_volatile(b.add(i))) };
        if x != y {
            return x as i32 - y as i32;
        }
    }
    0
}

/// # Safety
/// As for `memcmp`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    // SAFETY: forwarded.
    unsafe { memcmp(a, b, n) }
}

/// The precompiled `core` refers to the unwinding personality routine; these
/// programs abort on panic and never unwind, so it is never called.
#[unsafe(no_mangle)]
pub extern "C" fn rust_eh_personality() {}
