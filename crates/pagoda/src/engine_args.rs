//! The engine's knobs as command-line flags (each also read from a `PAGODA_*` environment
//! variable), shared by `pagoda generate` and `pagoda serve`, and their resolution into an
//! `EngineSetup`.

use anyhow::{Context, bail};
use clap::Args;
use pagoda_core::config::parse_size;
use pagoda_core::{SchedulerConfig, SchedulingPolicy};
use pagoda_model::EngineSetup;

use crate::speculative_args::SpeculativeArgs;

#[derive(Args, Clone, Debug)]
pub struct EngineArgs {
    /// Tokens per KV block.
    #[arg(long, env = "PAGODA_BLOCK_SIZE", default_value_t = 16)]
    pub block_size: usize,
    /// Memory for the KV cache, e.g. 2GiB or 512MiB [default: a quarter of available memory, at
    /// most 4GiB].
    #[arg(long, env = "PAGODA_KV_CACHE_MEMORY")]
    pub kv_cache_memory: Option<String>,
    /// Element type of the KV cache: f16 (as llama.cpp) holds twice the tokens of f32 in the same
    /// memory and halves the bytes attention reads; int8 (one scale per token and KV head) holds
    /// ~1.9x the tokens of f16.
    #[arg(long, env = "PAGODA_KV_CACHE_DTYPE", default_value = "f16", value_parser = ["f32", "f16", "int8"])]
    pub kv_cache_dtype: String,
    /// Turn off prefix caching (on by default).
    #[arg(long, env = "PAGODA_NO_PREFIX_CACHING")]
    pub no_prefix_caching: bool,
    /// Keep the KV of sliding-window layers (Gemma 3) for every token instead of giving back
    /// the blocks that left their window (on by default: more sequences fit).
    #[arg(long, env = "PAGODA_DISABLE_SLIDING_WINDOW_FREEING")]
    pub disable_sliding_window_freeing: bool,
    /// Root seed of the prefix cache's block hashes (vLLM's PYTHONHASHSEED): replicas, a router
    /// and KV-event consumers that share it compute the same hashes (docs/scale-out.md).
    #[arg(long, env = "PAGODA_PREFIX_CACHE_HASH_SEED", default_value = pagoda_core::kv::block_hash::DEFAULT_HASH_SEED)]
    pub prefix_cache_hash_seed: String,
    /// Token budget of one engine step, over all requests.
    #[arg(long, env = "PAGODA_MAX_NUM_BATCHED_TOKENS", default_value_t = 2048)]
    pub max_num_batched_tokens: usize,
    /// Most requests running at once.
    #[arg(long, env = "PAGODA_MAX_NUM_SEQS", default_value_t = 64)]
    pub max_num_seqs: usize,
    /// Most prompt tokens one request computes per step (0: no cap), so running decodes are not
    /// stalled behind a long prompt.
    #[arg(
        long,
        env = "PAGODA_LONG_PREFILL_TOKEN_THRESHOLD",
        default_value_t = 256
    )]
    pub long_prefill_token_threshold: usize,
    /// Requests allowed to wait for their first step; more are rejected.
    #[arg(long, env = "PAGODA_MAX_WAITING_REQUESTS", default_value_t = 1024)]
    pub max_waiting_requests: usize,
    /// Longest sequence (prompt + generated) [default: the model's context, capped to the KV cache].
    #[arg(long, env = "PAGODA_MAX_MODEL_LEN")]
    pub max_model_len: Option<usize>,
    /// When a request reaches --max-model-len, keep its first --keep tokens and its recent half
    /// (discarding the middle, keys re-rotated to their new positions) and go on generating
    /// instead of stopping with `length`; `max_tokens` may then exceed the context.
    #[arg(long, env = "PAGODA_CONTEXT_SHIFT")]
    pub context_shift: bool,
    /// Tokens at the start of a request that a context shift always keeps (rounded up to whole
    /// KV blocks).
    #[arg(
        long,
        env = "PAGODA_KEEP",
        default_value_t = 4,
        requires = "context_shift"
    )]
    pub keep: usize,
    /// Order of waiting requests: `fcfs` (arrival), `priority` (the request's `priority`, lower
    /// first, then arrival) or `fair` (deficit round robin over tenants in tokens, weighted by
    /// each tenant's `priority` in --api-keys-file).
    #[arg(long, env = "PAGODA_SCHEDULING_POLICY", default_value = "fcfs")]
    pub scheduling_policy: SchedulingPolicy,
    /// Same as --scheduling-policy priority.
    #[arg(
        long,
        env = "PAGODA_PRIORITY_SCHEDULING",
        conflicts_with = "scheduling_policy"
    )]
    pub priority_scheduling: bool,
    /// What the matrices of a Hugging Face checkpoint (`--model DIR`) are quantized to at load:
    /// q8_0, q4_k, q4_0, or none (keep f32/f16/bf16). GGUF files keep their own types.
    #[arg(long, env = "PAGODA_QUANTIZATION", default_value = "q8_0", value_parser = ["q8_0", "q4_k", "q4_0", "none"])]
    pub quantization: String,
    /// Most distinct LoRA adapters among running requests; requests of another adapter wait
    /// (base-model requests never do).
    #[arg(long, env = "PAGODA_MAX_LORAS", default_value_t = 8)]
    pub max_loras: usize,
    /// Compute threads [default: all cores]; with a split model, each rank's (its pool pinned
    /// to its cores) [default: the rank's share of the cores].
    #[arg(long, env = "PAGODA_THREADS")]
    pub threads: Option<usize>,
    /// Ranks the model is split over (tensor parallelism, vLLM's flag): each rank a thread
    /// pinned to its share of the cores, holding its heads, FFN columns, vocabulary rows and
    /// KV heads, running its kernels on a pool of its own; two all-reduces per layer.
    #[arg(long, env = "PAGODA_TENSOR_PARALLEL_SIZE", default_value_t = 1)]
    pub tensor_parallel_size: usize,
    /// What the ranks of a split model are (vLLM's flag): `threads` of this process, or `mpi`,
    /// the processes of an Open MPI job (`mpirun -np N pagoda serve ... --tensor-parallel-size
    /// N (or --pipeline-parallel-size N) --distributed-executor-backend mpi`, one per NUMA node
    /// or machine, the model file at the same path on each): rank 0 serves, the others hold
    /// their shards or stages and follow its steps. Needs Open MPI's library (Debian:
    /// openmpi-bin) at run time only.
    #[arg(long, env = "PAGODA_DISTRIBUTED_EXECUTOR_BACKEND", default_value = "threads", value_parser = ["threads", "mpi"])]
    pub distributed_executor_backend: String,
    /// Stages the model's layers are cut into (pipeline parallelism, vLLM's flag): each stage
    /// a thread pinned to its share of the cores, holding a contiguous run of layers and their
    /// KV cache; each step's batch flows through the stages in micro-batches. Not combined with
    /// --tensor-parallel-size yet.
    #[arg(long, env = "PAGODA_PIPELINE_PARALLEL_SIZE", default_value_t = 1)]
    pub pipeline_parallel_size: usize,
    /// Micro-batches each pipeline step is cut into [default: round(sqrt((stages - 1) x
    /// rows / 4)), at least 1: a few decode rows stay whole].
    #[arg(long, env = "PAGODA_PIPELINE_MICRO_BATCHES")]
    pub pipeline_micro_batches: Option<usize>,
    /// NUMA placement of one rank's kernel threads (llama.cpp's flag): `distribute` spreads
    /// them evenly over the nodes, `isolate` keeps them on the node the process started on
    /// (and, without --threads, uses that node's CPUs). Not with more than one rank (those are
    /// pinned per core group already).
    #[arg(long, env = "PAGODA_NUMA", value_parser = ["distribute", "isolate"])]
    pub numa: Option<String>,
    /// The sampling a request gets for the fields it does not set (vLLM's flag): `auto` takes
    /// the model's recommendation (a checkpoint directory's generation_config.json, the GGUF's
    /// general.sampling.* keys, else the catalog's entry for the file), `none` the built-in
    /// defaults (temperature 1 for the server, 0 for `generate`; no top-p/top-k or penalties),
    /// or a generation_config.json FILE.
    #[arg(
        long,
        env = "PAGODA_GENERATION_CONFIG",
        default_value = "auto",
        value_name = "auto|none|FILE"
    )]
    pub generation_config: pagoda_frontend::GenerationConfigChoice,
    /// Serve for goodput (docs/capacity.md): latency targets such as `ttft=2s,tpot=100ms`
    /// (either or both). Each step holds only what fits the TPOT target, a request joins the
    /// decode batch only while it still fits, and one predicted to get its first token past the
    /// TTFT target is refused with 429 and a Retry-After instead of queued to miss it.
    #[arg(long, env = "PAGODA_SLO", value_name = "ttft=..,tpot=..")]
    pub slo: Option<String>,
    #[command(flatten)]
    pub speculative: SpeculativeArgs,
}

impl EngineArgs {
    /// The `--quantization` choice.
    pub fn quantization(&self) -> anyhow::Result<pagoda_hf::Quantization> {
        pagoda_hf::Quantization::from_name(&self.quantization)
            .with_context(|| format!("--quantization {}", self.quantization))
    }

    /// Checks the flags and turns them into an engine setup; sets the thread count.
    pub fn resolve(&self) -> anyhow::Result<EngineSetup> {
        let (tp, pp) = (self.tensor_parallel_size, self.pipeline_parallel_size);
        if tp == 0 {
            bail!("--tensor-parallel-size must be at least 1");
        }
        if pp == 0 {
            bail!("--pipeline-parallel-size must be at least 1");
        }
        if self.pipeline_micro_batches == Some(0) {
            bail!("--pipeline-micro-batches must be at least 1");
        }
        let mpi = self.mpi()?;
        // With a split model each rank runs its kernels on a pool of its own (`--threads` per
        // rank); the process's pool would only compete with the ranks for their cores.
        set_threads(if tp * pp == 1 { self.threads } else { Some(1) })?;
        if let Some(policy) = &self.numa {
            self.place_numa(policy, tp * pp)?;
        }
        let kv_cache_memory = match &self.kv_cache_memory {
            Some(s) => Some(parse_size(s).context("--kv-cache-memory")?),
            None => None,
        };
        for (name, v) in [
            ("--block-size", self.block_size),
            ("--max-num-batched-tokens", self.max_num_batched_tokens),
            ("--max-num-seqs", self.max_num_seqs),
        ] {
            if v == 0 {
                bail!("{name} must be at least 1");
            }
        }
        if self.max_model_len == Some(0) {
            bail!("--max-model-len must be at least 1");
        }
        Ok(EngineSetup {
            scheduler: SchedulerConfig {
                max_num_batched_tokens: self.max_num_batched_tokens,
                max_num_seqs: self.max_num_seqs,
                long_prefill_token_threshold: self.long_prefill_token_threshold,
                max_waiting_requests: self.max_waiting_requests,
                max_model_len: 0, // set from the model by build_engine
                policy: if self.priority_scheduling {
                    SchedulingPolicy::Priority
                } else {
                    self.scheduling_policy
                },
                max_loras: self.max_loras,
                context_shift_keep: self.context_shift.then_some(self.keep),
            },
            kv_cache_memory,
            block_size: self.block_size,
            enable_prefix_caching: !self.no_prefix_caching,
            prefix_cache_hash_seed: self.prefix_cache_hash_seed.clone(),
            max_model_len: self.max_model_len,
            kv_cache_dtype: self.kv_cache_dtype.parse().context("--kv-cache-dtype")?,
            speculative: self.speculative.resolve()?,
            sliding_window_freeing: !self.disable_sliding_window_freeing,
            kv_disk: None,     // `pagoda serve --kv-disk-dir` sets it
            kv_transfer: None, // `pagoda serve --kv-role` sets it
            tensor_parallel: pagoda_model::TensorParallelConfig {
                mpi: mpi.filter(|_| tp > 1),
                ..pagoda_model::TensorParallelConfig::new(self.tensor_parallel_size)
            },
            threads_per_rank: (tp * pp > 1).then_some(self.threads).flatten(),
            pipeline_parallel: pagoda_model::PipelineParallelConfig {
                micro_batches: self.pipeline_micro_batches,
                mpi: mpi.filter(|_| pp > 1),
                ..pagoda_model::PipelineParallelConfig::new(self.pipeline_parallel_size)
            },
            slo: self.slo.as_deref().map(slo_targets).transpose()?,
        })
    }
}

impl EngineArgs {
    /// `--distributed-executor-backend mpi`: this process's MPI, initialised (`None` for
    /// threads).
    fn mpi(&self) -> anyhow::Result<Option<&'static pagoda_mpi::Mpi>> {
        if self.distributed_executor_backend != "mpi" {
            return Ok(None);
        }
        let (tp, pp) = (self.tensor_parallel_size, self.pipeline_parallel_size);
        let ranks = tp * pp;
        if ranks < 2 || (tp > 1 && pp > 1) {
            bail!(
                "--distributed-executor-backend mpi splits a model over mpirun's processes: give --tensor-parallel-size N or --pipeline-parallel-size N (at least 2, as many as the processes)"
            );
        }
        let mpi = pagoda_mpi::Mpi::init().context("--distributed-executor-backend mpi")?;
        if mpi.size() != ranks {
            bail!(
                "{ranks} ranks with --distributed-executor-backend mpi need as many processes: mpirun started {} (mpirun -np {ranks} ...)",
                mpi.size()
            );
        }
        Ok(Some(mpi))
    }

    /// On a rank above 0 of an MPI job: holds its shard of the model at `path` and follows
    /// rank 0's steps until rank 0 stops, then returns true (the command is done). False on
    /// rank 0 and without MPI.
    pub fn run_mpi_worker(&self, path: &std::path::Path) -> anyhow::Result<bool> {
        let Some(mpi) = self.mpi()? else {
            return Ok(false);
        };
        if mpi.rank() == 0 {
            return Ok(false);
        }
        pagoda_model::tensor_parallel::run_worker(path, mpi)
            .with_context(|| format!("MPI rank {}", mpi.rank()))?;
        Ok(true)
    }

    /// `--numa`: pins the kernel pool's threads by node (before the first kernel runs).
    fn place_numa(&self, policy: &str, ranks: usize) -> anyhow::Result<()> {
        use pagoda_model::tensor_parallel::numa::{self, NumaPolicy};
        let policy: NumaPolicy = policy.parse().map_err(anyhow::Error::msg)?;
        if ranks > 1 {
            bail!(
                "--numa {} places one rank's threads: with --tensor-parallel-size or --pipeline-parallel-size each rank is pinned to its own core group already (leave --numa out)",
                policy.name()
            );
        }
        let threads = self.threads.unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
        });
        let home = numa::apply(policy, threads);
        if policy == NumaPolicy::Isolate && self.threads.is_none() && !home.is_empty() {
            set_threads(Some(home.len()))?;
        }
        Ok(())
    }
}

/// `--slo`: the text `pagoda bench --slo` reads too (one parser), keeping the targets the
/// server can act on.
fn slo_targets(text: &str) -> anyhow::Result<pagoda_core::SloTargets> {
    let slo = pagoda_capacity::Slo::parse(text).context("--slo")?;
    if slo.e2e_ms.is_some() {
        bail!("--slo e2e=.. is a benchmark target: the server keeps ttft and tpot");
    }
    let ms = |v: Option<f64>| v.map(|ms| std::time::Duration::from_secs_f64(ms / 1e3));
    let targets = pagoda_core::SloTargets {
        ttft: ms(slo.ttft_ms),
        tpot: ms(slo.tpot_ms),
    };
    if targets == pagoda_core::SloTargets::default() {
        bail!("--slo needs a target: ttft=..,tpot=.. (either or both)");
    }
    Ok(targets)
}

/// `--threads`: the kernels' pool size (all cores when not given).
pub fn set_threads(threads: Option<usize>) -> anyhow::Result<()> {
    if let Some(n) = threads {
        if n == 0 {
            bail!("--threads must be at least 1");
        }
        pagoda_kernels::parallel::set_num_threads(n);
    }
    Ok(())
}

/// A flag's seconds as a `Duration`: a number > 0 (`try_from_secs_f64` also refuses values
/// too large for a `Duration`).
pub(crate) fn positive_secs(flag: &str, secs: f64) -> anyhow::Result<std::time::Duration> {
    match std::time::Duration::try_from_secs_f64(secs) {
        Ok(d) if !d.is_zero() => Ok(d),
        _ => anyhow::bail!("{flag} must be a number of seconds > 0"),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::slo_targets;
    use std::time::Duration;

    #[test]
    fn slo_keeps_the_targets_the_server_acts_on() {
        let t = slo_targets("ttft=2s,tpot=100ms").unwrap();
        assert_eq!(t.ttft, Some(Duration::from_secs(2)));
        assert_eq!(t.tpot, Some(Duration::from_millis(100)));
        assert_eq!(
            slo_targets("itl=50").unwrap().tpot,
            Some(Duration::from_millis(50))
        );
        for bad in ["e2e=20s", "ttft=2s,e2e=20s", "", "ttft=fast", "p99=1s"] {
            assert!(slo_targets(bad).is_err(), "{bad}");
        }
    }
}
