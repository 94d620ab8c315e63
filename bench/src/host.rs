//! What the harness reads and does on the host, independently of either
//! runtime: running commands, process facts from /proc (parent, memory),
//! signals by PID, and mount points.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Runs a command that must succeed; returns its stdout.
pub fn run(program: &str, args: &[&str]) -> Result<String> {
    let out = Command::new(program).args(args).output().with_context(|| format!("cannot run {program}"))?;
    if !out.status.success() {
        bail!("{program} {} failed ({}): {}", args.join(" "), out.status, String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// True when `program` is found on PATH.
pub fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
        .unwrap_or(false)
}

/// The path of `program` on PATH.
pub fn which(program: &str) -> Result<PathBuf> {
    std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|dir| dir.join(program)).find(|p| p.is_file()))
        .with_context(|| format!("{program} is not on PATH"))
}

/// Sends `signal` to `pid`; a process already gone is not an error.
pub fn signal(pid: i32, signal: Signal) {
    let _ = kill(Pid::from_raw(pid), signal);
}

/// The command name of `pid` (`/proc/PID/comm`).
pub fn comm_of(pid: i32) -> String {
    fs::read_to_string(format!("/proc/{pid}/comm")).map(|s| s.trim().to_string()).unwrap_or_default()
}

/// The parent of `pid` (field 4 of `/proc/PID/stat`), if it is still there.
pub fn parent_of(pid: i32) -> Option<i32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces: fields resume after its ')'.
    stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()
}

/// Resident and proportional set size of one process, in KiB.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Memory {
    pub rss_kb: u64,
    pub pss_kb: u64,
}

impl std::ops::Add for Memory {
    type Output = Memory;
    fn add(self, other: Memory) -> Memory {
        Memory { rss_kb: self.rss_kb + other.rss_kb, pss_kb: self.pss_kb + other.pss_kb }
    }
}

/// RSS and PSS of `pid` from `/proc/PID/smaps_rollup`.
pub fn memory_of(pid: i32) -> Result<Memory> {
    let path = format!("/proc/{pid}/smaps_rollup");
    let text = fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    parse_smaps_rollup(&text).with_context(|| format!("no Rss/Pss in {path}"))
}

fn parse_smaps_rollup(text: &str) -> Option<Memory> {
    let field = |name: &str| {
        text.lines().find_map(|line| {
            let rest = line.strip_prefix(name)?.strip_prefix(':')?;
            rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok()
        })
    };
    Some(Memory { rss_kb: field("Rss")?, pss_kb: field("Pss")? })
}

/// Mount points of the mount namespace `pid` is in (`self` for ours).
pub fn mount_points(pid: &str) -> Vec<PathBuf> {
    fs::read_to_string(format!("/proc/{pid}/mountinfo"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|mp| PathBuf::from(unescape_mount_path(mp)))
        .collect()
}

/// Mount points below (or at) `base` in the mount namespace of `pid`.
pub fn mounts_under(pid: &str, base: &Path) -> Vec<PathBuf> {
    mount_points(pid).into_iter().filter(|mp| mp.starts_with(base)).collect()
}

/// Detaches every mount below (or at) `base` in our mount namespace, deepest first.
pub fn unmount_under(base: &Path) {
    let mut mounts = mounts_under("self", base);
    mounts.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for mp in mounts {
        let _ = nix::mount::umount2(&mp, nix::mount::MntFlags::MNT_DETACH);
    }
}

fn unescape_mount_path(raw: &str) -> String {
    // mountinfo escapes space, tab, newline and backslash as \ooo.
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 3 < bytes.len() && bytes[i + 1..i + 4].iter().all(|b| (b'0'..=b'7').contains(b)) {
            let value = (bytes[i + 1] - b'0') * 64 + (bytes[i + 2] - b'0') * 8 + (bytes[i + 3] - b'0');
            out.push(value);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Polls `done` every `every` until it holds or `limit` passes; returns whether it held.
pub fn wait_until(limit: Duration, every: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(every);
    }
}

/// Entries of a directory (none when it does not exist).
pub fn entries(dir: &Path) -> Vec<PathBuf> {
    fs::read_dir(dir).map(|it| it.flatten().map(|e| e.path()).collect()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smaps_rollup_fields() {
        let text =
            "00400000-7ffe [rollup]\nRss:                 696 kB\nPss:                 692 kB\nPss_Dirty:  1 kB\n";
        assert_eq!(parse_smaps_rollup(text), Some(Memory { rss_kb: 696, pss_kb: 692 }));
        assert_eq!(parse_smaps_rollup("Rss: 1 kB\n"), None);
    }

    #[test]
    fn mount_paths_unescaped() {
        assert_eq!(unescape_mount_path(r"/tmp/a\040b"), "/tmp/a b");
        assert_eq!(unescape_mount_path("/plain"), "/plain");
    }
}
