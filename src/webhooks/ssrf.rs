//! Where a session's own webhooks may not go (SSRF): a client that may create sessions must
//! not make the daemon send requests to the daemon's own machine or the cloud's metadata
//! service. Refused, unless the operator lists the host (`--webhook-allow-host`): loopback,
//! unspecified, link-local (which holds the metadata address 169.254.169.254), multicast and
//! broadcast addresses, the IPv6 metadata address `fd00:ec2::254`, and IPv4-mapped forms of
//! them all; the names `localhost` and `*.localhost`.
//!
//! Checked twice: on the URL when the session is created ([`check_url`]), and on every address
//! a name resolves to when a delivery is made ([`GuardedResolver`]), so a name that later
//! resolves to a refused address (DNS rebinding) is refused too. Redirects are not followed.
//! The daemon's own endpoints (`--webhook-url`) are the operator's and are not checked.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::Url;

/// Whether a delivery may be sent to `ip`.
pub fn forbidden_ip(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => forbidden_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return forbidden_v4(v4);
            }
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                // fe80::/10
                || (v6.segments()[0] & 0xffc0) == 0xfe80
                || v6 == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254)
        }
    }
}

fn forbidden_v4(ip: Ipv4Addr) -> bool {
    ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_link_local()
        || ip.is_multicast()
        || ip.is_broadcast()
        // 0.0.0.0/8 reaches this host on Linux.
        || ip.octets()[0] == 0
}

/// Hosts the operator allows despite the rules (names or addresses, as written in URLs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowList(Arc<[String]>);

impl AllowList {
    pub fn new(hosts: &[String]) -> Self {
        AllowList(
            hosts
                .iter()
                .map(|h| h.trim_matches(['[', ']']).to_ascii_lowercase())
                .collect(),
        )
    }

    fn allows(&self, host: &str) -> bool {
        let host = host.trim_matches(['[', ']']).to_ascii_lowercase();
        self.0.contains(&host)
    }
}

/// Checks a session webhook's URL: `http` or `https`, a host, and not a refused address or
/// name unless allowed. The error says why without echoing more than the host.
pub fn check_url(url: &str, allow: &AllowList) -> Result<Url, String> {
    let parsed = Url::parse(url).map_err(|e| format!("is not a URL ({e})"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!(
            "has the scheme `{}`: use http or https",
            parsed.scheme()
        ));
    }
    let Some(host) = parsed.host_str() else {
        return Err("names no host".into());
    };
    if allow.allows(host) {
        return Ok(parsed);
    }
    let name = host.trim_end_matches('.').to_ascii_lowercase();
    if name == "localhost" || name.ends_with(".localhost") {
        return Err(format!(
            "goes to `{host}`, this machine (list it with --webhook-allow-host to allow it)"
        ));
    }
    if let Ok(ip) = host.trim_matches(['[', ']']).parse::<IpAddr>() {
        if forbidden_ip(ip) {
            return Err(format!(
                "goes to {ip}, a loopback, link-local or metadata address (list it with --webhook-allow-host to allow it)"
            ));
        }
    }
    Ok(parsed)
}

/// The resolver of the session webhooks' client: drops refused addresses of names not allowed,
/// and fails when none is left.
#[derive(Debug, Clone)]
pub struct GuardedResolver {
    pub allow: AllowList,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let allow = self.allow.clone();
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let allowed = allow.allows(&host);
            let kept: Vec<SocketAddr> = addrs
                .into_iter()
                .filter(|a| allowed || !forbidden_ip(a.ip()))
                .collect();
            if kept.is_empty() {
                return Err(format!(
                    "`{host}` resolves only to loopback, link-local or metadata addresses"
                )
                .into());
            }
            let addrs: Addrs = Box::new(kept.into_iter());
            Ok(addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_link_local_and_metadata_are_refused_unless_listed() {
        let none = AllowList::default();
        for bad in [
            "http://127.0.0.1:9/x",
            "http://[::1]/",
            "http://169.254.169.254/latest/meta-data",
            "http://[::ffff:127.0.0.1]/",
            "http://[fd00:ec2::254]/",
            "http://0.0.0.0:80/",
            "http://localhost:8080/",
            "http://api.localhost/",
            "ftp://example.com/",
            "not a url",
        ] {
            assert!(check_url(bad, &none).is_err(), "{bad} was allowed");
        }
        for good in ["https://hooks.example.com/in", "http://10.0.0.5:8080/hook"] {
            assert!(check_url(good, &none).is_ok(), "{good} was refused");
        }
        let listed = AllowList::new(&["127.0.0.1".into(), "LOCALHOST".into()]);
        assert!(check_url("http://127.0.0.1:9/x", &listed).is_ok());
        assert!(check_url("http://localhost:9/x", &listed).is_ok());
        assert!(check_url("http://[::1]:9/x", &listed).is_err());
    }

    #[tokio::test]
    async fn the_resolver_drops_refused_addresses() {
        let resolver = GuardedResolver {
            allow: AllowList::default(),
        };
        let name: Name = "localhost".parse().unwrap();
        assert!(resolver.resolve(name).await.is_err());
        let resolver = GuardedResolver {
            allow: AllowList::new(&["localhost".into()]),
        };
        let name: Name = "localhost".parse().unwrap();
        let addrs: Vec<SocketAddr> = resolver.resolve(name).await.unwrap().collect();
        assert!(addrs.iter().all(|a| a.ip().is_loopback()) && !addrs.is_empty());
    }
}
