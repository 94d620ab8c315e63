//! CNI specification versions: which ones nidus speaks, and which features
//! a version has (CHECK and prevResult on DEL since 0.4.0).

const KNOWN: &[&str] = &["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];

pub(crate) fn known(version: &str) -> bool {
    KNOWN.contains(&version)
}

fn parts(version: &str) -> (u32, u32, u32) {
    let mut it = version.split('.').map(|p| p.parse().unwrap_or(0));
    (it.next().unwrap_or(0), it.next().unwrap_or(0), it.next().unwrap_or(0))
}

/// Whether `version` is `min` or later.
pub(crate) fn at_least(version: &str, min: &str) -> bool {
    parts(version) >= parts(min)
}

/// CHECK exists, and DEL gets the cached result as prevResult.
pub(crate) fn has_check(version: &str) -> bool {
    at_least(version, "0.4.0")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare() {
        assert!(has_check("1.0.0") && has_check("0.4.0") && !has_check("0.3.1"));
        assert!(at_least("1.1.0", "1.0.0") && !at_least("0.3.1", "0.4.0"));
        assert!(known("0.3.1") && !known("2.0.0"));
    }
}
