//! Single-use session tokens: an Exec/Attach/PortForward call leaves what
//! the session needs here under a random token (its URL), taken out by the
//! first request that names it and is served, and gone after the TTL
//! either way. At most `max` wait at once.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub(crate) struct Tokens<T> {
    ttl: Duration,
    max: usize,
    pending: Mutex<HashMap<String, (Instant, T)>>,
}

/// Every token is in use.
#[derive(Debug, thiserror::Error)]
#[error("{0} streaming session URLs are waiting for their clients already; try again once some are used or expired")]
pub(crate) struct Full(pub(crate) usize);

impl<T> Tokens<T> {
    pub(crate) fn new(ttl: Duration, max: usize) -> Self {
        Self { ttl, max, pending: Mutex::new(HashMap::new()) }
    }

    /// Keeps `item` under a new random token (192 bits, hex) and returns it.
    pub(crate) fn insert(&self, item: T) -> Result<String, Full> {
        let token = hex::encode(rand::random::<[u8; 24]>());
        let now = Instant::now();
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        pending.retain(|_, (expires, _)| *expires > now);
        if pending.len() >= self.max {
            return Err(Full(self.max));
        }
        pending.insert(token.clone(), (now + self.ttl, item));
        Ok(token)
    }

    /// Whether `token` waits, unexpired, and `wanted` accepts its item.
    pub(crate) fn has(&self, token: &str, wanted: impl FnOnce(&T) -> bool) -> bool {
        let pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        pending.get(token).is_some_and(|(expires, item)| *expires > Instant::now() && wanted(item))
    }

    /// The item of `token`, once, if it has not expired and `wanted`
    /// accepts it; a token `wanted` refuses stays for the right request.
    pub(crate) fn take_if(&self, token: &str, wanted: impl FnOnce(&T) -> bool) -> Option<T> {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        let (expires, item) = pending.get(token)?;
        if *expires <= Instant::now() {
            pending.remove(token);
            return None;
        }
        if !wanted(item) {
            return None;
        }
        pending.remove(token).map(|(_, item)| item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_works_once_for_the_right_request_and_not_after_its_ttl() {
        let tokens = Tokens::new(Duration::from_millis(50), 2);
        let a = tokens.insert(1).unwrap();
        let b = tokens.insert(2).unwrap();
        assert_ne!(a, b);
        assert!(tokens.insert(3).is_err(), "at most two wait");
        assert_eq!(tokens.take_if(&a, |n| *n == 7), None, "refused: not used up");
        assert!(tokens.has(&a, |n| *n == 1) && !tokens.has(&a, |n| *n == 7));
        assert_eq!(tokens.take_if(&a, |_| true), Some(1));
        assert_eq!(tokens.take_if(&a, |_| true), None);
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(tokens.take_if(&b, |_| true), None);
        assert_eq!(tokens.take_if("nonsense", |_| true), None);
        assert!(tokens.insert(4).is_ok(), "expired ones make room");
    }
}
