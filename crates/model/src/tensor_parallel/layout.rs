//! `RankLayout`: who holds what in a parallel group, as the start-up log and `/v1/models`
//! report it: the tensor- and pipeline-parallel sizes, and per rank its CPUs, layers, heads
//! and the bytes of weights it holds. One process without parallelism is one rank of all.

use std::ops::Range;

use crate::models::Model;

/// One rank's part.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankPart {
    pub rank: usize,
    /// The CPUs its thread is pinned to (empty: not pinned).
    pub cpus: Vec<usize>,
    /// Layers it runs.
    pub layers: Range<usize>,
    /// Query heads and KV heads of those layers it holds.
    pub heads: Range<usize>,
    pub kv_heads: Range<usize>,
    /// Rows of the LM head it holds (`None`: no LM head, a pipeline stage before the last).
    pub vocab: Option<Range<usize>>,
    /// Bytes of weights it holds (`Model::weight_bytes`).
    pub weight_bytes: u64,
}

impl RankPart {
    /// `model`'s part, for rank `rank` pinned to `cpus`.
    pub fn of(model: &Model, rank: usize, cpus: Vec<usize>) -> Self {
        let s = model.shard();
        let holds_head = model.stage().is_none_or(|st| st.is_last());
        Self {
            rank,
            cpus,
            layers: model.layer_range(),
            heads: s.heads.clone(),
            kv_heads: s.kv_heads.clone(),
            vocab: holds_head.then(|| s.vocab.clone()),
            weight_bytes: model.weight_bytes(),
        }
    }
}

/// The layout of one model's ranks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankLayout {
    pub tensor_parallel_size: usize,
    pub pipeline_parallel_size: usize,
    /// What the ranks are: `threads` of this process, or the processes of an `mpi` job.
    pub backend: &'static str,
    /// In rank order.
    pub ranks: Vec<RankPart>,
}

impl RankLayout {
    /// Logs the layout, a line per rank.
    pub fn log(&self) {
        tracing::info!(
            tensor_parallel_size = self.tensor_parallel_size,
            pipeline_parallel_size = self.pipeline_parallel_size,
            "rank layout: {} ranks, {}",
            self.ranks.len(),
            match self.backend {
                "mpi" => "the processes of an MPI job",
                _ => "threads of this process",
            }
        );
        for r in &self.ranks {
            tracing::info!(
                rank = r.rank,
                cpus = ?r.cpus,
                layers = ?r.layers,
                heads = ?r.heads,
                kv_heads = ?r.kv_heads,
                vocab_rows = ?r.vocab,
                weight_mib = format!("{:.1}", r.weight_bytes as f64 / 1048576.0),
                "rank"
            );
        }
    }
}
