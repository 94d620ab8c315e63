//! Registry credentials (from CRI's AuthConfig) and the `WWW-Authenticate`
//! challenges of the distribution protocol. Secrets never appear in `Debug`
//! output or in errors.

use std::collections::HashMap;
use std::fmt;

use base64::Engine;

/// What a pull presents to a registry.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub(crate) enum Credentials {
    #[default]
    Anonymous,
    Basic {
        username: String,
        password: String,
    },
    /// An OAuth2 refresh token exchanged at the token service (docker's `identitytoken`).
    IdentityToken(String),
    /// A bearer token sent as it is (docker's `registrytoken`).
    RegistryToken(String),
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Anonymous => f.write_str("Anonymous"),
            Self::Basic { username, .. } => write!(f, "Basic({username:?}, <redacted>)"),
            Self::IdentityToken(_) => f.write_str("IdentityToken(<redacted>)"),
            Self::RegistryToken(_) => f.write_str("RegistryToken(<redacted>)"),
        }
    }
}

/// Why CRI credentials are unusable (the secret itself is never quoted).
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
#[error("auth.auth is not base64 of \"username:password\"")]
pub(crate) struct BadAuthField;

impl Credentials {
    /// From the fields of CRI's AuthConfig, in the order containerd reads them.
    pub(crate) fn from_cri(
        username: &str,
        password: &str,
        auth: &str,
        identity_token: &str,
        registry_token: &str,
    ) -> Result<Self, BadAuthField> {
        if !registry_token.is_empty() {
            return Ok(Self::RegistryToken(registry_token.to_string()));
        }
        if !identity_token.is_empty() {
            return Ok(Self::IdentityToken(identity_token.to_string()));
        }
        if !username.is_empty() {
            return Ok(Self::Basic { username: username.to_string(), password: password.to_string() });
        }
        if !auth.is_empty() {
            let decoded = base64::engine::general_purpose::STANDARD.decode(auth.trim()).map_err(|_| BadAuthField)?;
            let text = String::from_utf8(decoded).map_err(|_| BadAuthField)?;
            let (username, password) = text.split_once(':').ok_or(BadAuthField)?;
            return Ok(Self::Basic { username: username.to_string(), password: password.to_string() });
        }
        Ok(Self::Anonymous)
    }

    /// The `Authorization` value of HTTP basic auth, when these are a username and password.
    pub(crate) fn basic_header(&self) -> Option<String> {
        match self {
            Self::Basic { username, password } => Some(format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{username}:{password}"))
            )),
            _ => None,
        }
    }
}

/// A parsed `WWW-Authenticate` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Challenge {
    /// Lowercase: `bearer` or `basic`.
    pub(crate) scheme: String,
    /// Parameter names lowercased.
    pub(crate) params: HashMap<String, String>,
}

impl Challenge {
    /// Parses `Scheme k="v", k2=v2` (the first challenge when there are several).
    pub(crate) fn parse(header: &str) -> Option<Self> {
        let header = header.trim();
        let (scheme, mut rest) = header.split_once(' ').unwrap_or((header, ""));
        if scheme.is_empty() {
            return None;
        }
        let mut params = HashMap::new();
        loop {
            rest = rest.trim_start_matches([' ', ',']);
            let Some((key, after)) = rest.split_once('=') else { break };
            let key = key.trim().to_ascii_lowercase();
            let (value, after) = if let Some(quoted) = after.strip_prefix('"') {
                let mut value = String::new();
                let mut chars = quoted.char_indices();
                let mut end = quoted.len();
                while let Some((i, c)) = chars.next() {
                    match c {
                        '\\' => value.extend(chars.next().map(|(_, c)| c)),
                        '"' => {
                            end = i + 1;
                            break;
                        }
                        c => value.push(c),
                    }
                }
                (value, &quoted[end..])
            } else {
                let end = after.find(',').unwrap_or(after.len());
                (after[..end].trim().to_string(), &after[end..])
            };
            if key.contains(' ') {
                // The start of a second challenge: only the first is used.
                break;
            }
            params.insert(key, value);
            rest = after;
        }
        Some(Self { scheme: scheme.to_ascii_lowercase(), params })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_challenge() {
        let c = Challenge::parse(
            r#"Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull""#,
        )
        .unwrap();
        assert_eq!(c.scheme, "bearer");
        assert_eq!(c.params["realm"], "https://auth.example/token");
        assert_eq!(c.params["service"], "registry.example");
        assert_eq!(c.params["scope"], "repository:a/b:pull");
    }

    #[test]
    fn basic_challenge_and_unquoted_values() {
        let c = Challenge::parse(r#"Basic realm=Registry"#).unwrap();
        assert_eq!(c.scheme, "basic");
        assert_eq!(c.params["realm"], "Registry");
    }

    #[test]
    fn cri_auth_fields() {
        let auth = base64::engine::general_purpose::STANDARD.encode("u:p:w");
        assert_eq!(
            Credentials::from_cri("", "", &auth, "", ""),
            Ok(Credentials::Basic { username: "u".into(), password: "p:w".into() })
        );
        assert_eq!(Credentials::from_cri("", "", "!!", "", ""), Err(BadAuthField));
        assert_eq!(Credentials::from_cri("", "", "", "", "t"), Ok(Credentials::RegistryToken("t".into())));
        assert_eq!(Credentials::from_cri("", "", "", "", ""), Ok(Credentials::Anonymous));
        let shown = format!("{:?}", Credentials::Basic { username: "u".into(), password: "secret".into() });
        assert!(!shown.contains("secret"));
    }
}
