//! What rank 0 hands the other ranks (`Job`), what a rank answers (`Reply`), and how a rank
//! runs a job on its part of the model and KV cache (`RankState`): one loop body for ranks
//! that are threads and ranks that are processes. Jobs and replies also have a byte form, for
//! ranks in other processes (MPI); it is rank 0's, so a frame that does not decode is a bug or
//! a mismatched build, reported as such.

use std::collections::HashMap;
use std::sync::Arc;

use pagoda_kernels::parallel::RankPool;

use super::frame::{FrameError, Reader, Writer};
use super::kv_blocks::BlockSections;
use crate::kv::cache::KvCache;
use crate::kv::shift::shift_blocks;
use crate::lora::wire::{decode_adapter, encode_adapter};
use crate::lora::{LoraAdapter, LoraShards};
use crate::models::{ForwardScratch, Model};
use crate::runner::batch::ForwardBatch;

/// What rank 0 sends a worker rank.
pub(crate) enum Job {
    /// A step and the whole adapters its sequences use (each rank cuts its own parts).
    Step(Arc<ForwardBatch>, Arc<[Arc<LoraAdapter>]>),
    /// A context shift: blocks `(src, dst)` copied with their keys rotated back by `delta`
    /// positions, in every rank's cache (each holds its KV heads).
    Shift(Arc<[(u32, u32)]>, u32),
    /// The rank's payloads of these blocks (its KV heads' part), for the disk tier or a
    /// transfer.
    ReadBlocks(Arc<[u32]>),
    /// Whole payloads to write: each rank writes its KV heads' part.
    WriteBlocks(Arc<[(u32, Vec<u8>)]>),
    /// Test hook: panic in the next step (no reply).
    Poison,
    /// The group is stopping (ranks in other processes; threads see their channel close).
    Stop,
}

/// What a worker answers a job with: its payloads for `ReadBlocks`, `[1]` or `[0]` for each
/// block of `WriteBlocks` (written or not), nothing otherwise; or why it failed.
pub(crate) type Reply = Result<Vec<Vec<u8>>, String>;

impl Job {
    /// Whether a worker's answer carries anything: block payloads or write outcomes. A step's
    /// or shift's is always empty (a rank that fails them ends the group), so ranks in other
    /// processes send none.
    pub(crate) fn has_reply(&self) -> bool {
        matches!(self, Self::ReadBlocks(_) | Self::WriteBlocks(_))
    }

    /// The same job for another worker (its payload shared, not copied).
    pub(crate) fn share(&self) -> Self {
        match self {
            Self::Step(b, a) => Self::Step(Arc::clone(b), Arc::clone(a)),
            Self::Shift(c, d) => Self::Shift(Arc::clone(c), *d),
            Self::ReadBlocks(b) => Self::ReadBlocks(Arc::clone(b)),
            Self::WriteBlocks(b) => Self::WriteBlocks(Arc::clone(b)),
            Self::Poison => Self::Poison,
            Self::Stop => Self::Stop,
        }
    }
}

/// A worker rank's part of the model and its KV cache, between jobs.
pub(crate) struct RankState {
    model: Model,
    kv: KvCache,
    scratch: ForwardScratch,
    lora_parts: LoraShards,
    sections: BlockSections,
    poisoned: bool,
}

impl RankState {
    pub(crate) fn new(model: Model, kv: KvCache) -> Self {
        let sections = BlockSections::of(&kv);
        Self {
            model,
            kv,
            scratch: ForwardScratch::default(),
            lora_parts: LoraShards::default(),
            sections,
            poisoned: false,
        }
    }

    /// Runs `job` (kernels on `pool`); its reply's payloads. Panics where the forward pass
    /// does (a failed collective, or the poisoned test hook): the caller catches it.
    pub(crate) fn run(&mut self, job: &Job, pool: &RankPool) -> Vec<Vec<u8>> {
        let kv = &mut self.kv;
        if !matches!(job, Job::Poison | Job::Stop) {
            assert!(!self.poisoned, "injected failure (test hook)");
        }
        match job {
            Job::Step(batch, adapters) => {
                let m = &self.model;
                let own = self.lora_parts.of(adapters, m.shard(), m.full_config());
                let scratch = &mut self.scratch;
                pool.install(|| m.forward(batch, &own, kv, scratch));
                Vec::new()
            }
            Job::Shift(copies, delta) => {
                shift_blocks(kv, &self.model, copies, *delta);
                Vec::new()
            }
            Job::ReadBlocks(ids) => ids.iter().map(|&b| kv.read_payload(b)).collect(),
            Job::WriteBlocks(blocks) => {
                let all_heads = self.model.full_config().n_kv_heads;
                let mine = self.model.shard().kv_heads.clone();
                blocks
                    .iter()
                    .map(|(b, whole)| {
                        let written = self
                            .sections
                            .part(whole, all_heads, &mine)
                            .is_some_and(|p| kv.write_block(*b, &p));
                        vec![u8::from(written)]
                    })
                    .collect()
            }
            Job::Poison => {
                self.poisoned = true;
                Vec::new()
            }
            Job::Stop => Vec::new(),
        }
    }
}

const STEP: u8 = 0;
const SHIFT: u8 = 1;
const READ: u8 = 2;
const WRITE: u8 = 3;
const POISON: u8 = 4;
const STOP: u8 = 5;
/// `seq_loras`' `None` in a frame.
const NO_ADAPTER: u32 = u32::MAX;

impl Job {
    /// The job's bytes. A step's adapters go by digest, with their weights only where
    /// `held(digest)` says the other ranks do not hold them yet (it records that they will).
    pub(crate) fn encode(&self, held: &mut dyn FnMut(u64) -> bool) -> Vec<u8> {
        let mut w = Writer(Vec::new());
        match self {
            Self::Step(b, adapters) => {
                w.u8(STEP);
                for v in [
                    &b.token_ids,
                    &b.positions,
                    &b.slot_mapping,
                    &b.query_start_loc,
                    &b.seq_lens,
                    &b.block_tables,
                    &b.logits_indices,
                ] {
                    w.u32s(v);
                }
                w.u64(b.max_blocks_per_seq as u64);
                w.u64(b.num_groups as u64);
                let loras: Vec<u32> = b
                    .seq_loras
                    .iter()
                    .map(|l| l.unwrap_or(NO_ADAPTER))
                    .collect();
                w.u32s(&loras);
                w.u64(adapters.len() as u64);
                for a in adapters.iter() {
                    if held(a.digest()) {
                        w.u8(0);
                        w.u64(a.digest());
                    } else {
                        w.u8(1);
                        encode_adapter(a, &mut w);
                    }
                }
            }
            Self::Shift(copies, delta) => {
                w.u8(SHIFT);
                let flat: Vec<u32> = copies.iter().flat_map(|&(s, d)| [s, d]).collect();
                w.u32s(&flat);
                w.u64(u64::from(*delta));
            }
            Self::ReadBlocks(ids) => {
                w.u8(READ);
                w.u32s(ids);
            }
            Self::WriteBlocks(blocks) => {
                w.u8(WRITE);
                w.u64(blocks.len() as u64);
                for (id, bytes) in blocks.iter() {
                    w.u64(u64::from(*id));
                    w.bytes(bytes);
                }
            }
            Self::Poison => w.u8(POISON),
            Self::Stop => w.u8(STOP),
        }
        w.0
    }

    /// The job of `bytes`; a step's adapters come from `adapters` (by digest) or the frame
    /// itself (then kept there for the next steps).
    pub(crate) fn decode(
        bytes: &[u8],
        adapters: &mut HashMap<u64, Arc<LoraAdapter>>,
    ) -> Result<Self, FrameError> {
        let mut r = Reader(bytes);
        let job = match r.u8()? {
            STEP => {
                let mut v = || r.u32s();
                let (token_ids, positions, slot_mapping) = (v()?, v()?, v()?);
                let (query_start_loc, seq_lens, block_tables, logits_indices) =
                    (v()?, v()?, v()?, v()?);
                let max_blocks_per_seq = r.usize()?;
                let num_groups = r.usize()?;
                let seq_loras = r
                    .u32s()?
                    .into_iter()
                    .map(|l| (l != NO_ADAPTER).then_some(l))
                    .collect();
                let batch = ForwardBatch {
                    token_ids,
                    positions,
                    slot_mapping,
                    query_start_loc,
                    seq_lens,
                    block_tables,
                    max_blocks_per_seq,
                    num_groups,
                    logits_indices,
                    seq_loras,
                };
                let n = r.usize()?;
                let mut used = Vec::with_capacity(n.min(r.0.len()));
                for _ in 0..n {
                    let a = if r.u8()? == 0 {
                        let digest = r.u64()?;
                        adapters
                            .get(&digest)
                            .cloned()
                            .ok_or(FrameError("an adapter rank 0 never sent"))?
                    } else {
                        let a = Arc::new(decode_adapter(&mut r)?);
                        adapters.insert(a.digest(), Arc::clone(&a));
                        a
                    };
                    used.push(a);
                }
                Self::Step(Arc::new(batch), used.into())
            }
            SHIFT => {
                let flat = r.u32s()?;
                let delta = u32::try_from(r.u64()?).map_err(|_| FrameError("shift delta"))?;
                let copies: Vec<(u32, u32)> = flat.chunks_exact(2).map(|p| (p[0], p[1])).collect();
                Self::Shift(copies.into(), delta)
            }
            READ => Self::ReadBlocks(r.u32s()?.into()),
            WRITE => {
                let n = r.usize()?;
                let mut blocks = Vec::with_capacity(n.min(r.0.len()));
                for _ in 0..n {
                    let id = u32::try_from(r.u64()?).map_err(|_| FrameError("block id"))?;
                    blocks.push((id, r.bytes()?.to_vec()));
                }
                Self::WriteBlocks(blocks.into())
            }
            POISON => Self::Poison,
            STOP => Self::Stop,
            _ => return Err(FrameError("unknown job")),
        };
        r.end()?;
        Ok(job)
    }
}

/// A reply's bytes.
pub(crate) fn encode_reply(reply: &Reply) -> Vec<u8> {
    let mut w = Writer(Vec::new());
    match reply {
        Ok(payloads) => {
            w.u8(0);
            w.u64(payloads.len() as u64);
            for p in payloads {
                w.bytes(p);
            }
        }
        Err(message) => {
            w.u8(1);
            w.bytes(message.as_bytes());
        }
    }
    w.0
}

pub(crate) fn decode_reply(bytes: &[u8]) -> Result<Reply, FrameError> {
    let mut r = Reader(bytes);
    let reply = match r.u8()? {
        0 => {
            let n = r.usize()?;
            let mut payloads = Vec::with_capacity(n.min(r.0.len()));
            for _ in 0..n {
                payloads.push(r.bytes()?.to_vec());
            }
            Ok(payloads)
        }
        1 => Err(String::from_utf8_lossy(r.bytes()?).into_owned()),
        _ => return Err(FrameError("unknown reply")),
    };
    r.end()?;
    Ok(reply)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn round_trip(job: &Job) -> Job {
        Job::decode(&job.encode(&mut |_| false), &mut HashMap::new()).unwrap()
    }

    #[test]
    fn jobs_and_replies_survive_their_byte_form() {
        let batch = ForwardBatch {
            token_ids: vec![5, 6, 7],
            positions: vec![0, 1, 0],
            slot_mapping: vec![0, 1, 16],
            query_start_loc: vec![0, 2, 3],
            seq_lens: vec![2, 1],
            block_tables: vec![0, 9, 1, 9],
            max_blocks_per_seq: 2,
            num_groups: 1,
            logits_indices: vec![1, 2],
            seq_loras: vec![None, Some(0)],
        };
        let Job::Step(b, a) = round_trip(&Job::Step(Arc::new(batch.clone()), Arc::new([]))) else {
            panic!("not a step")
        };
        assert_eq!((*b).clone(), batch);
        assert!(a.is_empty());
        let Job::Shift(c, d) = round_trip(&Job::Shift(vec![(1, 2), (3, 4)].into(), 9)) else {
            panic!("not a shift")
        };
        assert_eq!((&*c, d), (&[(1, 2), (3, 4)][..], 9));
        let Job::WriteBlocks(w) = round_trip(&Job::WriteBlocks(vec![(3, vec![1, 2, 3])].into()))
        else {
            panic!("not a write")
        };
        assert_eq!(&*w, &[(3, vec![1, 2, 3])][..]);
        assert!(matches!(round_trip(&Job::Stop), Job::Stop));
        for reply in [
            Ok(vec![vec![1u8], vec![]]),
            Err("rank 2 fell over".to_string()),
        ] {
            assert_eq!(decode_reply(&encode_reply(&reply)).unwrap(), reply);
        }
    }

    #[test]
    fn malformed_frames_are_errors_not_panics() {
        let good = Job::ReadBlocks(vec![1, 2, 3].into()).encode(&mut |_| false);
        let decode = |b: &[u8]| Job::decode(b, &mut HashMap::new());
        for cut in 0..good.len() {
            assert!(decode(&good[..cut]).is_err(), "cut at {cut}");
        }
        let mut huge = vec![READ];
        huge.extend_from_slice(&u64::MAX.to_le_bytes());
        assert!(decode(&huge).is_err());
        assert!(decode(&[77]).is_err());
        assert!(decode_reply(&[0, 1]).is_err());
        let mut trailing = good.clone();
        trailing.push(0);
        assert!(decode(&trailing).is_err());
    }
}
