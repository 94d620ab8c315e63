//! Single-use session tokens: an Exec/Attach/PortForward call leaves what
//! the session needs here under a random token (its URL), taken out by the
//! first request that names it, and gone after the TTL either way.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub struct Tokens<T> {
    ttl: Duration,
    pending: Mutex<HashMap<String, (Instant, T)>>,
}

impl<T> Tokens<T> {
    pub fn new(ttl: Duration) -> Self {
        Self { ttl, pending: Mutex::new(HashMap::new()) }
    }

    /// Keeps `item` under a new random token (192 bits, hex) and returns it.
    pub fn insert(&self, item: T) -> String {
        let token = hex::encode(rand::random::<[u8; 24]>());
        let now = Instant::now();
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        pending.retain(|_, (expires, _)| *expires > now);
        pending.insert(token.clone(), (now + self.ttl, item));
        token
    }

    /// The item of `token`, once, if it has not expired.
    pub fn take(&self, token: &str) -> Option<T> {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        let (expires, item) = pending.remove(token)?;
        (expires > Instant::now()).then_some(item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_works_once_and_not_after_its_ttl() {
        let tokens = Tokens::new(Duration::from_millis(50));
        let a = tokens.insert(1);
        let b = tokens.insert(2);
        assert_ne!(a, b);
        assert_eq!(tokens.take(&a), Some(1));
        assert_eq!(tokens.take(&a), None);
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(tokens.take(&b), None);
        assert_eq!(tokens.take("nonsense"), None);
    }
}
