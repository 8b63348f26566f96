//! The proxy for a request when the configuration names none (`proxy-url`): the environment,
//! read as Go's `http.ProxyFromEnvironment` reads it (golang.org/x/net/http/httpproxy), which
//! client-go uses.
//!
//! - `HTTPS_PROXY` (or `https_proxy`) for `https://` requests, `HTTP_PROXY` (or `http_proxy`)
//!   for `http://` ones; the upper-case name wins when both are set and non-empty. A value
//!   without a scheme (`proxy:3128`) means `http://proxy:3128`. `ALL_PROXY` is not read.
//! - `localhost` and loopback addresses (`127.0.0.0/8`, `::1`) are never proxied: a local
//!   cluster (kind, minikube, a test control plane) stays reachable in a proxied CI.
//! - `NO_PROXY` (or `no_proxy`): comma-separated entries; `*` disables proxying; an IP address
//!   or CIDR block (`10.0.0.0/8`) matches addresses; a domain (`example.com`, `.example.com`,
//!   `*.example.com`) matches the domain and its subdomains (with a leading dot or `*.`, only
//!   subdomains); an entry may carry a port (`example.com:8443`, `[::1]:6443`) that must then
//!   match the request's port.
//! - In a CGI program (`REQUEST_METHOD` set), `HTTP_PROXY` is ignored (it could come from a
//!   request header); Go fails such requests instead of sending them directly.
//!
//! The environment is read when a [`Transport`](crate::Transport) is built.

use std::net::IpAddr;

/// Proxies from the environment, with the rules deciding which requests skip them.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct EnvProxy {
    http: Option<url::Url>,
    https: Option<url::Url>,
    no_proxy: NoProxy,
    cgi: bool,
}

#[derive(Clone, Debug, Default, PartialEq)]
struct NoProxy {
    /// `*`: nothing is proxied.
    all: bool,
    ips: Vec<IpRule>,
    domains: Vec<DomainRule>,
}

#[derive(Clone, Debug, PartialEq)]
enum IpRule {
    /// An address, with the port it applies to (any when `None`).
    Address(IpAddr, Option<u16>),
    /// A CIDR block: the network address and prefix length.
    Network(IpAddr, u8),
}

#[derive(Clone, Debug, PartialEq)]
struct DomainRule {
    /// The domain with a leading dot, lower case.
    suffix: String,
    /// The entry had no leading dot: the domain itself matches too.
    exact_too: bool,
    port: Option<u16>,
}

impl EnvProxy {
    /// The proxies of the process environment.
    pub(crate) fn from_env() -> Self {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// The proxies of an environment in which `lookup` finds variables.
    pub(crate) fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Self {
        let any = |names: [&str; 2]| {
            names
                .into_iter()
                .find_map(|n| lookup(n).filter(|v| !v.is_empty()))
        };
        let proxy = |names: [&str; 2]| {
            let value = any(names)?;
            let parsed = parse_proxy(&value);
            if parsed.is_none() {
                tracing::warn!(
                    variable = names[0],
                    "ignoring a proxy that is not a URL (host:port or scheme://host:port)"
                );
            }
            parsed
        };
        Self {
            http: proxy(["HTTP_PROXY", "http_proxy"]),
            https: proxy(["HTTPS_PROXY", "https_proxy"]),
            no_proxy: NoProxy::parse(&any(["NO_PROXY", "no_proxy"]).unwrap_or_default()),
            cgi: lookup("REQUEST_METHOD").is_some_and(|v| !v.is_empty()),
        }
    }

    /// Whether no request is ever proxied.
    pub(crate) fn is_empty(&self) -> bool {
        self.https.is_none() && (self.http.is_none() || self.cgi)
    }

    /// The proxy for a request to `url`, if any.
    pub(crate) fn proxy_for(&self, url: &url::Url) -> Option<url::Url> {
        let proxy = match url.scheme() {
            "https" => self.https.as_ref()?,
            "http" if !self.cgi => self.http.as_ref()?,
            _ => return None,
        };
        let host = url.host()?;
        let port = url.port_or_known_default();
        self.use_proxy(&host, port).then(|| proxy.clone())
    }

    fn use_proxy(&self, host: &url::Host<&str>, port: Option<u16>) -> bool {
        let ip = match host {
            url::Host::Domain(d) => {
                if d.eq_ignore_ascii_case("localhost") {
                    return false;
                }
                None
            }
            url::Host::Ipv4(v4) => Some(IpAddr::V4(*v4)),
            url::Host::Ipv6(v6) => Some(IpAddr::V6(*v6)),
        };
        if let Some(ip) = ip
            && is_loopback(ip)
        {
            return false;
        }
        let rules = &self.no_proxy;
        if rules.all {
            return false;
        }
        let port_matches = |rule: Option<u16>| rule.is_none() || rule == port;
        match (ip, host) {
            (Some(ip), _) => !rules.ips.iter().any(|rule| match rule {
                IpRule::Address(a, p) => same_ip(*a, ip) && port_matches(*p),
                IpRule::Network(net, bits) => in_network(ip, *net, *bits),
            }),
            (None, url::Host::Domain(d)) => {
                let d = d.to_ascii_lowercase();
                !rules.domains.iter().any(|rule| {
                    (d.ends_with(&rule.suffix) || (rule.exact_too && d == rule.suffix[1..]))
                        && port_matches(rule.port)
                })
            }
            (None, _) => true,
        }
    }
}

/// A proxy setting as Go reads it: a URL, or `host:port` meaning `http://host:port`.
fn parse_proxy(value: &str) -> Option<url::Url> {
    match url::Url::parse(value) {
        Ok(url) if url.has_host() => Some(url),
        _ => url::Url::parse(&format!("http://{value}"))
            .ok()
            .filter(url::Url::has_host),
    }
}

impl NoProxy {
    fn parse(list: &str) -> Self {
        let mut rules = Self::default();
        for entry in list.split(',') {
            let entry = entry.trim().to_ascii_lowercase();
            if entry.is_empty() {
                continue;
            }
            if entry == "*" {
                return Self {
                    all: true,
                    ..Self::default()
                };
            }
            if let Some(network) = parse_cidr(&entry) {
                rules.ips.push(network);
                continue;
            }
            let (host, port) = match split_host_port(&entry) {
                Some((host, port)) => {
                    if host.is_empty() {
                        continue;
                    }
                    // An empty port matches every port (as in Go); one that is not a
                    // number matches none.
                    let port = (!port.is_empty()).then(|| port.parse::<u16>().unwrap_or(0));
                    (host, port)
                }
                None => (entry.as_str(), None),
            };
            if let Ok(ip) = host.parse::<IpAddr>() {
                rules.ips.push(IpRule::Address(ip, port));
                continue;
            }
            let host = if host.starts_with("*.") {
                &host[1..]
            } else {
                host
            };
            if host.is_empty() {
                continue;
            }
            let (bare, exact_too) = match host.strip_prefix('.') {
                Some(bare) => (bare, false),
                None => (host, true),
            };
            let bare = if bare.is_ascii() {
                bare.to_owned()
            } else {
                match url::Host::parse(bare) {
                    Ok(url::Host::Domain(d)) => d,
                    _ => bare.to_owned(),
                }
            };
            rules.domains.push(DomainRule {
                suffix: format!(".{bare}"),
                exact_too,
                port,
            });
        }
        rules
    }
}

/// `host:port` or `[v6]:port`, as Go's `net.SplitHostPort` splits it (`None` without a port).
fn split_host_port(entry: &str) -> Option<(&str, &str)> {
    if let Some(rest) = entry.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = after.strip_prefix(':')?;
        return (!host.contains('[') && !port.contains(':')).then_some((host, port));
    }
    let (host, port) = entry.split_once(':')?;
    (!port.contains(':') && !host.contains('[') && !host.contains(']')).then_some((host, port))
}

/// `address/bits` as a network rule.
fn parse_cidr(entry: &str) -> Option<IpRule> {
    let (address, bits) = entry.split_once('/')?;
    let address: IpAddr = address.parse().ok()?;
    let bits: u8 = bits.parse().ok()?;
    let max = if address.is_ipv4() { 32 } else { 128 };
    (bits <= max).then_some(IpRule::Network(address, bits))
}

fn in_network(ip: IpAddr, network: IpAddr, bits: u8) -> bool {
    // An IPv4-mapped IPv6 network compares as IPv4 (as Go's IPNet does): its prefix counts
    // the 96 mapping bits, and a shorter one keeps none of the IPv4 address's bits.
    let bits = match network {
        IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some() => bits.saturating_sub(96),
        _ => bits,
    };
    match (canonical(ip), canonical(network)) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            prefix_matches(u128::from(u32::from(a)), u128::from(u32::from(n)), bits, 32)
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => prefix_matches(u128::from(a), u128::from(n), bits, 128),
        _ => false,
    }
}

/// Whether `a` and `b`, numbers of `width` bits, share their first `bits` bits.
fn prefix_matches(a: u128, b: u128, bits: u8, width: u8) -> bool {
    let shift = u32::from(width.saturating_sub(bits));
    shift >= u32::from(width) || (a >> shift) == (b >> shift)
}

/// An IPv4-mapped IPv6 address as IPv4 (Go compares them as the same address).
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

fn same_ip(a: IpAddr, b: IpAddr) -> bool {
    canonical(a) == canonical(b)
}

fn is_loopback(ip: IpAddr) -> bool {
    canonical(ip).is_loopback()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> EnvProxy {
        EnvProxy::from_lookup(|name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    fn proxied(proxy: &EnvProxy, url: &str) -> Option<String> {
        proxy
            .proxy_for(&url::Url::parse(url).unwrap())
            .map(|u| u.to_string())
    }

    #[test]
    fn scheme_selects_the_variable_and_all_proxy_is_ignored() {
        let p = env(&[
            ("HTTP_PROXY", "http://http-proxy:3128"),
            ("HTTPS_PROXY", "https-proxy:3129"),
            ("ALL_PROXY", "socks5://all-proxy:1080"),
        ]);
        assert_eq!(
            proxied(&p, "http://example.com/").as_deref(),
            Some("http://http-proxy:3128/")
        );
        assert_eq!(
            proxied(&p, "https://example.com/").as_deref(),
            Some("http://https-proxy:3129/")
        );
        let only_all = env(&[("ALL_PROXY", "socks5://all-proxy:1080")]);
        assert!(only_all.is_empty());
        assert_eq!(proxied(&only_all, "https://example.com/"), None);

        let lower = env(&[("https_proxy", "socks5://lower:1080")]);
        assert_eq!(
            proxied(&lower, "https://example.com/").as_deref(),
            Some("socks5://lower:1080")
        );
        // The upper-case name wins; an empty value counts as unset.
        let both = env(&[("HTTPS_PROXY", "upper:1"), ("https_proxy", "lower:2")]);
        assert_eq!(
            proxied(&both, "https://x.test/").as_deref(),
            Some("http://upper:1/")
        );
        let empty = env(&[("HTTPS_PROXY", ""), ("https_proxy", "lower:2")]);
        assert_eq!(
            proxied(&empty, "https://x.test/").as_deref(),
            Some("http://lower:2/")
        );
    }

    #[test]
    fn mapped_networks_compare_as_ipv4_and_an_empty_port_matches_any() {
        let p = env(&[
            ("HTTPS_PROXY", "proxy:3128"),
            ("NO_PROXY", "::ffff:10.0.0.0/104,example.test:"),
        ]);
        assert_eq!(proxied(&p, "https://10.1.2.3/"), None);
        assert!(proxied(&p, "https://192.0.2.1/").is_some());
        assert_eq!(proxied(&p, "https://example.test:8443/"), None);
        assert_eq!(proxied(&p, "https://example.test/"), None);
        // A mapped prefix shorter than the mapping keeps no IPv4 bit: every IPv4 address.
        let wide = env(&[
            ("HTTPS_PROXY", "proxy:3128"),
            ("NO_PROXY", "::ffff:10.0.0.0/90"),
        ]);
        assert_eq!(proxied(&wide, "https://192.0.2.1/"), None);
    }

    #[test]
    fn localhost_and_loopback_are_never_proxied() {
        let p = env(&[("HTTP_PROXY", "proxy:1"), ("HTTPS_PROXY", "proxy:1")]);
        for url in [
            "https://localhost:6443/",
            "http://127.0.0.1:8080/",
            "https://127.1.2.3/",
            "https://[::1]:6443/",
            "https://[::ffff:127.0.0.1]/",
        ] {
            assert_eq!(proxied(&p, url), None, "{url}");
        }
        for url in [
            "https://10.0.0.1:6443/",
            "https://[::2]/",
            "https://localhost.example/",
            "https://kubernetes.default.svc/",
        ] {
            assert!(proxied(&p, url).is_some(), "{url}");
        }
    }

    #[test]
    fn no_proxy_rules_as_in_go() {
        let p = env(&[
            ("HTTPS_PROXY", "proxy:1"),
            (
                "NO_PROXY",
                " example.com, .dot.test,*.star.test, 10.0.0.0/8, 192.168.1.1, \
                 port.test:8443, [2001:db8::1]:6443, 172.16.0.1:443, bücher.test",
            ),
        ]);
        let direct = [
            "https://example.com/",
            "https://sub.example.com/",
            "https://a.dot.test/",
            "https://a.star.test/",
            "https://10.1.2.3/",
            "https://192.168.1.1:6443/",
            "https://port.test:8443/",
            "https://[2001:db8::1]:6443/",
            "https://172.16.0.1/",
            "https://xn--bcher-kva.test/",
        ];
        for url in direct {
            assert_eq!(proxied(&p, url), None, "{url}");
        }
        let via_proxy = [
            "https://notexample.com/",
            "https://dot.test/",
            "https://star.test/",
            "https://11.0.0.1/",
            "https://192.168.1.2/",
            "https://port.test/",
            "https://[2001:db8::1]/",
            "https://172.16.0.1:6443/",
        ];
        for url in via_proxy {
            assert!(proxied(&p, url).is_some(), "{url}");
        }
        let all = env(&[("HTTPS_PROXY", "proxy:1"), ("no_proxy", "a.test,*")]);
        assert_eq!(proxied(&all, "https://example.com/"), None);
    }

    #[test]
    fn http_proxy_is_ignored_in_cgi_programs() {
        let p = env(&[("HTTP_PROXY", "proxy:1"), ("REQUEST_METHOD", "GET")]);
        assert_eq!(proxied(&p, "http://example.com/"), None);
        assert!(p.is_empty());
    }
}
