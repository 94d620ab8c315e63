//! What tests look at on the host side, independently of nidus's own code:
//! processes and their namespaces, mounts, cgroup directories, and commands.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

pub fn require_root() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "these integration tests need root (they create namespaces, mounts and cgroups)"
    );
}

/// Runs a command that must succeed; returns its stdout.
pub fn run(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e} (is it installed?)"));
    assert!(out.status.success(), "{program} {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `args` inside the namespaces of `pid` named by `ns_flags`
/// (nsenter flags such as `-n`, `-u`, `-i`); returns stdout.
pub fn in_namespaces_of(pid: i32, ns_flags: &[&str], args: &[&str]) -> String {
    let target = pid.to_string();
    let mut all = vec!["-t", target.as_str()];
    all.extend_from_slice(ns_flags);
    all.push("--");
    all.extend_from_slice(args);
    run("nsenter", &all)
}

pub fn signal(pid: i32, sig: i32) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::try_from(sig).expect("signal"),
    );
}

/// True while `pid` exists and is not a zombie.
pub fn process_running(pid: i32) -> bool {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next());
    !matches!(state, Some('Z') | Some('X') | None)
}

/// Waits up to 30 s for `pid` to stop running (an idle-class process on a
/// loaded machine may take long to be scheduled and die).
pub fn wait_gone(pid: i32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(30);
    while process_running(pid) {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

/// Waits up to `limit` for our child to exit; past that it is SIGKILLed,
/// reaped, and None is returned.
pub fn wait_or_kill(child: &mut std::process::Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The namespace of `pid` of kind `kind` (net, ipc, uts, pid, mnt), e.g. `net:[4026531840]`.
pub fn namespace(pid: i32, kind: &str) -> String {
    fs::read_link(format!("/proc/{pid}/ns/{kind}"))
        .unwrap_or_else(|e| panic!("cannot read /proc/{pid}/ns/{kind}: {e}"))
        .to_string_lossy()
        .into_owned()
}

/// The cgroup of `pid` in the hierarchy whose controller list contains `controller`.
pub fn cgroup_of(pid: i32, controller: &str) -> Option<String> {
    let text = fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    text.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, list, path) = (parts.next()?, parts.next()?, parts.next()?);
        let hit = if controller.is_empty() { list.is_empty() } else { list.split(',').any(|c| c == controller) };
        hit.then(|| path.to_string())
    })
}

fn mount_points() -> Vec<(String, String, String)> {
    // (mount point, fstype, super options)
    fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let (pre, post) = line.split_once(" - ")?;
            let mp = pre.split(' ').nth(4)?.replace("\\040", " ");
            let mut post = post.split(' ');
            let fstype = post.next()?.to_string();
            let _source = post.next();
            Some((mp, fstype, post.next().unwrap_or("").to_string()))
        })
        .collect()
}

pub fn mounts_under(base: &Path) -> Vec<PathBuf> {
    mount_points().into_iter().map(|(mp, _, _)| PathBuf::from(mp)).filter(|mp| mp.starts_with(base)).collect()
}

pub fn fstype_of_mount(path: &Path) -> Option<String> {
    mount_points().into_iter().rev().find(|(mp, _, _)| Path::new(mp) == path).map(|(_, fstype, _)| fstype)
}

pub fn unmount_under(base: &Path) {
    let mut mounts = mounts_under(base);
    mounts.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for mp in mounts {
        let _ = nix::mount::umount2(&mp, nix::mount::MntFlags::MNT_DETACH);
    }
}

/// True on a node with the unified cgroup v2 hierarchy at /sys/fs/cgroup.
pub fn unified() -> bool {
    mount_points().iter().any(|(mp, fs, _)| mp == "/sys/fs/cgroup" && fs == "cgroup2")
}

/// The directory of `pid`'s cgroup in the hierarchy of `controller` (v2: the
/// unified one, whatever the controller).
pub fn cgroup_dir(pid: i32, controller: &str) -> PathBuf {
    if unified() {
        let path = cgroup_of(pid, "").unwrap_or_else(|| panic!("no cgroup v2 path for pid {pid}"));
        return Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/'));
    }
    let path = cgroup_of(pid, controller).unwrap_or_else(|| panic!("pid {pid} has no {controller} cgroup"));
    let mount = mount_points()
        .into_iter()
        .find(|(_, fstype, opts)| fstype == "cgroup" && opts.split(',').any(|o| o == controller))
        .map(|(mp, _, _)| mp)
        .unwrap_or_else(|| panic!("no {controller} cgroup hierarchy is mounted"));
    Path::new(&mount).join(path.trim_start_matches('/'))
}

/// A cgroup file's contents, trimmed.
pub fn read_cgroup_file(dir: &Path, file: &str) -> String {
    fs::read_to_string(dir.join(file))
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.join(file).display()))
        .trim()
        .to_string()
}

/// A flat-keyed cgroup file (`key value` lines) as a map.
pub fn cgroup_keyed(dir: &Path, file: &str) -> std::collections::HashMap<String, u64> {
    read_cgroup_file(dir, file)
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

/// cgroup v2: the cgroup the tests of this process nest their daemons in.
/// When this process is not in the root cgroup, it moves into the leaf
/// `<its cgroup>/nidus-test-runner` once, so that its cgroup can hand
/// controllers to the tests' cgroups (no internal processes).
pub fn v2_test_home() -> &'static Path {
    static HOME: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    HOME.get_or_init(|| {
        let me = std::process::id() as i32;
        let own = cgroup_of(me, "").expect("a cgroup v2 path");
        let home = Path::new("/sys/fs/cgroup").join(own.trim_start_matches('/'));
        if own != "/" {
            // Move out with the children this process has at the moment
            // (tests spawn commands in parallel); anyone else is a mistake.
            let leaf = home.join("nidus-test-runner");
            let _ = fs::create_dir(&leaf);
            for _ in 0..100 {
                let procs = read_cgroup_file(&home, "cgroup.procs");
                if procs.is_empty() {
                    break;
                }
                for pid in procs.lines().filter_map(|p| p.trim().parse::<i32>().ok()) {
                    let parent = fs::read_to_string(format!("/proc/{pid}/stat"))
                        .ok()
                        .and_then(|s| s.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse::<i32>().ok());
                    assert!(
                        pid == me || parent == Some(me) || !process_running(pid),
                        "cgroup v2: the tests need a cgroup of their own, but {} also holds {pid} \
                         (run them in a scope of their own, e.g. systemd-run --scope, or through the VM lane)",
                        home.display()
                    );
                    let _ = fs::write(leaf.join("cgroup.procs"), pid.to_string());
                }
            }
        }
        for controller in read_cgroup_file(&home, "cgroup.controllers").split_whitespace() {
            let _ = fs::write(home.join("cgroup.subtree_control"), format!("+{controller}"));
        }
        home
    })
}

/// The directory `name` would have below this process's own cgroup in every
/// mounted cgroup hierarchy (v1 controllers, or the v2 unified one).
pub fn cgroup_root_dirs(name: &str) -> Vec<PathBuf> {
    let unified = mount_points().iter().any(|(mp, fs, _)| mp == "/sys/fs/cgroup" && fs == "cgroup2");
    let mut dirs = Vec::new();
    for (mp, fstype, opts) in mount_points() {
        let controller = match (unified, fstype.as_str()) {
            (true, "cgroup2") => String::new(),
            (false, "cgroup") => match opts.split(',').find(|o| nidus::cgroups::V1_CONTROLLERS.contains(o)) {
                Some(c) => c.to_string(),
                None => continue,
            },
            _ => continue,
        };
        if let Some(own) = cgroup_of(std::process::id() as i32, &controller) {
            let dir = Path::new(&mp).join(own.trim_start_matches('/')).join(name);
            if !dirs.contains(&dir) {
                dirs.push(dir);
            }
        }
    }
    dirs
}

/// Every directory below `dir`, parents before children.
pub fn walk_dirs(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            out.push(entry.path());
            walk_dirs(&entry.path(), out);
        }
    }
}

/// Removes a cgroup and everything below it (killing what still runs there).
pub fn remove_cgroup_tree(dir: &Path) {
    let mut dirs = vec![dir.to_path_buf()];
    walk_dirs(dir, &mut dirs);
    for d in dirs.iter().rev() {
        for _ in 0..100 {
            if let Ok(procs) = fs::read_to_string(d.join("cgroup.procs")) {
                for pid in procs.lines().filter_map(|l| l.parse().ok()) {
                    signal(pid, libc::SIGKILL);
                }
            }
            match fs::remove_dir(d) {
                Ok(()) => break,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }
}

/// Field `n` (1-based, as proc(5) numbers them) of `/proc/PID/stat`.
pub fn stat_field(pid: i32, n: usize) -> Option<String> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields resume after the command name's ')' with field 3.
    stat.rsplit_once(')')?.1.split_whitespace().nth(n.checked_sub(3)?).map(String::from)
}

/// The scheduling policy of `pid` (0 SCHED_OTHER, 5 SCHED_IDLE, …).
pub fn sched_policy(pid: i32) -> Option<i32> {
    stat_field(pid, 41)?.parse().ok()
}

/// The names in `dir`, sorted (none when it is missing).
pub fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    names.sort();
    names
}

/// The raw command line of `pid` once it reads `want`, or the last one
/// read after 5 s. A process that reported ready and then exec'd (the pause
/// into its idle loop) is briefly between programs, its command line not yet
/// the new one.
pub fn cmdline_once(pid: i32, want: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let raw = fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if raw == want || Instant::now() > deadline {
            return raw;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A process's command line, its arguments joined by spaces (empty once it is gone).
pub fn cmdline(pid: i32) -> String {
    fs::read(format!("/proc/{pid}/cmdline"))
        .map(|raw| String::from_utf8_lossy(&raw).split('\0').filter(|a| !a.is_empty()).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// The pids of every process on the host.
pub fn processes() -> Vec<i32> {
    let Ok(entries) = fs::read_dir("/proc") else { return Vec::new() };
    entries.flatten().filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok()).collect()
}

/// Every process below `pid` (children, their children, …) with its start
/// time (`/proc/PID/stat` field 22), which tells it from a later process
/// given the same pid.
pub fn descendants(pid: i32) -> Vec<(i32, String)> {
    let parents: Vec<(i32, i32)> =
        processes().into_iter().filter_map(|p| Some((p, stat_field(p, 4)?.parse().ok()?))).collect();
    let mut found: Vec<i32> = vec![pid];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(parents.iter().filter(|(_, pp)| *pp == parent).map(|(p, _)| *p));
        i += 1;
    }
    found.into_iter().skip(1).filter_map(|p| Some((p, stat_field(p, 22)?))).collect()
}

/// Whether the process `pid` that started at `start` (see `descendants`) still runs.
pub fn still_running(pid: i32, start: &str) -> bool {
    process_running(pid) && stat_field(pid, 22).as_deref() == Some(start)
}

/// The named network namespaces (`ip netns`, /run/netns) whose name starts with `prefix`.
pub fn named_netns(prefix: &str) -> Vec<String> {
    names_in(Path::new("/run/netns")).into_iter().filter(|n| n.starts_with(prefix)).collect()
}

/// The children of `pid` running `comm`.
pub fn children_named(pid: i32, comm: &str) -> Vec<i32> {
    processes()
        .into_iter()
        .filter(|&child| stat_field(child, 4).and_then(|p| p.parse().ok()) == Some(pid))
        // A child that has exited but is not reaped yet is no longer one.
        .filter(|&child| process_running(child))
        .filter(|&child| fs::read_to_string(format!("/proc/{child}/comm")).is_ok_and(|c| c.trim() == comm))
        .collect()
}

pub fn mode_of(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(path).expect("stat").permissions().mode() & 0o7777
}

pub fn owner_of(path: &Path) -> u32 {
    use std::os::unix::fs::MetadataExt;
    fs::metadata(path).expect("stat").uid()
}

/// Lets this test process hold as many descriptors as its hard limit
/// allows; returns that limit.
pub fn raise_nofile() -> u64 {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).expect("getrlimit");
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard).expect("setrlimit");
    hard
}
