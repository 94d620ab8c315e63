//! Compiles `proto/api.proto` (CRI runtime.v1) into Rust with a pure-Rust protobuf
//! compiler (protox), so building nidus needs no system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(["api.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // Every CRI message can be rendered as JSON (verbose info, persisted configs).
        .message_attribute(".", "#[derive(serde::Serialize, serde::Deserialize)]")
        .message_attribute(".", "#[serde(default)]")
        .enum_attribute(".", "#[derive(serde::Serialize, serde::Deserialize)]")
        .compile_fds(fds)?;
    Ok(())
}
