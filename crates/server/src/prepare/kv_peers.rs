//! `--kv-transfer-peers`: the decode replicas a prefill replica may ship KV to. A request's
//! `kv_transfer_params` name the destination, so without this list any client could make the
//! server open connections where it likes and send it a prompt's KV (server-side request
//! forgery, KV exfiltration). A peer is `host:port` or `host` (any port); a DNS name also
//! admits the addresses it resolves to (a Kubernetes headless Service names every pod).

use std::net::{IpAddr, ToSocketAddrs};

/// One allowed destination.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Peer {
    /// Lower-case, without IPv6 brackets.
    host: String,
    port: Option<u16>,
}

/// The allowed destinations; empty refuses every one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KvPeers(Vec<Peer>);

/// A `--kv-transfer-peers` entry that is not `host`, `host:port` or `[v6]:port`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("--kv-transfer-peers: {0:?} is not host, host:port or [ipv6]:port")]
pub struct BadPeer(pub String);

fn normalize(host: &str) -> String {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase()
}

impl KvPeers {
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<Self, BadPeer> {
        let mut peers = Vec::new();
        for e in entries {
            let e = e.as_ref().trim();
            let bad = || BadPeer(e.to_owned());
            if e.is_empty() {
                return Err(bad());
            }
            // A bare IPv6 address has colons but no port.
            let (host, port) = if e.parse::<IpAddr>().is_ok() {
                (e, None)
            } else {
                match e.rsplit_once(':') {
                    Some((h, p)) => (
                        h,
                        Some(p.parse::<u16>().ok().filter(|&p| p > 0).ok_or_else(bad)?),
                    ),
                    None => (e, None),
                }
            };
            let host = normalize(host);
            if host.is_empty() || host.contains(['/', ' ', '@']) {
                return Err(bad());
            }
            peers.push(Peer { host, port });
        }
        Ok(Self(peers))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether KV may be sent to `host:port`. Blocking when a peer is a DNS name and `host`
    /// an address: the name is resolved (call it off the async runtime).
    pub fn allows(&self, host: &str, port: u16) -> bool {
        let host = normalize(host);
        let ports = |p: &Peer| p.port.is_none_or(|q| q == port);
        if self.0.iter().any(|p| ports(p) && p.host == host) {
            return true;
        }
        let Ok(ip) = host.parse::<IpAddr>() else {
            return false;
        };
        self.0
            .iter()
            .filter(|p| ports(p) && p.host.parse::<IpAddr>().is_err())
            .any(|p| {
                (p.host.as_str(), port)
                    .to_socket_addrs()
                    .is_ok_and(|mut addrs| addrs.any(|a| a.ip() == ip))
            })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn peers_admit_their_hosts_and_ports_only() {
        let p =
            KvPeers::parse(&["10.0.0.7:7100", "decode.example", "[::1]:7100", "fe80::2"]).unwrap();
        assert!(p.allows("10.0.0.7", 7100));
        assert!(!p.allows("10.0.0.7", 7101));
        assert!(!p.allows("10.0.0.8", 7100));
        assert!(p.allows("DECODE.example", 9));
        assert!(p.allows("::1", 7100));
        assert!(p.allows("[::1]", 7100));
        assert!(p.allows("fe80::2", 1));
        assert!(!p.allows("169.254.169.254", 80));
        assert!(!KvPeers::default().allows("127.0.0.1", 7100));
    }

    #[test]
    fn a_dns_name_admits_what_it_resolves_to() {
        let p = KvPeers::parse(&["localhost:7100"]).unwrap();
        assert!(p.allows("127.0.0.1", 7100));
        assert!(!p.allows("127.0.0.1", 7101));
    }

    #[test]
    fn bad_entries_are_named() {
        for bad in ["", "host:", "host:0", "host:99999", "a/b:1", ":7100"] {
            assert_eq!(
                KvPeers::parse(&[bad]),
                Err(BadPeer(bad.to_owned())),
                "{bad}"
            );
        }
    }
}
