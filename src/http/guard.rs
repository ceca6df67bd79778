//! Refusing what a web page could make a browser send: requests for another host name (DNS
//! rebinding) and cross-site state changes.
//!
//! * **Host.** A page on `evil.example` whose name re-resolves to 127.0.0.1 is same-origin with
//!   the daemon as far as the browser knows, but its requests carry `Host: evil.example`. Unless
//!   every host is allowed, only the loopback names, the address the daemon listens on and the
//!   `--allowed-host` names pass; others get 421 before routing. Every host is allowed when a
//!   token protects the daemon and no `--allowed-host` was given (a page cannot know the token),
//!   or with `--allowed-host '*'`.
//! * **Origin.** A state-changing request (any method but GET, HEAD, OPTIONS) from a browser
//!   must come from the daemon's own origin or an origin CORS allows: a page elsewhere can send
//!   a body-less POST (`/cancel`, `/terminate`, …) without any preflight. Browsers say where a
//!   request comes from in `Origin` (and `Sec-Fetch-Site`); clients that are not browsers send
//!   neither and pass.

use std::net::IpAddr;

use axum::extract::{Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::problem::Problem;

/// Which hosts and origins the daemon answers.
#[derive(Debug, Clone)]
pub struct BrowserGuard {
    /// Allowed host names, lowercase, without port; `None` = any.
    hosts: Option<Vec<String>>,
    /// Origins CORS allows (`*` = any).
    origins: Vec<String>,
}

impl BrowserGuard {
    /// The guard of a daemon listening on `bind`, with the extra `allowed_hosts`, the CORS
    /// `origins`, and whether a token is required.
    pub fn new(
        bind: Option<IpAddr>,
        allowed_hosts: &[String],
        origins: &[String],
        token_required: bool,
    ) -> BrowserGuard {
        let any_host =
            allowed_hosts.iter().any(|h| h == "*") || (token_required && allowed_hosts.is_empty());
        let hosts = (!any_host).then(|| {
            let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "::1"]
                .iter()
                .map(|h| (*h).to_owned())
                .collect();
            if let Some(ip) = bind.filter(|ip| !ip.is_unspecified()) {
                hosts.push(ip.to_string());
            }
            hosts.extend(allowed_hosts.iter().map(|h| h.to_ascii_lowercase()));
            hosts
        });
        BrowserGuard {
            hosts,
            origins: origins.to_vec(),
        }
    }

    /// True when requests naming `host` (a `Host` header value) are answered.
    fn host_allowed(&self, host: &str) -> bool {
        let Some(allowed) = &self.hosts else {
            return true;
        };
        let name = host_name(host).to_ascii_lowercase();
        allowed.contains(&name)
            || name.ends_with(".localhost")
            || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
    }

    /// True when a state change from a page at `origin` may pass, for a request to `host`.
    fn origin_allowed(&self, origin: &str, host: Option<&str>) -> bool {
        if self
            .origins
            .iter()
            .any(|o| o == "*" || o.eq_ignore_ascii_case(origin))
        {
            return true;
        }
        // The daemon's own origin: `scheme://<the Host header>`.
        let authority = origin
            .split_once("://")
            .map(|(_, rest)| rest.trim_end_matches('/'));
        matches!((authority, host), (Some(a), Some(h)) if a.eq_ignore_ascii_case(h))
    }
}

/// The host name of a `Host` value: without the port, and without brackets for IPv6.
fn host_name(host: &str) -> &str {
    let host = host.trim();
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match host.rsplit_once(':') {
        // One colon: name:port. More: a bare IPv6 address.
        Some((name, port)) if !name.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) => {
            name
        }
        _ => host,
    }
}

/// The middleware: refuses what the guard does not allow, before routing.
pub async fn guard(State(guard): State<BrowserGuard>, req: Request, next: Next) -> Response {
    let headers = req.headers();
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| req.uri().authority().map(|a| a.as_str().to_owned()));
    if let Some(host) = host.as_deref() {
        if !guard.host_allowed(host) {
            return Problem::new(
                "host_not_allowed",
                StatusCode::MISDIRECTED_REQUEST,
                format!(
                    "this daemon does not answer for the host `{}`; start it with --allowed-host to add one",
                    host_name(host)
                ),
            )
            .into_response();
        }
    }
    let changes_state = !matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS)
        || headers.contains_key(header::UPGRADE);
    if changes_state {
        let origin = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok());
        let cross_site = headers
            .get("sec-fetch-site")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|s| {
                s.eq_ignore_ascii_case("cross-site") || s.eq_ignore_ascii_case("same-site")
            });
        let refused = match origin {
            Some(origin) => !guard.origin_allowed(origin, host.as_deref()),
            None => cross_site,
        };
        if refused {
            return Problem::new(
                "origin_not_allowed",
                StatusCode::FORBIDDEN,
                format!(
                    "requests from the web page at `{}` may not change anything here; allow its origin with --cors-allow-origin",
                    origin.unwrap_or("another site")
                ),
            )
            .into_response();
        }
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open_loopback() -> BrowserGuard {
        BrowserGuard::new(Some(IpAddr::from([127, 0, 0, 1])), &[], &[], false)
    }

    #[test]
    fn host_names_lose_their_port_and_brackets() {
        assert_eq!(host_name("localhost:2468"), "localhost");
        assert_eq!(host_name("[::1]:2468"), "::1");
        assert_eq!(host_name("::1"), "::1");
        assert_eq!(host_name("Example.COM"), "Example.COM");
    }

    #[test]
    fn an_open_daemon_answers_loopback_names_and_its_address_only() {
        let g = BrowserGuard::new(Some(IpAddr::from([10, 0, 0, 5])), &[], &[], false);
        for host in [
            "localhost:2468",
            "127.0.0.1:2468",
            "[::1]:2468",
            "10.0.0.5:2468",
            "127.0.0.2",
        ] {
            assert!(g.host_allowed(host), "{host}");
        }
        for host in ["evil.example", "evil.example:2468", "10.0.0.6:2468"] {
            assert!(!g.host_allowed(host), "{host}");
        }
    }

    #[test]
    fn allowed_hosts_add_names_and_star_allows_any() {
        let g = BrowserGuard::new(None, &["Sandbox-1".into()], &[], false);
        assert!(g.host_allowed("sandbox-1:2468"));
        assert!(!g.host_allowed("sandbox-2:2468"));
        let any = BrowserGuard::new(None, &["*".into()], &[], false);
        assert!(any.host_allowed("whatever.example"));
    }

    #[test]
    fn a_token_protected_daemon_answers_any_host_unless_hosts_are_listed() {
        assert!(BrowserGuard::new(None, &[], &[], true).host_allowed("sandbox:2468"));
        let listed = BrowserGuard::new(None, &["api.example".into()], &[], true);
        assert!(!listed.host_allowed("sandbox:2468"));
    }

    #[test]
    fn origins_pass_when_cors_allows_them_or_they_are_the_daemons_own() {
        let g = BrowserGuard::new(None, &[], &["https://app.example".into()], false);
        assert!(g.origin_allowed("https://app.example", Some("127.0.0.1:2468")));
        assert!(g.origin_allowed("http://127.0.0.1:2468", Some("127.0.0.1:2468")));
        assert!(!g.origin_allowed("https://evil.example", Some("127.0.0.1:2468")));
        assert!(!g.origin_allowed("null", Some("127.0.0.1:2468")));
        assert!(!open_loopback().origin_allowed("x", None));
    }
}
