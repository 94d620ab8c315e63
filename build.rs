//! Compiles the CRI protos into Rust with a pure-Rust protobuf compiler
//! (protox), so building nidus needs no system `protoc`:
//! - `proto/api.proto` (runtime.v1): messages, servers and clients (`nidus::api`);
//! - `proto/v1alpha2/api.proto` (runtime.v1alpha2) twice: its servers with every
//!   message mapped to the runtime.v1 type of the same name (`nidus::api_v1alpha2`:
//!   one implementation serves both APIs), and a complete client with its own
//!   message types, which only the tests include (`$OUT_DIR/v1alpha2-client`).
//!
//! The descriptor sets are written to `$OUT_DIR/*.fds.bin` for the wire-compatibility
//! test (tests/proto_wire.rs).
//!
//! It also builds the tiny steady-state programs of `src/linux/tiny/` (the
//! pause's idle loop, the monitor's loop): `no_std`, no libc, statically
//! linked, a few kilobytes each. They need their own rustc flags
//! (`panic=abort`, no start files), which cargo cannot give one target of a
//! package, so rustc is run here directly; the binaries are embedded in
//! nidus (`linux::tiny`).

use std::path::{Path, PathBuf};
use std::process::Command;

use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    build_tiny_programs(&out_dir)?;

    let v1 = protox::compile(["api.proto"], ["proto"])?;
    std::fs::write(out_dir.join("v1.fds.bin"), v1.encode_to_vec())?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // Every CRI message can be rendered as JSON (verbose info, persisted configs).
        .message_attribute(".", "#[derive(serde::Serialize, serde::Deserialize)]")
        .message_attribute(".", "#[serde(default)]")
        .enum_attribute(".", "#[derive(serde::Serialize, serde::Deserialize)]")
        .compile_fds(v1.clone())?;

    let v1alpha2 = protox::compile(["v1alpha2/api.proto"], ["proto"])?;
    std::fs::write(out_dir.join("v1alpha2.fds.bin"), v1alpha2.encode_to_vec())?;
    write_call_names(&out_dir, [&v1, &v1alpha2])?;
    for dir in ["v1alpha2-server", "v1alpha2-client"] {
        std::fs::create_dir_all(out_dir.join(dir))?;
    }
    tonic_prost_build::configure()
        .build_client(false)
        .build_server(true)
        .extern_path(".runtime.v1alpha2", "crate::api")
        .out_dir(out_dir.join("v1alpha2-server"))
        .compile_fds(v1alpha2.clone())?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(false)
        .out_dir(out_dir.join("v1alpha2-client"))
        .compile_fds(v1alpha2)?;
    Ok(())
}

/// `$OUT_DIR/cri_calls.rs`: every method name of the services in `sets`,
/// sorted, as a Rust slice expression (the metrics' call labels).
fn write_call_names<'a>(
    out_dir: &Path,
    sets: impl IntoIterator<Item = &'a prost_types::FileDescriptorSet>,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut names: Vec<&str> = sets
        .into_iter()
        .flat_map(|set| &set.file)
        .flat_map(|file| &file.service)
        .flat_map(|service| &service.method)
        .filter_map(|method| method.name.as_deref())
        .collect();
    names.sort_unstable();
    names.dedup();
    let list: Vec<String> = names.iter().map(|n| format!("{n:?}")).collect();
    std::fs::write(out_dir.join("cri_calls.rs"), format!("&[{}]\n", list.join(", ")))?;
    Ok(())
}

/// Compiles each `src/linux/tiny/<name>.rs` program to `$OUT_DIR/<name>`.
fn build_tiny_programs(out_dir: &Path) -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=src/linux/tiny");
    println!("cargo:rerun-if-changed=src/monitor/log.rs");
    println!("cargo:rerun-if-changed=src/wire/words.rs");
    if std::env::var("CARGO_CFG_TARGET_ARCH")? != "x86_64" {
        return Err("nidus's tiny steady-state programs (src/linux/tiny) are written for x86_64 only".into());
    }
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    for name in ["pause_idle", "monitor_loop"] {
        let source = Path::new("src/linux/tiny").join(format!("{name}.rs"));
        let output = out_dir.join(name);
        let status = Command::new(&rustc)
            .args(["--edition", "2024", "--crate-type", "bin", "--crate-name", name])
            .args(["-C", "panic=abort", "-C", "opt-level=s", "-C", "relocation-model=static", "-C", "strip=symbols"])
            .args(["-C", "link-arg=-nostartfiles", "-C", "link-arg=-nostdlib", "-C", "link-arg=-static"])
            .args(["-C", "link-arg=-Wl,--build-id=none", "-A", "dead_code"])
            .arg("-o")
            .arg(&output)
            .arg(&source)
            .status()?;
        if !status.success() {
            return Err(format!("building {} failed", source.display()).into());
        }
    }
    Ok(())
}
