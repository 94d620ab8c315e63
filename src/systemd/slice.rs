//! systemd's slice names: checking one a client gives (`cgroup_parent` with
//! the systemd driver, as kubelet sends it: `kubepods-burstable-pod<uid>.slice`)
//! and expanding it to its cgroup path the way systemd does, each dash a
//! level: `kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice`.

/// Why a slice name is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} is not a systemd slice name ({why}); the systemd cgroup driver takes a slice such as kubepods-burstable-pod1.slice", crate::quote::quote(.name))]
pub(crate) struct BadSlice {
    pub(crate) name: String,
    pub(crate) why: &'static str,
}

/// The longest unit name systemd accepts.
const UNIT_NAME_MAX: usize = 255;

/// The cgroup path (relative to the hierarchy's root, no leading `/`) of
/// slice `name`; `-.slice` (the root slice) is the empty path.
pub(crate) fn expand(name: &str) -> Result<String, BadSlice> {
    let bad = |why| BadSlice { name: name.to_string(), why };
    if name == "-.slice" {
        return Ok(String::new());
    }
    if name.len() > UNIT_NAME_MAX {
        return Err(bad("longer than 255 bytes"));
    }
    let Some(stem) = name.strip_suffix(".slice") else { return Err(bad("it does not end in .slice")) };
    if stem.is_empty() {
        return Err(bad("the name before .slice is empty"));
    }
    if !stem.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.:@\\".contains(&b)) {
        return Err(bad("only letters, digits and _-.:@\\ may name a slice"));
    }
    if stem.starts_with('-') || stem.ends_with('-') || stem.contains("--") {
        return Err(bad("a dash may not begin or end it, nor follow another"));
    }
    let mut levels = Vec::new();
    let mut prefix = String::new();
    for part in stem.split('-') {
        if !prefix.is_empty() {
            prefix.push('-');
        }
        prefix.push_str(part);
        levels.push(format!("{prefix}.slice"));
    }
    Ok(levels.join("/"))
}

/// A `cgroup_parent` given with the systemd driver: a slice name, or the
/// slice's own expanded path (`/kubepods.slice/kubepods-pod1.slice`).
/// Returns the expanded path.
pub(crate) fn parse_parent(parent: &str) -> Result<String, BadSlice> {
    let trimmed = parent.trim_matches('/');
    let leaf = trimmed.rsplit('/').next().unwrap_or(trimmed);
    let expanded = expand(leaf).map_err(|e| BadSlice { name: parent.to_string(), why: e.why })?;
    if trimmed.contains('/') && expanded != trimmed {
        return Err(BadSlice { name: parent.to_string(), why: "a path must be the slice's own expansion" });
    }
    Ok(expanded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_expand_one_level_per_dash() {
        assert_eq!(
            expand("kubepods-burstable-pod1_2.slice").unwrap(),
            "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1_2.slice"
        );
        assert_eq!(expand("system.slice").unwrap(), "system.slice");
        assert_eq!(expand("-.slice").unwrap(), "");
    }

    #[test]
    fn bad_slices_are_refused_with_the_reason() {
        assert_eq!(expand("kubepods").unwrap_err().why, "it does not end in .slice");
        assert!(expand(".slice").is_err());
        assert!(expand("a--b.slice").is_err());
        assert!(expand("-a.slice").is_err());
        assert!(expand("a-.slice").is_err());
        assert!(expand("a/b.slice").is_err());
        assert!(expand(&format!("{}.slice", "a".repeat(300))).is_err());
        let message = expand("/kubepods/burstable").unwrap_err().to_string();
        assert!(message.contains("kubepods-burstable-pod1.slice"), "{message}");
    }

    #[test]
    fn a_parent_is_a_slice_name_or_its_own_expansion() {
        let expanded = "kubepods.slice/kubepods-pod1.slice";
        assert_eq!(parse_parent("kubepods-pod1.slice").unwrap(), expanded);
        assert_eq!(parse_parent("/kubepods.slice/kubepods-pod1.slice").unwrap(), expanded);
        assert!(parse_parent("/other.slice/kubepods-pod1.slice").is_err());
        assert!(parse_parent("/kubepods/burstable/pod1").is_err());
    }
}
