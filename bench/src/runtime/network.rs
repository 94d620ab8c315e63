//! The pod network of the networked variants: one bridge CNI configuration
//! list (bridge + host-local + portmap from Debian's
//! containernetworking-plugins), written alike for nidus and containerd, each
//! with its own lease directory; every bridge lives in its runtime's own
//! network namespace.

use std::fs;
use std::path::Path;

use anyhow::Result;

/// Where Debian installs the CNI plugins.
pub const CNI_BIN_DIR: &str = "/usr/lib/cni";

/// Writes `<conf_dir>/10-bench.conflist`; host-local keeps its leases in `data_dir`.
pub fn write_conflist(conf_dir: &Path, data_dir: &Path) -> Result<()> {
    fs::create_dir_all(conf_dir)?;
    let list = serde_json::json!({
        "cniVersion": "1.0.0",
        "name": "bench",
        "plugins": [
            {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.88.0.0/16"}]],
                      "routes": [{"dst": "0.0.0.0/0"}], "dataDir": data_dir.display().to_string()}},
            {"type": "portmap", "capabilities": {"portMappings": true}}
        ]
    });
    fs::write(conf_dir.join("10-bench.conflist"), serde_json::to_string_pretty(&list)?)?;
    Ok(())
}
