//! `nidus image import`: imports an archive into the image store under
//! `--root` — beside a running daemon, which lists the image at once — then
//! asks the daemon on `--socket`, when one answers, whether it sees it (a
//! daemon serving another `--root` would not).

use std::path::Path;
use std::time::{Duration, Instant};

use super::{ImageStore, ImportedImage};
use crate::api::image_service_client::ImageServiceClient;
use crate::api::{ImageSpec, ImageStatusRequest};
use crate::config::Config;
use crate::socket_client::socket_channel;

const DAEMON_TIMEOUT: Duration = Duration::from_secs(5);

/// Runs the import; the report goes to stdout, the error is returned.
pub fn import(config: &Config, path: &Path, name: Option<&str>) -> Result<(), String> {
    let started = Instant::now();
    let store = ImageStore::open(&config.root).map_err(|e| format!("cannot open the image store: {e}"))?;
    let imported = store.import(path, name).map_err(|e| format!("cannot import {}: {e}", path.display()))?;
    let elapsed = started.elapsed();
    for image in &imported {
        println!(
            "imported {} {} ({} layers, {} unpacked) in {:.2} s",
            shown_name(image),
            image.id,
            image.layers,
            human_bytes(image.unpacked_bytes),
            elapsed.as_secs_f64()
        );
    }
    check_daemon(&config.socket, &config.root, &imported)
}

fn shown_name(image: &ImportedImage) -> String {
    if image.repo_tags.is_empty() {
        "<unnamed>".into()
    } else {
        image.repo_tags.join(", ")
    }
}

pub(crate) fn human_bytes(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 => format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}

/// Reports whether the daemon on `socket` lists every imported image.
fn check_daemon(socket: &Path, root: &Path, imported: &[ImportedImage]) -> Result<(), String> {
    if !socket.exists() {
        println!(
            "no daemon on {}; it lists the images when it starts with --root {}",
            socket.display(),
            root.display()
        );
        return Ok(());
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start an async runtime: {e}"))?;
    let ids: Vec<String> = imported.iter().map(|i| i.id.clone()).collect();
    let asked =
        runtime.block_on(async { tokio::time::timeout(DAEMON_TIMEOUT, daemon_lists(socket, ids.clone())).await });
    let listed = match asked {
        Ok(Ok(listed)) => listed,
        Ok(Err(e)) => {
            println!("the daemon on {} does not answer ({e}); it lists the images when it runs", socket.display());
            return Ok(());
        }
        Err(_) => {
            println!("the daemon on {} did not answer within {DAEMON_TIMEOUT:?}", socket.display());
            return Ok(());
        }
    };
    let missing: Vec<&String> = ids.iter().zip(&listed).filter(|(_, seen)| !**seen).map(|(id, _)| id).collect();
    if missing.is_empty() {
        println!("the daemon on {} lists the imported images", socket.display());
        Ok(())
    } else {
        Err(format!(
            "the daemon on {} does not list {missing:?}: does it serve another --root than {}?",
            socket.display(),
            root.display()
        ))
    }
}

async fn daemon_lists(socket: &Path, ids: Vec<String>) -> Result<Vec<bool>, String> {
    let channel = socket_channel(socket).await?;
    let mut client = ImageServiceClient::new(channel);
    let mut listed = Vec::new();
    for id in ids {
        let request = ImageStatusRequest { image: Some(ImageSpec { image: id, ..Default::default() }), verbose: false };
        let status = client.image_status(request).await.map_err(|e| e.message().to_string())?;
        listed.push(status.into_inner().image.is_some());
    }
    Ok(listed)
}
