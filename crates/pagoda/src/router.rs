//! `pagoda router`: the flags of `pagoda-router` and its start-up. Serves until
//! SIGTERM/SIGINT, then gives open streams `--shutdown-timeout` seconds.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use pagoda_router::{
    CacheAwareTuning, DnsWorkers, PolicyKind, PromptTokenizer, RouterConfig, WorkerSpec,
};

#[derive(Args)]
pub struct RouterArgs {
    /// A replica: `URL[,events=tcp://HOST:PORT][,replay=tcp://HOST:PORT][,topic=T][,kv=HOST:PORT]`,
    /// the events endpoints being the replica's --kv-events-config `endpoint` and
    /// `replay_endpoint` as the router reaches them (needed by cache_aware), `kv` a decode
    /// replica's --kv-transfer-port as the prefill replicas reach it. Repeat per replica.
    #[arg(long = "worker", env = "PAGODA_ROUTER_WORKERS", value_delimiter = ' ', num_args = 1..)]
    workers: Vec<String>,
    /// Replicas from DNS, `NAME:PORT`: every address NAME resolves to (a Kubernetes headless
    /// Service) is a replica, re-resolved every --dns-interval seconds.
    #[arg(long, env = "PAGODA_ROUTER_WORKER_DNS")]
    worker_dns: Option<String>,
    /// With --worker-dns: the port of each replica's KV events PUB socket.
    #[arg(long, env = "PAGODA_ROUTER_DNS_EVENTS_PORT")]
    dns_events_port: Option<u16>,
    /// With --worker-dns: the port of each replica's KV events replay socket.
    #[arg(long, env = "PAGODA_ROUTER_DNS_REPLAY_PORT")]
    dns_replay_port: Option<u16>,
    /// With --worker-dns: the replicas are decode replicas (`--kv-role decode`) with their
    /// --kv-transfer-port on this port.
    #[arg(long, env = "PAGODA_ROUTER_DNS_KV_PORT")]
    dns_kv_port: Option<u16>,
    /// A decode replica (`pagoda serve --kv-role decode`): a --worker spec whose `kv=`
    /// defaults to the URL's host on port 7100. Repeat per replica.
    #[arg(long = "decode", env = "PAGODA_ROUTER_DECODE", value_delimiter = ' ', num_args = 1..)]
    decode: Vec<String>,
    /// A prefill replica (`pagoda serve --kv-role prefill`), `URL`: with any, long prompts are
    /// prefilled there and their KV shipped to the decode replica chosen (docs/scale-out.md).
    #[arg(long = "prefill", env = "PAGODA_ROUTER_PREFILL", value_delimiter = ' ', num_args = 1..)]
    prefill: Vec<String>,
    /// With --prefill: a prompt whose part the chosen decode replica has not cached is below
    /// this many tokens is prefilled on the decode replica itself (0: always disaggregate).
    #[arg(long, env = "PAGODA_ROUTER_PD_THRESHOLD", default_value_t = 256)]
    pd_threshold: usize,
    /// With --prefill: seconds to wait for a prefill replica before the decode replica
    /// prefills the request itself.
    #[arg(long, default_value_t = 60.0)]
    pd_prefill_timeout: f64,
    /// Seconds between DNS lookups of --worker-dns.
    #[arg(long, env = "PAGODA_ROUTER_DNS_INTERVAL", default_value_t = 5.0)]
    dns_interval: f64,
    /// `round_robin`, `least_load` (fewest requests in flight) or `cache_aware` (most cached
    /// prefix blocks against load; needs --model and the replicas' KV events).
    #[arg(long, env = "PAGODA_ROUTER_POLICY", default_value = "round_robin")]
    policy: String,
    /// The GGUF the replicas serve: its tokenizer and chat template (no weights are loaded).
    #[arg(long, env = "PAGODA_MODEL")]
    model: Option<PathBuf>,
    /// The replicas' --chat-template, if they use one: a file or the template text.
    #[arg(long, env = "PAGODA_CHAT_TEMPLATE")]
    chat_template: Option<String>,
    /// The replicas' --prefix-cache-hash-seed.
    #[arg(long, env = "PAGODA_PREFIX_CACHE_HASH_SEED", default_value = "0")]
    prefix_cache_hash_seed: String,
    /// The replicas' --api-keys-file: cache_aware then salts each tenant's prompts as the
    /// replicas do, so a tenant's requests find its cached blocks (keys are checked by the
    /// replicas, not here).
    /// Re-read on SIGHUP (send it to the router too when rotating the replicas' keys).
    #[arg(long, env = "PAGODA_TENANT_KEYS_FILE", value_name = "FILE")]
    tenant_keys_file: Option<std::path::PathBuf>,
    /// The replicas' --api-key: cache_aware then salts the requests presenting it as the
    /// replicas salt their `default` tenant.
    #[arg(long, env = "PAGODA_TENANT_API_KEY", hide_env_values = true)]
    tenant_api_key: Option<String>,
    /// A key with the `router` scope in the replicas' --api-keys-file, sent to every replica
    /// in `x-pagoda-router-key` (clients' keys still name the tenant): replicas with keys take
    /// `kv_transfer_params` (prefill/decode) only from a request carrying it.
    #[arg(long, env = "PAGODA_ROUTER_KEY", hide_env_values = true)]
    router_key: Option<String>,
    /// cache_aware: prompt blocks one request in flight is worth (cost = uncached blocks +
    /// weight x requests in flight).
    #[arg(long, default_value_t = 4.0)]
    decode_weight: f64,
    /// cache_aware: route by load alone when max - min requests in flight exceeds this ...
    #[arg(long, default_value_t = 8)]
    balance_abs_threshold: usize,
    /// ... and max exceeds this times min.
    #[arg(long, default_value_t = 2.0)]
    balance_rel_threshold: f64,
    /// Address to listen on.
    #[arg(long, env = "PAGODA_HOST", default_value = "127.0.0.1")]
    host: String,
    /// Port to listen on.
    #[arg(long, env = "PAGODA_PORT", default_value_t = 8080)]
    port: u16,
    /// Seconds between health and load polls of each replica (/ready, /metrics).
    #[arg(long, env = "PAGODA_ROUTER_POLL_INTERVAL", default_value_t = 1.0)]
    poll_interval: f64,
    /// Seconds to wait for a replica's TCP connection before trying another.
    #[arg(long, default_value_t = 2.0)]
    connect_timeout: f64,
    /// Largest request body in bytes.
    #[arg(long, env = "PAGODA_MAX_REQUEST_BYTES", default_value_t = 8 * 1024 * 1024)]
    max_request_bytes: usize,
    /// Seconds open streams get to finish after SIGTERM/SIGINT.
    #[arg(long, env = "PAGODA_SHUTDOWN_TIMEOUT", default_value_t = 30.0)]
    shutdown_timeout: f64,
}

fn seconds(flag: &str, v: f64) -> anyhow::Result<Duration> {
    if !(v.is_finite() && v > 0.0) {
        anyhow::bail!("{flag} must be a number of seconds > 0");
    }
    Ok(Duration::from_secs_f64(v))
}

fn config(args: &RouterArgs) -> anyhow::Result<RouterConfig> {
    let workers = args
        .workers
        .iter()
        .filter(|w| !w.is_empty())
        .map(|w| WorkerSpec::parse(w))
        .chain(
            args.decode
                .iter()
                .filter(|w| !w.is_empty())
                .map(|w| WorkerSpec::parse_decode(w)),
        )
        .collect::<Result<Vec<_>, _>>()?;
    let prefill = args
        .prefill
        .iter()
        .filter(|w| !w.is_empty())
        .map(|w| WorkerSpec::parse(w))
        .collect::<Result<Vec<_>, _>>()?;
    let dns = match &args.worker_dns {
        Some(d) => {
            let mut dns = DnsWorkers::parse(d, seconds("--dns-interval", args.dns_interval)?)?;
            dns.events_port = args.dns_events_port;
            dns.replay_port = args.dns_replay_port;
            dns.kv_port = args.dns_kv_port;
            Some(dns)
        }
        None => None,
    };
    let policy = PolicyKind::parse(&args.policy)?;
    let template = match &args.chat_template {
        Some(t) if std::path::Path::new(t).is_file() => Some(
            std::fs::read_to_string(t).with_context(|| format!("reading --chat-template {t}"))?,
        ),
        other => other.clone(),
    };
    let tokenizer = match &args.model {
        Some(m) => Some(Arc::new(PromptTokenizer::open(m, template.as_deref())?)),
        None => None,
    };
    let tenant_api_key = args.tenant_api_key.clone().filter(|k| !k.is_empty());
    let config = RouterConfig {
        workers,
        dns,
        policy,
        tokenizer,
        hash_seed: args.prefix_cache_hash_seed.clone(),
        router_key: args.router_key.clone().filter(|k| !k.is_empty()),
        tenant_salts: match (&tenant_api_key, &args.tenant_keys_file) {
            (None, None) => None,
            (key, file) => Some(Arc::new(
                pagoda_router::TenantSalts::new(key.as_deref(), file.clone())
                    .context("--tenant-keys-file")?,
            )),
        },
        tuning: CacheAwareTuning {
            decode_weight: args.decode_weight,
            balance_abs: args.balance_abs_threshold,
            balance_rel: args.balance_rel_threshold,
        },
        poll_interval: seconds("--poll-interval", args.poll_interval)?,
        connect_timeout: seconds("--connect-timeout", args.connect_timeout)?,
        max_request_bytes: args.max_request_bytes,
        prefill,
        pd_threshold: args.pd_threshold,
        pd_prefill_timeout: seconds("--pd-prefill-timeout", args.pd_prefill_timeout)?,
    };
    config.check()?;
    Ok(config)
}

pub fn run(args: RouterArgs) -> anyhow::Result<()> {
    let config = config(&args)?;
    let drain = seconds("--shutdown-timeout", args.shutdown_timeout.max(1e-3))?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("pagoda-router")
        .build()
        .context("starting the runtime")?;
    rt.block_on(async move {
        let addr = format!("{}:{}", args.host, args.port);
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .with_context(|| format!("binding {addr}"))?;
        let router = pagoda_router::build(config).await?;
        eprintln!(
            "pagoda router: listening on http://{} ({} over {} replicas)",
            listener.local_addr().map(|a| a.to_string()).unwrap_or(addr),
            args.policy,
            router.state.pool.workers().len()
        );
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let serving = pagoda_router::serve(listener, router, async {
            let _ = stop_rx.await;
        });
        tokio::pin!(serving);
        tokio::select! {
            r = &mut serving => return r.context("serving"),
            () = crate::serve::shutdown_signal() => {}
        }
        let _ = stop_tx.send(());
        // Open streams get the drain time; then the process ends regardless.
        match tokio::time::timeout(drain, serving).await {
            Ok(r) => r.context("serving"),
            Err(_) => Ok(()),
        }
    })
}
