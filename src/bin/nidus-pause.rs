//! nidus-pause: the launcher of a pod's pause process as a small program of
//! its own. It runs the same code as `nidus pause` but links none of the
//! daemon, so building a pod loads less; once the pod is built, the pause
//! execs the tiny idle loop either way (~10 kB RSS). Invoked as
//! `nidus-pause pause ARGS…`, like the subcommand, with `go` on stdin.

use nidus::pod::pause::{run, PauseArgs};
use nidus::wire::{Answer, Message, PauseStarted};

fn main() {
    let mut argv = std::env::args().skip(1);
    if argv.next().as_deref() != Some("pause") {
        eprintln!("usage: nidus-pause pause [--hostname=H] [--sysctl=K=V]… [--cgroup-procs=FILE]… [--new-net] [--new-ipc] [--new-uts] [--new-pid]  (then `go` on stdin)");
        std::process::exit(2);
    }
    let code = match PauseArgs::from_args(argv) {
        Ok(args) => run(&args),
        Err(e) => {
            println!("{}", Answer::<PauseStarted>::Refused(e).encode());
            2
        }
    };
    std::process::exit(code);
}
