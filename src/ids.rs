//! Object ids: 64 hex digits like containerd's, and resolution of the unique
//! prefixes crictl prints and accepts.

/// A new random id.
pub(crate) fn new_id() -> String {
    let bytes: [u8; 32] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Resolved<'a> {
    One(&'a str),
    None,
    Ambiguous,
}

/// Finds the one id equal to `wanted` or starting with it.
pub(crate) fn resolve<'a>(wanted: &str, ids: impl Iterator<Item = &'a str>) -> Resolved<'a> {
    let mut found = Resolved::None;
    for id in ids {
        if id == wanted {
            return Resolved::One(id);
        }
        if id.starts_with(wanted) {
            found = match found {
                Resolved::None => Resolved::One(id),
                _ => Resolved::Ambiguous,
            };
        }
    }
    found
}

/// True for something that can be an id or an id prefix (hex, 1–64 chars).
pub(crate) fn looks_like_id(s: &str) -> bool {
    !s.is_empty() && s.len() <= 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_hex() {
        let a = new_id();
        assert_eq!(a.len(), 64);
        assert!(looks_like_id(&a));
        assert_ne!(a, new_id());
    }

    #[test]
    fn prefixes_resolve_when_unique() {
        let ids = ["abc1", "abc2", "def0"];
        assert_eq!(resolve("def", ids.iter().copied()), Resolved::One("def0"));
        assert_eq!(resolve("abc", ids.iter().copied()), Resolved::Ambiguous);
        assert_eq!(resolve("abc1", ids.iter().copied()), Resolved::One("abc1"));
        assert_eq!(resolve("0", ids.iter().copied()), Resolved::None);
    }
}
