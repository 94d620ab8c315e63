//! Inputs quoted in errors and logs, shortened: a request may carry a
//! megabyte where a name belongs, and an error must not echo it back.

use std::fmt;

/// The most of an input an error quotes.
pub(crate) const QUOTE_LIMIT: usize = 128;

/// `value` as a quoted string of at most [`QUOTE_LIMIT`] bytes of it, with
/// its length when it was cut: `"abc…" (1048576 bytes)`.
pub(crate) fn quote<S: AsRef<str> + ?Sized>(value: &S) -> Quoted<'_> {
    Quoted(value.as_ref())
}

pub(crate) struct Quoted<'a>(&'a str);

impl fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let value = self.0;
        if value.len() <= QUOTE_LIMIT {
            return write!(f, "{value:?}");
        }
        let mut end = QUOTE_LIMIT;
        while !value.is_char_boundary(end) {
            end -= 1;
        }
        write!(f, "{:?}… ({} bytes)", &value[..end], value.len())
    }
}

impl fmt::Debug for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_inputs_are_quoted_whole_and_long_ones_cut() {
        assert_eq!(quote("abc").to_string(), "\"abc\"");
        let long = "é".repeat(100_000);
        let shown = quote(&long).to_string();
        assert!(shown.len() < QUOTE_LIMIT + 40, "{shown}");
        assert!(shown.ends_with("… (200000 bytes)"), "{shown}");
    }
}
