//! Image references as docker and containerd read them: `busybox` is
//! `docker.io/library/busybox:latest`, `localhost:5000/x` keeps its registry,
//! `name@sha256:…` names a manifest by digest. Parsing validates the grammar
//! and normalises, so equal references compare equal as strings.

use std::fmt;

use super::digest::Digest;

pub(crate) const DEFAULT_DOMAIN: &str = "docker.io";
const LEGACY_DOMAIN: &str = "index.docker.io";
const OFFICIAL_PREFIX: &str = "library/";
pub(crate) const DEFAULT_TAG: &str = "latest";
const MAX_NAME: usize = 255;
const MAX_TAG: usize = 128;

/// A normalised image reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    /// Registry host with optional port, e.g. `docker.io`, `localhost:5000`.
    pub(crate) domain: String,
    /// Repository path, e.g. `library/busybox`.
    pub(crate) path: String,
    /// The tag; `latest` when the reference names neither tag nor digest.
    pub tag: Option<String>,
    pub digest: Option<Digest>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} is not a valid image reference: {why}", crate::quote::quote(.reference))]
pub struct ReferenceError {
    pub(crate) reference: String,
    pub(crate) why: String,
}

impl Reference {
    /// Parses and normalises `text`.
    pub fn parse(text: &str) -> Result<Self, ReferenceError> {
        let err = |why: String| ReferenceError { reference: text.to_string(), why };
        if text.is_empty() {
            return Err(err("it is empty".into()));
        }
        if let Some(c) = text.chars().find(|c| c.is_whitespace() || c.is_control()) {
            return Err(err(format!("it contains {c:?}")));
        }
        let (rest, digest) = match text.split_once('@') {
            Some((rest, digest)) => (rest, Some(digest.parse::<Digest>().map_err(|e| err(e.to_string()))?)),
            None => (text, None),
        };
        // A tag is what follows the last ':' when no '/' comes after it (a
        // ':' before a '/' is the registry's port).
        let (name, tag) = match rest.rfind(':') {
            Some(i) if !rest[i + 1..].contains('/') => (&rest[..i], Some(&rest[i + 1..])),
            _ => (rest, None),
        };
        if let Some(tag) = tag {
            validate_tag(tag).map_err(err)?;
        }
        if name.len() > MAX_NAME {
            return Err(err(format!("the repository name is longer than {MAX_NAME} characters")));
        }
        let (domain, path) = split_domain(name);
        validate_domain(domain).map_err(err)?;
        validate_path(&path).map_err(err)?;
        let tag = match (tag, &digest) {
            (Some(tag), _) => Some(tag.to_string()),
            (None, None) => Some(DEFAULT_TAG.to_string()),
            (None, Some(_)) => None,
        };
        Ok(Self { domain: domain.to_string(), path, tag, digest })
    }

    /// `domain/path`, e.g. `docker.io/library/busybox`.
    pub fn repository(&self) -> String {
        format!("{}/{}", self.domain, self.path)
    }

    /// `repository:tag` when the reference has a tag.
    pub fn tagged(&self) -> Option<String> {
        self.tag.as_ref().map(|t| format!("{}:{t}", self.repository()))
    }

    /// `repository@digest` when the reference has a digest.
    pub fn digested(&self) -> Option<String> {
        self.digest.as_ref().map(|d| format!("{}@{d}", self.repository()))
    }

    /// `repository@digest` for another digest (a repo digest of this repository).
    pub(crate) fn with_digest(&self, digest: &Digest) -> String {
        format!("{}@{digest}", self.repository())
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.repository())?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

/// Splits off the registry: the first component is one when it has a '.' or
/// ':', is `localhost`, or has uppercase letters (repository paths cannot).
fn split_domain(name: &str) -> (&str, String) {
    let (domain, path) = match name.split_once('/') {
        Some((first, rest))
            if first.contains(['.', ':']) || first == "localhost" || first.chars().any(|c| c.is_ascii_uppercase()) =>
        {
            (first, rest.to_string())
        }
        _ => (DEFAULT_DOMAIN, name.to_string()),
    };
    let domain = if domain == LEGACY_DOMAIN { DEFAULT_DOMAIN } else { domain };
    let path = if domain == DEFAULT_DOMAIN && !path.contains('/') { format!("{OFFICIAL_PREFIX}{path}") } else { path };
    (domain, path)
}

fn validate_tag(tag: &str) -> Result<(), String> {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut chars = tag.chars();
    match chars.next() {
        None => return Err("the tag after ':' is empty".into()),
        Some(c) if !word(c) => {
            return Err(format!("the tag {} must start with a letter, digit or '_'", crate::quote::quote(tag)))
        }
        _ => {}
    }
    if !chars.all(|c| word(c) || c == '.' || c == '-') {
        return Err(format!("the tag {} may only contain letters, digits, '_', '.' and '-'", crate::quote::quote(tag)));
    }
    if tag.len() > MAX_TAG {
        return Err(format!("the tag is longer than {MAX_TAG} characters"));
    }
    Ok(())
}

fn validate_domain(domain: &str) -> Result<(), String> {
    let bad = || Err(format!("{} is not a registry host[:port]", crate::quote::quote(domain)));
    let (host, port) = if let Some(rest) = domain.strip_prefix('[') {
        // [IPv6]:port
        let Some((ip, after)) = rest.split_once(']') else { return bad() };
        if ip.parse::<std::net::Ipv6Addr>().is_err() {
            return bad();
        }
        match after {
            "" => return Ok(()),
            _ => match after.strip_prefix(':') {
                Some(port) => ("", Some(port)),
                None => return bad(),
            },
        }
    } else {
        match domain.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (domain, None),
        }
    };
    if let Some(port) = port {
        if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
            return bad();
        }
    }
    if domain.starts_with('[') {
        return Ok(());
    }
    let component_ok = |c: &str| {
        !c.is_empty()
            && c.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !c.starts_with('-')
            && !c.ends_with('-')
    };
    if host.split('.').all(component_ok) {
        Ok(())
    } else {
        bad()
    }
}

fn validate_path(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("the repository name is empty".into());
    }
    for component in path.split('/') {
        validate_path_component(component)
            .map_err(|why| format!("repository path component {} {why}", crate::quote::quote(component)))?;
    }
    Ok(())
}

/// `[a-z0-9]+` runs joined by one separator: `.`, `_`, `__` or a run of `-`.
fn validate_path_component(component: &str) -> Result<(), &'static str> {
    if component.is_empty() {
        return Err("is empty");
    }
    if component.bytes().any(|b| b.is_ascii_uppercase()) {
        return Err("must be lowercase");
    }
    let bytes = component.as_bytes();
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    if !alnum(bytes[0]) || !alnum(bytes[bytes.len() - 1]) {
        return Err("must start and end with a lowercase letter or digit");
    }
    let mut i = 0;
    while i < bytes.len() {
        if alnum(bytes[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && !alnum(bytes[i]) {
            i += 1;
        }
        let separator = &component[start..i];
        let ok = matches!(separator, "." | "_" | "__") || separator.bytes().all(|b| b == b'-');
        if !ok {
            return Err("may only join lowercase letters and digits with '.', '_', '__' or '-'");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

    fn norm(s: &str) -> String {
        Reference::parse(s).unwrap().to_string()
    }

    #[test]
    fn normalises_like_docker() {
        assert_eq!(norm("busybox"), "docker.io/library/busybox:latest");
        assert_eq!(norm("busybox:1.36"), "docker.io/library/busybox:1.36");
        assert_eq!(norm("library/busybox"), "docker.io/library/busybox:latest");
        assert_eq!(norm("docker.io/busybox"), "docker.io/library/busybox:latest");
        assert_eq!(norm("index.docker.io/library/busybox"), "docker.io/library/busybox:latest");
        assert_eq!(norm("someone/app:v1"), "docker.io/someone/app:v1");
        assert_eq!(norm("localhost/x"), "localhost/x:latest");
        assert_eq!(norm("localhost:5000/x"), "localhost:5000/x:latest");
        assert_eq!(norm("localhost:5000/a/b/c:tag"), "localhost:5000/a/b/c:tag");
        assert_eq!(norm("registry.k8s.io/pause:3.9"), "registry.k8s.io/pause:3.9");
        assert_eq!(norm("Registry.Example/x"), "Registry.Example/x:latest");
        assert_eq!(norm("127.0.0.1:5000/x"), "127.0.0.1:5000/x:latest");
        assert_eq!(norm("[::1]:5000/x"), "[::1]:5000/x:latest");
        assert_eq!(norm("a__b-c---d/f_g.h"), "docker.io/a__b-c---d/f_g.h:latest");
    }

    #[test]
    fn digests_and_tags() {
        let r = Reference::parse(&format!("busybox@sha256:{HEX}")).unwrap();
        assert_eq!(r.tag, None);
        assert_eq!(r.digested().unwrap(), format!("docker.io/library/busybox@sha256:{HEX}"));
        assert_eq!(r.tagged(), None);
        let r = Reference::parse(&format!("localhost:5000/x:v2@sha256:{HEX}")).unwrap();
        assert_eq!(r.tag.as_deref(), Some("v2"));
        assert_eq!(r.to_string(), format!("localhost:5000/x:v2@sha256:{HEX}"));
        assert_eq!(r.repository(), "localhost:5000/x");
    }

    #[test]
    fn refuses_garbage_with_a_reason() {
        for bad in [
            "",
            "Busybox",
            "busybox:",
            "busybox:-x",
            "busybox:a/b",
            "-busybox",
            "busy..box",
            "a//b",
            "bad host:5000/x",
            "localhost:port/x",
            "busybox@sha256:123",
            "busybox@md5:abc",
            "with space",
            "x/",
            "/x",
            ":tag",
        ] {
            let e = Reference::parse(bad).expect_err(bad);
            assert!(!e.why.is_empty(), "{bad}");
        }
        assert!(Reference::parse(&"a".repeat(256)).unwrap_err().why.contains("255"));
        assert!(Reference::parse(&format!("x:{}", "t".repeat(129))).unwrap_err().why.contains("128"));
    }
}
