//! WebSocket streaming clients for the tests (tokio-tungstenite): the
//! remotecommand channel protocols, and SPDY tunnelled in binary messages
//! for port-forward, as client-go speaks them.

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use super::spdy::{connect_in_netns, SpdyClient};

pub type Socket = WebSocketStream<TcpStream>;

/// Opens a WebSocket to `url` (http://) from inside `netns`, offering
/// `protocols`; the socket and the chosen protocol, or the HTTP status of a refusal.
pub async fn connect(url: &str, netns: &str, protocols: &[&str]) -> Result<(Socket, Option<String>), u16> {
    let authority = url.trim_start_matches("http://").split('/').next().unwrap().to_string();
    let tcp = connect_in_netns(netns, &authority);
    let mut request = url.replacen("http://", "ws://", 1).into_client_request().unwrap();
    if !protocols.is_empty() {
        request.headers_mut().insert("Sec-WebSocket-Protocol", protocols.join(", ").parse().unwrap());
    }
    match tokio_tungstenite::client_async(request, tcp).await {
        Ok((socket, response)) => {
            let chosen =
                response.headers().get("Sec-WebSocket-Protocol").and_then(|v| v.to_str().ok()).map(String::from);
            Ok((socket, chosen))
        }
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => Err(response.status().as_u16()),
        Err(e) => panic!("WebSocket handshake: {e}"),
    }
}

/// Sends `data` on `channel`.
pub async fn send(socket: &mut Socket, channel: u8, data: &[u8]) {
    let mut message = vec![channel];
    message.extend_from_slice(data);
    socket.send(Message::Binary(Bytes::from(message))).await.expect("send");
}

/// Every channel's bytes until the server closes, and the messages as they came.
pub async fn read_all(socket: &mut Socket) -> ([Vec<u8>; 5], Vec<Vec<u8>>) {
    let mut channels: [Vec<u8>; 5] = Default::default();
    let mut messages = Vec::new();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        match tokio::time::timeout_at(deadline, socket.next()).await.expect("the server closes in time") {
            Some(Ok(Message::Binary(data))) => {
                if let Some((channel, payload)) = data.split_first() {
                    if let Some(slot) = channels.get_mut(*channel as usize) {
                        slot.extend_from_slice(payload);
                    }
                }
                messages.push(data.to_vec());
            }
            Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return (channels, messages),
            Some(Ok(_)) => {}
        }
    }
}

/// Reads messages until `want` has come on `channel`; panics after 20 s.
pub async fn read_until(socket: &mut Socket, channel: u8, want: &str) -> String {
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    while !String::from_utf8_lossy(&seen).contains(want) {
        match tokio::time::timeout_at(deadline, socket.next()).await {
            Ok(Some(Ok(Message::Binary(data)))) => {
                if let Some((c, payload)) = data.split_first() {
                    if *c == channel {
                        seen.extend_from_slice(payload);
                    }
                }
            }
            Ok(Some(Ok(_))) => {}
            _ => panic!("{want:?} did not come on channel {channel}; got {:?}", String::from_utf8_lossy(&seen)),
        }
    }
    String::from_utf8_lossy(&seen).into_owned()
}

/// A SPDY client over SPDY tunnelled in `socket`'s binary messages.
pub fn tunnel(socket: Socket, protocol: Option<String>) -> SpdyClient {
    let (ours, theirs) = tokio::io::duplex(256 << 10);
    let (mut from_client, mut to_client) = tokio::io::split(theirs);
    let (mut sink, mut source) = socket.split();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 32 << 10];
        while let Ok(n) = from_client.read(&mut buf).await {
            if n == 0 || sink.send(Message::Binary(Bytes::copy_from_slice(&buf[..n]))).await.is_err() {
                break;
            }
        }
    });
    tokio::spawn(async move {
        while let Some(Ok(message)) = source.next().await {
            if let Message::Binary(data) = message {
                if to_client.write_all(&data).await.is_err() {
                    break;
                }
            }
        }
        let _ = to_client.shutdown().await;
    });
    let (read_half, write_half) = tokio::io::split(ours);
    SpdyClient::over(read_half, write_half, protocol)
}
