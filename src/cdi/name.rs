//! CDI device names: the fully-qualified form `vendor.com/class=name`, the
//! spec files' `kind` (`vendor.com/class`), and which devices a container
//! asks for (its CRI `CDI_devices`, then its `cdi.k8s.io/*` annotations as
//! containerd reads them: comma-separated qualified names).

use std::collections::HashSet;
use std::fmt;

use crate::api;
use crate::quote::quote;

/// The annotation key prefix whose values name CDI devices.
pub(crate) const ANNOTATION_PREFIX: &str = "cdi.k8s.io/";

/// The longest qualified name taken (the spec bounds its parts: a DNS
/// subdomain of 253 bytes, a class of 63; a device name has no stated bound).
const MAX_NAME: usize = 1024;

/// A fully-qualified device name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct QualifiedName {
    pub(crate) vendor: String,
    pub(crate) class: String,
    pub(crate) name: String,
}

impl fmt::Display for QualifiedName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}={}", self.vendor, self.class, self.name)
    }
}

fn letter(c: char) -> bool {
    c.is_ascii_alphabetic()
}

fn alphanumeric(c: char) -> bool {
    c.is_ascii_alphanumeric()
}

/// A vendor or class name: a letter first, a letter or digit last, and
/// letters, digits, `_`, `-` and `.` between.
pub(crate) fn check_vendor_or_class(what: &str, value: &str) -> Result<(), String> {
    let mut chars = value.chars();
    let Some(first) = chars.next() else { return Err(format!("empty {what}")) };
    if !letter(first) {
        return Err(format!("{what} {} must start with a letter", quote(value)));
    }
    if !value.chars().all(|c| alphanumeric(c) || matches!(c, '_' | '-' | '.')) {
        return Err(format!("{what} {} may hold only letters, digits, '_', '-' and '.'", quote(value)));
    }
    if !value.chars().last().is_some_and(alphanumeric) {
        return Err(format!("{what} {} must end with a letter or digit", quote(value)));
    }
    Ok(())
}

/// A device name: a letter or digit first and last, and letters, digits,
/// `_`, `-`, `.` and `:` between.
pub(crate) fn check_device_name(value: &str) -> Result<(), String> {
    let ends = |c: Option<char>| c.is_some_and(alphanumeric);
    if value.is_empty() {
        return Err("empty device name".into());
    }
    if !ends(value.chars().next()) || !ends(value.chars().last()) {
        return Err(format!("device name {} must start and end with a letter or digit", quote(value)));
    }
    if !value.chars().all(|c| alphanumeric(c) || matches!(c, '_' | '-' | '.' | ':')) {
        return Err(format!("device name {} may hold only letters, digits, '_', '-', '.' and ':'", quote(value)));
    }
    Ok(())
}

/// A spec's `kind`, `vendor/class`: (vendor, class).
pub(crate) fn parse_kind(kind: &str) -> Result<(String, String), String> {
    let Some((vendor, class)) = kind.split_once('/') else {
        return Err(format!("kind {} is not vendor/class", quote(kind)));
    };
    check_vendor_or_class("vendor", vendor)?;
    check_vendor_or_class("class", class)?;
    Ok((vendor.to_string(), class.to_string()))
}

impl QualifiedName {
    /// Parses `vendor/class=name`, each part checked.
    pub(crate) fn parse(value: &str) -> Result<Self, String> {
        let not_qualified =
            || format!("{} is not a fully-qualified CDI device name (vendor.com/class=name)", quote(value));
        if value.len() > MAX_NAME {
            return Err(format!("{} is longer than {MAX_NAME} bytes", quote(value)));
        }
        let (kind, name) = value.split_once('=').ok_or_else(not_qualified)?;
        if !kind.contains('/') || name.is_empty() {
            return Err(not_qualified());
        }
        let (vendor, class) = parse_kind(kind).map_err(|e| format!("{}: {e}", not_qualified()))?;
        check_device_name(name).map_err(|e| format!("{}: {e}", not_qualified()))?;
        Ok(Self { vendor, class, name: name.to_string() })
    }
}

/// One device a container asks for, with the request field that names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Requested {
    /// `config.CDI_devices[2]` or `config.annotations["cdi.k8s.io/x"]`.
    pub(crate) field: String,
    pub(crate) name: QualifiedName,
}

/// A request field naming something that is not a qualified device name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {why}")]
pub(crate) struct RequestError {
    pub(crate) field: String,
    pub(crate) why: String,
}

/// The devices `config` asks for: its `CDI_devices` in order, then those of
/// its `cdi.k8s.io/*` annotations (by key; each value a comma-separated
/// list). A device named twice counts once, where it is first named.
pub(crate) fn requested(config: &api::ContainerConfig) -> Result<Vec<Requested>, RequestError> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let mut take = |field: String, value: &str| -> Result<(), RequestError> {
        let name = QualifiedName::parse(value).map_err(|why| RequestError { field: field.clone(), why })?;
        if seen.insert(name.clone()) {
            out.push(Requested { field, name });
        }
        Ok(())
    };
    for (i, device) in config.cdi_devices.iter().enumerate() {
        take(format!("config.CDI_devices[{i}]"), &device.name)?;
    }
    let mut keys: Vec<&String> = config.annotations.keys().filter(|k| k.starts_with(ANNOTATION_PREFIX)).collect();
    keys.sort();
    for key in keys {
        let field = format!("config.annotations[{}]", quote(key));
        for value in config.annotations[key].split(',') {
            take(field.clone(), value)?;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qualified_names_parse_and_bad_ones_say_why() {
        let n = QualifiedName::parse("vendor.com/gpu=0").unwrap();
        assert_eq!((n.vendor.as_str(), n.class.as_str(), n.name.as_str()), ("vendor.com", "gpu", "0"));
        assert_eq!(n.to_string(), "vendor.com/gpu=0");
        assert!(QualifiedName::parse("nvidia.com/gpu=GPU-0a1b:mig-1.2").is_ok());
        assert!(QualifiedName::parse("foo.bar.baz/foo-bar123.B_az=all").is_ok());
        for bad in [
            "",
            "gpu0",
            "vendor.com/gpu",
            "vendor.com/gpu=",
            "=x",
            "/dev/null",
            "vendor.com=0",
            "vendor.com/gpu/x=0",
            "1vendor.com/gpu=0",
            "vendor.com/gpu-=0",
            "vendor.com/gpu=-0",
            "vendor.com/gpu=a b",
            "vendor.com/gpu=0=1",
        ] {
            let err = QualifiedName::parse(bad).unwrap_err();
            assert!(err.contains("not a fully-qualified CDI device name"), "{bad}: {err}");
        }
        let long = format!("v.com/c={}", "a".repeat(5000));
        assert!(QualifiedName::parse(&long).unwrap_err().contains("longer than 1024 bytes"));
    }

    #[test]
    fn requests_come_from_the_field_then_the_annotations_once_each() {
        let mut config = api::ContainerConfig {
            cdi_devices: vec![api::CdiDevice { name: "a.com/x=1".into() }, api::CdiDevice { name: "a.com/x=0".into() }],
            ..Default::default()
        };
        config.annotations.insert("cdi.k8s.io/z".into(), "b.com/y=0,a.com/x=1".into());
        config.annotations.insert("cdi.k8s.io/a".into(), "c.com/w=0".into());
        config.annotations.insert("other/key".into(), "not a name".into());
        let got: Vec<(String, String)> =
            requested(&config).unwrap().into_iter().map(|r| (r.field, r.name.to_string())).collect();
        assert_eq!(
            got,
            [
                ("config.CDI_devices[0]".to_string(), "a.com/x=1".to_string()),
                ("config.CDI_devices[1]".into(), "a.com/x=0".into()),
                ("config.annotations[\"cdi.k8s.io/a\"]".into(), "c.com/w=0".into()),
                ("config.annotations[\"cdi.k8s.io/z\"]".into(), "b.com/y=0".into()),
            ]
        );
        config.cdi_devices.push(api::CdiDevice { name: "gpu0".into() });
        let err = requested(&config).unwrap_err();
        assert_eq!(err.field, "config.CDI_devices[2]");
        config.cdi_devices.pop();
        config.annotations.insert("cdi.k8s.io/bad".into(), "a.com/x=1,,".into());
        assert_eq!(requested(&config).unwrap_err().field, "config.annotations[\"cdi.k8s.io/bad\"]");
    }
}
