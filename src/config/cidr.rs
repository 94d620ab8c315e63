//! Pod CIDR lists as the config and `UpdateRuntimeConfig` give them: one or
//! two networks (one per address family), comma-separated.

use ipnet::IpNet;

/// Parses `10.88.0.0/16` or `10.88.0.0/16,fd00:88::/64`; at most one network
/// per family.
pub(crate) fn parse_list(text: &str) -> Result<Vec<IpNet>, String> {
    let mut nets: Vec<IpNet> = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let net: IpNet = part.parse().map_err(|_| format!("{} is not a CIDR", crate::quote::quote(part)))?;
        if net != net.trunc() {
            return Err(format!("{} has host bits set (the network is {})", crate::quote::quote(part), net.trunc()));
        }
        if nets.iter().any(|n| std::mem::discriminant(n) == std::mem::discriminant(&net)) {
            return Err("at most one CIDR per address family".into());
        }
        if net.prefix_len() > net.max_prefix_len() - 2 {
            return Err(format!("{net} is too small for pods"));
        }
        nets.push(net);
    }
    if nets.is_empty() {
        return Err("no CIDR given".into());
    }
    Ok(nets)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_and_bad_ones_are_refused() {
        assert_eq!(parse_list("10.88.0.0/16").unwrap().len(), 1);
        assert_eq!(parse_list("10.88.0.0/16, fd00:88::/64").unwrap().len(), 2);
        assert!(parse_list("10.88.0.1/16").is_err());
        assert!(parse_list("10.88.0.0/16,10.89.0.0/16").is_err());
        assert!(parse_list("nonsense").is_err());
        assert!(parse_list("").is_err());
        assert!(parse_list("10.0.0.0/31").is_err());
    }
}
