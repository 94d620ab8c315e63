//! nidus-monitor: the per-container monitor (`nidus-monitor run DIR`, its
//! assignment and `go` on stdin) and
//! the ExecSync helper (`nidus-monitor exec`, request as JSON on stdin),
//! started by `nidus serve`; `finish` is the monitor loop's last step. A small program of its own, so each container's
//! monitor costs little memory.

use std::io::Read;

use nidus::monitor::plan::ExecRequest;
use nidus::wire::words;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let code = match args.get(1).map(String::as_str) {
        Some("run") if args.len() == 3 => nidus::monitor::run(std::path::Path::new(&args[2])),
        Some("exec") => exec(),
        Some("exec-stream") => exec_stream(),
        Some(finish) if finish.as_bytes() == words::FINISH_COMMAND && (5..=6).contains(&args.len()) => {
            nidus::monitor::finish(std::path::Path::new(&args[2]), &args[3], &args[4], args.get(5).map(String::as_str))
        }
        _ => {
            eprintln!(
                "usage: nidus-monitor run DIR < ASSIGNMENT | nidus-monitor exec < REQUEST | nidus-monitor exec-stream 4< REQUEST | \
                 nidus-monitor finish RUN_DIR STATUS FINISHED_AT_NS [START_ERROR]"
            );
            2
        }
    };
    std::process::exit(code);
}

/// A streaming Exec: the request comes on fd 4, stdin stays the command's.
fn exec_stream() -> i32 {
    let body = nidus::linux::process::take_fd4().and_then(|mut fd4| {
        let mut body = Vec::new();
        fd4.read_to_end(&mut body).map(|_| body)
    });
    match body {
        Ok(body) => run_exec(&body),
        Err(e) => {
            eprintln!("nidus-monitor exec-stream: reading the request on fd 4: {e}");
            126
        }
    }
}

fn exec() -> i32 {
    let mut body = Vec::new();
    if let Err(e) = std::io::stdin().read_to_end(&mut body) {
        eprintln!("nidus-monitor exec: reading the request: {e}");
        return 126;
    }
    run_exec(&body)
}

fn run_exec(body: &[u8]) -> i32 {
    let errors = match nidus::linux::process::take_fd3() {
        Ok(errors) => errors,
        Err(e) => {
            eprintln!("nidus-monitor exec: no error channel on fd 3: {e}");
            return 126;
        }
    };
    match serde_json::from_slice::<ExecRequest>(body) {
        Ok(request) => nidus::monitor::init::exec_in(&request, errors),
        Err(e) => {
            eprintln!("nidus-monitor exec: bad request: {e}");
            126
        }
    }
}
