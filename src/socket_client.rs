//! The operator subcommands' way to a running daemon (`nidus image import`,
//! `image pull`, `image pulls`, `checkpoint`, `restore`): a gRPC channel over
//! its CRI Unix socket, so they run exactly the code kubelet's requests run.

use std::path::Path;

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};

/// A gRPC channel to the daemon's Unix socket; the error names the socket.
pub async fn socket_channel(socket: &Path) -> Result<Channel, String> {
    let path = socket.to_path_buf();
    Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(path).await?)) }
        }))
        .await
        .map_err(|e| format!("cannot reach the daemon on {}: {e}", socket.display()))
}
