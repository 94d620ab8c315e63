//! Stop signals: the CRI config's, else the image's StopSignal, else SIGTERM.

use crate::api::Signal as CriSignal;

/// Parses `SIGTERM`, `TERM`, `15` or `SIGRTMIN+3` into a signal number.
pub(crate) fn parse(name: &str) -> Option<i32> {
    let name = name.trim();
    if let Ok(n) = name.parse::<i32>() {
        return (1..=64).contains(&n).then_some(n);
    }
    let upper = name.to_ascii_uppercase();
    let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
    if let Some(rt) = bare.strip_prefix("RTMIN") {
        let offset: i32 = if rt.is_empty() { 0 } else { rt.strip_prefix('+')?.parse().ok()? };
        let n = libc::SIGRTMIN() + offset;
        return (n <= libc::SIGRTMAX()).then_some(n);
    }
    if let Some(rt) = bare.strip_prefix("RTMAX") {
        let offset: i32 = if rt.is_empty() { 0 } else { rt.strip_prefix('-')?.parse().ok()? };
        let n = libc::SIGRTMAX() - offset;
        return (n >= libc::SIGRTMIN()).then_some(n);
    }
    let full = format!("SIG{bare}");
    match full.as_str() {
        "SIGCLD" => Some(libc::SIGCHLD),
        "SIGPOLL" => Some(libc::SIGIO),
        "SIGIOT" => Some(libc::SIGABRT),
        _ => full.parse::<nix::sys::signal::Signal>().ok().map(|s| s as i32),
    }
}

/// The signal a CRI `Signal` value names; None for RUNTIME_DEFAULT.
pub(crate) fn from_cri(value: i32) -> Option<i32> {
    let signal = CriSignal::try_from(value).ok()?;
    if signal == CriSignal::RuntimeDefault {
        return None;
    }
    parse(signal.as_str_name().strip_prefix("SIGNAL_")?)
}

/// The CRI `Signal` for a signal number (RUNTIME_DEFAULT when it has no name there).
pub(crate) fn to_cri(signal: i32) -> CriSignal {
    nix::sys::signal::Signal::try_from(signal)
        .ok()
        .and_then(|s| CriSignal::from_str_name(&format!("SIGNAL_{}", s.as_str())))
        .unwrap_or(CriSignal::RuntimeDefault)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_numbers_and_realtime() {
        assert_eq!(parse("SIGTERM"), Some(15));
        assert_eq!(parse("term"), Some(15));
        assert_eq!(parse("9"), Some(9));
        assert_eq!(parse("SIGRTMIN+3"), Some(libc::SIGRTMIN() + 3));
        assert_eq!(parse("SIGNOPE"), None);
        assert_eq!(parse("0"), None);
        assert_eq!(from_cri(CriSignal::Sigquit as i32), Some(libc::SIGQUIT));
        assert_eq!(from_cri(CriSignal::RuntimeDefault as i32), None);
        assert_eq!(to_cri(libc::SIGINT), CriSignal::Sigint);
    }
}
