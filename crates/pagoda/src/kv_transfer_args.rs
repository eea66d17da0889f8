//! Prefill/decode disaggregation on the command line (`--kv-role` and the `--kv-transfer-*`
//! flags), resolved into the engine's `KvTransferConfig` and the server's allowed peers. Safe
//! by default: a decode replica listening beyond loopback needs the shared secret.

use std::net::IpAddr;
use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Args;
use pagoda_core::config::parse_size;
use pagoda_core::kv::KvRole;
use pagoda_model::{KvSecret, KvTransferConfig};
use pagoda_server::prepare::kv_peers::KvPeers;

use crate::engine_args::positive_secs;

#[derive(Args)]
pub struct KvTransferArgs {
    /// Prefill/decode disaggregation: `prefill` computes prompts and ships their KV to the
    /// decode replica a request's `kv_transfer_params` names; `decode` receives KV on
    /// --kv-transfer-port and generates; `both` (default) is an ordinary replica
    /// (docs/scale-out.md). `decode` cannot be combined with --kv-disk-dir.
    #[arg(long, env = "PAGODA_KV_ROLE", default_value = "both", value_parser = ["prefill", "decode", "both"])]
    kv_role: String,
    /// With --kv-role prefill: the decode replicas this replica may ship KV to, `host:port` or
    /// `host` (any port), comma-separated; a DNS name admits every address it resolves to (a
    /// headless Service). A request naming another destination is refused (400) before any
    /// connection: clients cannot steer the server's connections.
    #[arg(
        long,
        env = "PAGODA_KV_TRANSFER_PEERS",
        value_delimiter = ',',
        value_name = "HOST[:PORT]"
    )]
    kv_transfer_peers: Vec<String>,
    /// A file holding the deployment's shared secret (at least 16 bytes; make one with
    /// `head -c 32 /dev/urandom | base64 > kv.secret`), the same on every prefill and decode
    /// replica: each transfer connection proves it both ways and every frame carries an
    /// HMAC-SHA256 tag. Required for a decode replica listening beyond loopback.
    #[arg(long, env = "PAGODA_KV_TRANSFER_SECRET_FILE", value_name = "FILE")]
    kv_transfer_secret_file: Option<PathBuf>,
    /// Address the decode role listens on for KV transfers (beyond loopback only with
    /// --kv-transfer-secret-file).
    #[arg(long, env = "PAGODA_KV_TRANSFER_HOST", default_value = "0.0.0.0")]
    kv_transfer_host: String,
    /// Port the decode role listens on for KV transfers.
    #[arg(long, env = "PAGODA_KV_TRANSFER_PORT", default_value_t = 7100)]
    kv_transfer_port: u16,
    /// Seconds a decode request waits for its transfer (and a transfer connection may stall)
    /// before it prefills locally.
    #[arg(long, env = "PAGODA_KV_TRANSFER_TIMEOUT", default_value_t = 5.0)]
    kv_transfer_timeout: f64,
    /// Most bytes of received KV held until their requests claim them, e.g. 1GiB; a
    /// transfer that does not fit is refused (its request prefills locally).
    #[arg(long, env = "PAGODA_KV_TRANSFER_BUFFER", default_value = "1GiB")]
    kv_transfer_buffer: String,
    /// Seconds received KV that no request claimed is kept.
    #[arg(long, env = "PAGODA_KV_TRANSFER_TTL", default_value_t = 60.0)]
    kv_transfer_ttl: f64,
}

impl KvTransferArgs {
    /// The engine's transfer configuration (none for `both`) and the peers a prefill replica
    /// may send to.
    pub fn resolve(&self) -> anyhow::Result<(Option<KvTransferConfig>, KvPeers)> {
        let role = KvRole::parse(&self.kv_role)
            .with_context(|| format!("--kv-role {}: prefill, decode or both", self.kv_role))?;
        let peers = KvPeers::parse(&self.kv_transfer_peers)?;
        if role == KvRole::Prefill && peers.is_empty() {
            bail!(
                "--kv-role prefill needs --kv-transfer-peers: the decode replicas (host:port, or a DNS name such as a headless Service) it may send KV to"
            );
        }
        if role == KvRole::Both {
            return Ok((None, peers));
        }
        let secret = match &self.kv_transfer_secret_file {
            Some(path) => Some(KvSecret::from_file(path).context("--kv-transfer-secret-file")?),
            None => None,
        };
        let host = &self.kv_transfer_host;
        if role == KvRole::Decode && secret.is_none() && !is_loopback(host) {
            bail!(
                "--kv-role decode listens on {host}:{port}, beyond loopback, where anyone who reaches the port could push KV into the prefix cache: give every prefill and decode replica the same --kv-transfer-secret-file (make one: head -c 32 /dev/urandom | base64 > kv.secret), or listen on loopback only (--kv-transfer-host 127.0.0.1)",
                port = self.kv_transfer_port
            );
        }
        let config = KvTransferConfig {
            role,
            listen: if host.contains(':') {
                format!("[{host}]:{}", self.kv_transfer_port)
            } else {
                format!("{host}:{}", self.kv_transfer_port)
            },
            timeout: positive_secs("--kv-transfer-timeout", self.kv_transfer_timeout)?,
            buffer_bytes: parse_size(&self.kv_transfer_buffer).context("--kv-transfer-buffer")?,
            ttl: positive_secs("--kv-transfer-ttl", self.kv_transfer_ttl)?,
            model_identity: String::new(), // the model file's, filled in at load
            secret,
            counters: Default::default(),
        };
        Ok((Some(config), peers))
    }
}

/// Whether `host` only ever means this machine (an unspecified address, 0.0.0.0 or ::,
/// means every interface; a DNS name other than localhost may resolve anywhere).
fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .trim_matches(['[', ']'])
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        kv: KvTransferArgs,
    }

    fn resolve(args: &[&str]) -> anyhow::Result<(Option<KvTransferConfig>, KvPeers)> {
        let cli = Cli::try_parse_from(std::iter::once("pagoda").chain(args.iter().copied()))?;
        cli.kv.resolve()
    }

    #[test]
    fn a_decode_replica_beyond_loopback_needs_a_secret() {
        let e = resolve(&["--kv-role", "decode"])
            .err()
            .map(|e| format!("{e:#}"));
        assert!(
            e.as_deref()
                .is_some_and(|m| m.contains("--kv-transfer-secret-file")
                    && m.contains("head -c 32 /dev/urandom")),
            "{e:?}"
        );
        for host in ["127.0.0.1", "::1", "localhost"] {
            let got = resolve(&["--kv-role", "decode", "--kv-transfer-host", host]);
            assert!(
                got.is_ok_and(|(c, _)| c.is_some_and(|c| c.secret.is_none())),
                "{host}"
            );
        }
        let dir = std::env::temp_dir().join(format!("pagoda-kv-args-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        let file = dir.join("kv.secret");
        std::fs::write(&file, "c2VjcmV0IHNlY3JldCBzZWNyZXQgc2VjcmV0\n")
            .unwrap_or_else(|e| panic!("{e}"));
        let f = file.to_string_lossy();
        let got = resolve(&["--kv-role", "decode", "--kv-transfer-secret-file", &f]);
        assert!(got.is_ok_and(|(c, _)| c.is_some_and(|c| c.secret.is_some())));
        std::fs::write(&file, "short").unwrap_or_else(|e| panic!("{e}"));
        let e = resolve(&["--kv-role", "decode", "--kv-transfer-secret-file", &f]);
        assert!(e.is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_prefill_replica_needs_its_peers_and_both_needs_nothing() {
        assert!(resolve(&["--kv-role", "prefill"]).is_err());
        let got = resolve(&[
            "--kv-role",
            "prefill",
            "--kv-transfer-peers",
            "10.0.0.1:7100",
        ]);
        assert!(got.is_ok_and(|(c, p)| c.is_some() && !p.is_empty()));
        assert!(resolve(&[]).is_ok_and(|(c, _)| c.is_none()));
    }
}
