//! `nidus image pull REF` and `nidus image pulls`, over the daemon's socket:
//! a pull through PullImage with its progress (read from the daemon's list
//! of pulls in flight, Status verbose) drawn as a bar per layer on a
//! terminal and as plain lines otherwise; and that list printed.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::path::Path;
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::progress::{LayerState, PullSnapshot};
use crate::api::image_service_client::ImageServiceClient;
use crate::api::runtime_service_client::RuntimeServiceClient;
use crate::api::{AuthConfig, ImageSpec, PullImageRequest, StatusRequest};
use crate::image::cli::human_bytes;
use crate::image::Reference;
use crate::socket_client::socket_channel;

/// Pulls `reference` through the daemon on `socket`; `creds` is `user:password`.
pub async fn pull(socket: &Path, reference: &str, creds: Option<&str>) -> Result<(), String> {
    let wanted = Reference::parse(reference).map_err(|e| e.to_string())?.to_string();
    let auth = creds.map(|c| {
        let (username, password) = c.split_once(':').unwrap_or((c, ""));
        AuthConfig { username: username.into(), password: password.into(), ..Default::default() }
    });
    let channel = socket_channel(socket).await?;
    let mut images = ImageServiceClient::new(channel.clone());
    let mut runtime = RuntimeServiceClient::new(channel);
    let request = PullImageRequest {
        image: Some(ImageSpec { image: reference.to_string(), ..Default::default() }),
        auth,
        sandbox_config: None,
    };
    let started = Instant::now();
    let terminal = std::io::stderr().is_terminal();
    let mut view = if terminal { View::Bars(Bars::default()) } else { View::Lines };
    let mut ticks = tokio::time::interval(if terminal { Duration::from_millis(200) } else { Duration::from_secs(2) });
    ticks.tick().await;
    let call = images.pull_image(request);
    tokio::pin!(call);
    loop {
        tokio::select! {
            answer = &mut call => {
                view.finish(answer.is_ok());
                let id = answer.map_err(|s| s.message().to_string())?.into_inner().image_ref;
                println!("pulled {wanted} {id} in {:.2} s", started.elapsed().as_secs_f64());
                return Ok(());
            }
            _ = ticks.tick() => {
                if let Ok(pulls) = in_flight(&mut runtime).await {
                    if let Some(pull) = pulls.iter().find(|p| p.image == wanted) {
                        view.show(pull);
                    }
                }
            }
        }
    }
}

/// Prints the pulls in flight in the daemon on `socket`.
pub async fn list(socket: &Path) -> Result<(), String> {
    let channel = socket_channel(socket).await?;
    let pulls = in_flight(&mut RuntimeServiceClient::new(channel)).await?;
    if pulls.is_empty() {
        println!("no pull in flight");
    }
    for pull in pulls {
        println!("{}", summary(&pull));
        for layer in &pull.layers {
            println!(
                "  {} {:>10} / {:<10} {:?}",
                short(&layer.digest),
                human_bytes(layer.bytes),
                human_bytes(layer.size),
                layer.state
            );
        }
    }
    Ok(())
}

async fn in_flight(runtime: &mut RuntimeServiceClient<tonic::transport::Channel>) -> Result<Vec<PullSnapshot>, String> {
    let status = runtime.status(StatusRequest { verbose: true }).await.map_err(|s| s.message().to_string())?;
    let info = status.into_inner().info;
    let config = info.get("config").ok_or("the daemon's Status has no verbose info")?;
    let value: serde_json::Value = serde_json::from_str(config).map_err(|e| e.to_string())?;
    serde_json::from_value(value.get("pulls").cloned().unwrap_or_default()).map_err(|e| e.to_string())
}

fn short(digest: &str) -> &str {
    let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
    &hex[..hex.len().min(12)]
}

fn summary(pull: &PullSnapshot) -> String {
    format!(
        "{}: {}/{} layers, {} of {}, {}/s, {:.1} s",
        pull.image,
        pull.layers_done,
        pull.layers.len(),
        human_bytes(pull.bytes),
        human_bytes(pull.total_bytes),
        human_bytes(pull.rate()),
        pull.elapsed_ms as f64 / 1000.0
    )
}

enum View {
    Bars(Bars),
    Lines,
}

#[derive(Default)]
struct Bars {
    bars: Option<MultiProgress>,
    layers: HashMap<String, ProgressBar>,
}

impl View {
    fn show(&mut self, pull: &PullSnapshot) {
        match self {
            View::Lines => eprintln!("{}", summary(pull)),
            View::Bars(bars) => bars.show(pull),
        }
    }

    fn finish(&mut self, pulled: bool) {
        if let View::Bars(bars) = self {
            for bar in bars.layers.values() {
                if pulled {
                    bar.set_position(bar.length().unwrap_or_default());
                    bar.set_message("done");
                }
                bar.finish();
            }
        }
    }
}

impl Bars {
    fn show(&mut self, pull: &PullSnapshot) {
        let multi = self.bars.get_or_insert_with(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr()));
        let style = ProgressStyle::with_template("{prefix} [{bar:32}] {bytes:>10}/{total_bytes:<10} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
        for layer in &pull.layers {
            let bar = self.layers.entry(layer.digest.clone()).or_insert_with(|| {
                let bar = multi.add(ProgressBar::new(layer.size));
                bar.set_style(style.clone());
                bar.set_prefix(short(&layer.digest).to_string());
                bar
            });
            bar.set_position(layer.bytes);
            let state = match layer.state {
                LayerState::Waiting => "waiting",
                LayerState::Downloading => "downloading",
                LayerState::Shared => "fetched by another pull",
                LayerState::Present => "already present",
                LayerState::Done => "done",
            };
            bar.set_message(state);
        }
    }
}
