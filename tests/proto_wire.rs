//! proto/api.proto speaks the real CRI: checked against the wire facts in
//! ../shared with ../shared/tools/cri-wire-check (needs grpcio-tools).

use std::path::Path;
use std::process::Command;

#[test]
fn api_proto_matches_the_cri_wire_facts() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let checker = repo.join("../shared/tools/cri-wire-check");
    assert!(checker.exists(), "{} is missing: the shared directory must sit beside the repository", checker.display());
    let out = Command::new("python3")
        .arg(&checker)
        .arg(repo.join("proto/api.proto"))
        .output()
        .expect("python3 must be installed");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains(" 0 mismatches"),
        "cri-wire-check failed:\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
