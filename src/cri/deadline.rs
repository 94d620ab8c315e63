//! A client's gRPC deadline (the `grpc-timeout` header) as a time budget for
//! a call that enforces time limits itself (ExecSync): it ends the work a
//! little before the HTTP/2 server's own timer would, so the answer is
//! DeadlineExceeded from nidus rather than the server's bare Cancelled.

use std::time::Duration;

use tonic::metadata::MetadataMap;

/// How much before the client's deadline a call gives up: a tenth of the
/// time, within these bounds, leaves room to end the work and answer before
/// the client's own timer fires.
const MIN_MARGIN: Duration = Duration::from_millis(50);
const MAX_MARGIN: Duration = Duration::from_secs(1);

/// The time left until the client's deadline, less a margin; `None` when
/// the client set none (or an unreadable one, which the server ignores too).
pub fn client_deadline(metadata: &MetadataMap) -> Option<Duration> {
    let value = metadata.get("grpc-timeout")?.to_str().ok()?;
    let budget = parse_grpc_timeout(value)?;
    Some(budget.saturating_sub((budget / 10).clamp(MIN_MARGIN, MAX_MARGIN)))
}

/// The sooner of two optional limits.
pub fn earliest(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// `grpc-timeout`: at most 8 digits and a unit (gRPC over HTTP/2).
fn parse_grpc_timeout(value: &str) -> Option<Duration> {
    if !value.is_ascii() {
        return None;
    }
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_parse_as_the_protocol_says() {
        assert_eq!(parse_grpc_timeout("2S"), Some(Duration::from_secs(2)));
        assert_eq!(parse_grpc_timeout("1500m"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_grpc_timeout("3H"), Some(Duration::from_secs(3 * 3600)));
        assert_eq!(parse_grpc_timeout("123456789S"), None);
        assert_eq!(parse_grpc_timeout("S"), None);
        assert_eq!(parse_grpc_timeout("5x"), None);
        assert_eq!(parse_grpc_timeout("5é"), None);
        assert_eq!(earliest(Some(Duration::from_secs(3)), Some(Duration::from_secs(1))), Some(Duration::from_secs(1)));
        assert_eq!(earliest(None, Some(Duration::from_secs(1))), Some(Duration::from_secs(1)));
    }
}
