//! The disk tier of the prefix cache with tiny random-weight models: a prefix cached, evicted
//! from a small pool (written to disk) and read back gives bit-identical logprobs (top 20 of
//! every generated position) to computing it, for f16 and int8 KV and with sliding-window
//! groups; corrupt, truncated and foreign block files are skipped and deleted, never loaded;
//! the lock file refuses a second tier on one directory; a full disk (the kernel's ENOSPC)
//! turns the tier off while serving goes on; block files are the same whether the model is
//! split over tensor-parallel ranks or not.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use pagoda_core::kv::{BlockHash, KvGroup, KvTier};
use pagoda_core::{EngineCore, EngineOutput, EngineRequest, FinishReason, SamplingParams};
use pagoda_model::{
    DiskTier, EngineSetup, KvCache, KvCacheDtype, KvDiskConfig, KvDiskError, ModelRunner,
    build_engine,
};
use pagoda_testkit::tiny_model::TinyModel;

/// A fresh directory for one test, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("pagoda-kv-disk-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn disk(dir: &Path, identity: &str) -> KvDiskConfig {
    KvDiskConfig {
        dir: dir.to_owned(),
        max_bytes: 1 << 30,
        model_identity: identity.into(),
        read_bytes_per_sec: None,
        // Tiny models prefill faster than any disk: pretend they are slow so reads pay.
        prefill_tokens_per_sec: Some(1),
    }
}

fn prompt(len: usize, seed: u32) -> Vec<u32> {
    (0..len as u32)
        .map(|i| (i * 7 + seed * 13) % 250 + 3)
        .collect()
}

fn request(id: u64, prompt: Vec<u32>) -> EngineRequest {
    EngineRequest {
        id,
        prompt_token_ids: prompt,
        params: SamplingParams {
            ignore_eos: true,
            logprobs: Some(20),
            ..SamplingParams::greedy(3)
        },
        priority: 0,
        tenant: Default::default(),
        extra_keys: Default::default(),
    }
}

/// Runs one request to its end (with a deadline: tier reads run on another thread).
fn run(core: &mut EngineCore<ModelRunner>, req: EngineRequest) -> Vec<EngineOutput> {
    core.add_request(req).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut outs = Vec::new();
    while core.has_work() {
        assert!(Instant::now() < deadline, "the request did not finish");
        for o in core.step() {
            if let Some(FinishReason::Error(e)) = &o.finish_reason {
                panic!("request failed: {e}");
            }
            outs.push(o);
        }
        if core.waiting_on_tier() {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    outs
}

fn wait_for_writes(core: &EngineCore<ModelRunner>, blocks: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = core.stats().kv_tier.unwrap();
        if s.blocks_written >= blocks {
            return;
        }
        assert!(Instant::now() < deadline, "writes did not land: {s:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn evicted_then_read_back(spec: &TinyModel, dtype: KvCacheDtype, name: &str) {
    let dir = TempDir::new(name);
    let mut model = common::tiny(spec);
    model.set_kv_cache_dtype(dtype);
    let per_token = model.config().kv_bytes_per_token() as u64;
    let setup = EngineSetup {
        // About 24 blocks of 16 tokens over all layers: two 160-token prompts evict a third.
        kv_cache_memory: Some(per_token * 16 * 24),
        kv_cache_dtype: dtype,
        max_model_len: Some(256),
        kv_disk: Some(disk(&dir.0, "tiny")),
        ..EngineSetup::default()
    };
    let (mut core, _) = build_engine(model, &setup).unwrap();
    let p = prompt(160, 1);
    let cold = run(&mut core, request(1, p.clone()));
    let warm = run(&mut core, request(2, p.clone()));
    assert!(warm[0].num_cached_tokens > 0, "a memory hit first");
    // Other prompts take every block: the first prompt's blocks are evicted to disk.
    run(&mut core, request(3, prompt(200, 2)));
    run(&mut core, request(4, prompt(200, 3)));
    wait_for_writes(&core, 9);
    let disk_hit = run(&mut core, request(5, p));
    let stats = core.stats().kv_tier.unwrap();
    assert!(stats.blocks_read >= 9, "read back from disk: {stats:?}");
    assert_eq!(
        disk_hit[0].num_cached_tokens, 144,
        "9 of the 10 blocks (the last token is computed)"
    );
    let lps =
        |o: &[EngineOutput]| -> Vec<_> { o.iter().flat_map(|x| x.logprobs.clone()).collect() };
    assert_eq!(
        lps(&disk_hit),
        lps(&warm),
        "bit-identical to the memory hit"
    );
    assert_eq!(
        lps(&disk_hit),
        lps(&cold),
        "bit-identical to computing the prefix"
    );
    core.scheduler().kv().check_invariants().unwrap();
}

#[test]
fn a_prefix_read_back_from_disk_gives_bit_identical_logprobs_f16() {
    evicted_then_read_back(&TinyModel::llama(), KvCacheDtype::F16, "f16");
}

#[test]
fn a_prefix_read_back_from_disk_gives_bit_identical_logprobs_int8() {
    evicted_then_read_back(&TinyModel::llama(), KvCacheDtype::Int8, "int8");
}

#[test]
fn a_prefix_read_back_from_disk_gives_bit_identical_logprobs_sliding_window_groups() {
    evicted_then_read_back(&TinyModel::gemma3(), KvCacheDtype::F16, "gemma3");
}

fn tiny_cache() -> KvCache {
    let model = common::tiny(&TinyModel::llama());
    KvCache::new(model.config(), 8, 16).unwrap()
}

fn open(dir: &Path, identity: &str, kv: &KvCache) -> Result<DiskTier, KvDiskError> {
    DiskTier::open(&disk(dir, identity), kv, &[KvGroup::FULL], 1000.0)
}

/// Writes blocks `keys` through a tier and closes it (all writes landed).
fn write_blocks(dir: &Path, identity: &str, kv: &KvCache, keys: &[BlockHash]) {
    let mut tier = open(dir, identity, kv).unwrap();
    for (i, k) in keys.iter().enumerate() {
        let mut payload = Vec::new();
        kv.read_block(i as u32, &mut payload);
        tier.save_blocking(*k, payload);
    }
    tier.close();
}

fn file_of(dir: &Path, key: &BlockHash) -> PathBuf {
    let hex: String = key.0.iter().map(|b| format!("{b:02x}")).collect();
    dir.join(format!("{hex}.kvb"))
}

#[test]
fn corrupt_truncated_and_foreign_block_files_are_skipped_and_deleted() {
    let dir = TempDir::new("damage");
    let other = TempDir::new("damage-other");
    let kv = tiny_cache();
    let key = |i: u8| BlockHash([i; 32]);
    write_blocks(&dir.0, "model-a", &kv, &[key(1), key(2), key(3)]);
    write_blocks(&other.0, "model-b", &kv, &[key(4)]);
    // 1 stays sound; 2 gets a flipped payload byte; 3 loses its tail; 4 is another model's.
    let corrupt = file_of(&dir.0, &key(2));
    let mut bytes = std::fs::read(&corrupt).unwrap();
    bytes[200] ^= 0x40;
    std::fs::write(&corrupt, bytes).unwrap();
    let truncated = file_of(&dir.0, &key(3));
    let len = std::fs::metadata(&truncated).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&truncated)
        .unwrap()
        .set_len(len - 10)
        .unwrap();
    std::fs::copy(file_of(&other.0, &key(4)), file_of(&dir.0, &key(4))).unwrap();
    std::fs::write(dir.0.join("notes.txt"), "not ours").unwrap();

    let tier = open(&dir.0, "model-a", &kv).unwrap();
    // The scan reads headers: the truncated and the foreign file are gone at once.
    assert!(tier.contains(&key(1)) && tier.contains(&key(2)));
    assert!(!tier.contains(&key(3)) && !tier.contains(&key(4)));
    assert!(!truncated.exists() && !file_of(&dir.0, &key(4)).exists());
    assert!(
        dir.0.join("notes.txt").exists(),
        "files not named as blocks are left alone"
    );
    // Reading checks the checksum: the corrupt file is refused (the read stops there) and deleted.
    let read = |keys: Vec<BlockHash>| {
        let t = tier.prefetch(keys);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(n) = tier.poll(t) {
                return (n, tier.take_read(t));
            }
            assert!(Instant::now() < deadline);
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    let (n, blocks) = read(vec![key(1), key(2)]);
    assert_eq!(n, 1);
    let mut want = Vec::new();
    kv.read_block(0, &mut want);
    assert_eq!(blocks, vec![(key(1), want)]);
    assert!(!corrupt.exists() && !tier.contains(&key(2)));
    assert_eq!(read(vec![key(2)]).0, 0);
}

#[test]
fn the_lock_refuses_a_second_tier_on_one_directory() {
    let dir = TempDir::new("lock");
    let kv = tiny_cache();
    let first = open(&dir.0, "m", &kv).unwrap();
    let err = open(&dir.0, "m", &kv).unwrap_err();
    assert!(matches!(err, KvDiskError::Locked { .. }), "{err}");
    assert!(
        err.to_string().contains("in use by another pagoda server"),
        "{err}"
    );
    drop(first);
    open(&dir.0, "m", &kv).unwrap();
}

#[test]
fn a_budget_below_one_block_turns_the_tier_off() {
    let dir = TempDir::new("budget");
    let kv = tiny_cache();
    let config = KvDiskConfig {
        max_bytes: 100,
        ..disk(&dir.0, "m")
    };
    let tier = DiskTier::open(&config, &kv, &[KvGroup::FULL], 1000.0).unwrap();
    assert!(!tier.enabled());
    tier.save(BlockHash([1; 32]), vec![0; tier.payload_len()]);
    assert_eq!(tier.stats().blocks_dropped, 1);
}

/// A full disk, for real: every block of the first prompt is due to be written through a temp
/// file that is a symbolic link to `/dev/full`, so the writer's one write (`kv/disk/io.rs`)
/// gets the kernel's ENOSPC. The tier turns itself off at the first one and writes nothing
/// more, and the engine goes on serving: the evicted prefix is computed again, with the same
/// logprobs as the first time. (No root and no small filesystem needed; Linux only.)
#[test]
fn a_full_disk_stops_the_writes_and_serving_goes_on() {
    if !Path::new("/dev/full").exists() {
        eprintln!("skipped: no /dev/full");
        return;
    }
    let dir = TempDir::new("full");
    let model = common::tiny(&TinyModel::llama());
    let per_token = model.config().kv_bytes_per_token() as u64;
    let setup = EngineSetup {
        kv_cache_memory: Some(per_token * 16 * 24),
        max_model_len: Some(256),
        kv_disk: Some(disk(&dir.0, "tiny")),
        ..EngineSetup::default()
    };
    let (mut core, _) = build_engine(model, &setup).unwrap();
    let p = prompt(160, 1);
    // The engine's keys of the prompt's 10 full blocks (group 0: the block hashes).
    let mut keys = Vec::new();
    pagoda_core::kv::ExtraKeys::default()
        .chain(pagoda_core::kv::block_hash::root_hash("0"))
        .extend(&mut keys, &p, 16);
    assert_eq!(keys.len(), 10);
    for k in &keys {
        let tmp = file_of(&dir.0, k).with_extension("tmp");
        std::os::unix::fs::symlink("/dev/full", tmp).unwrap();
    }
    let cold = run(&mut core, request(1, p.clone()));
    // Other prompts take every block: the first prompt's are evicted and sent to the disk.
    run(&mut core, request(2, prompt(200, 2)));
    run(&mut core, request(3, prompt(200, 3)));
    let deadline = Instant::now() + Duration::from_secs(30);
    let stats = loop {
        let s = core.stats().kv_tier.unwrap();
        if !s.enabled {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the tier never saw the full disk: {s:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(stats.blocks_written, 0, "{stats:?}");
    assert!(stats.blocks_dropped >= 1, "{stats:?}");
    // Serving goes on from memory alone: the prefix is recomputed, to the same logprobs.
    let again = run(&mut core, request(4, p));
    assert_eq!(again[0].num_cached_tokens, 0);
    let lps =
        |o: &[EngineOutput]| -> Vec<_> { o.iter().flat_map(|x| x.logprobs.clone()).collect() };
    assert_eq!(lps(&again), lps(&cold));
    run(&mut core, request(5, prompt(200, 4)));
    let after = core.stats().kv_tier.unwrap();
    assert_eq!(
        after.blocks_written, 0,
        "a write after the disk was full: {after:?}"
    );
    assert!(!after.enabled);
    let kvb = std::fs::read_dir(&dir.0)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "kvb")
        })
        .count();
    assert_eq!(kvb, 0);
    core.scheduler().kv().check_invariants().unwrap();
}

/// Whole payloads on disk, whatever the split: blocks a one-process server wrote are read by
/// one with two tensor-parallel ranks (each rank takes its KV heads' part), and blocks the
/// two ranks wrote (their parts merged) by a one-process server. Each read-back prefix gives
/// the tokens of computing it, log-probabilities within the ranks' float noise.
#[test]
fn block_files_are_shared_by_one_process_and_two_ranks() {
    let dir = TempDir::new("tp");
    // 8 heads of 64 and 2 KV heads: one KV head per rank, whole Q4_K blocks per rank.
    let spec = TinyModel {
        d_model: 512,
        n_heads: 8,
        ..TinyModel::llama()
    };
    let setup = |ranks: usize| {
        let per_token = common::tiny(&spec).config().kv_bytes_per_token() as u64;
        EngineSetup {
            kv_cache_memory: Some(per_token * 16 * 24),
            max_model_len: Some(256),
            kv_disk: Some(disk(&dir.0, "tiny-tp")),
            tensor_parallel: pagoda_model::TensorParallelConfig::new(ranks),
            ..EngineSetup::default()
        }
    };
    let (p, q) = (prompt(160, 4), prompt(160, 5));
    // What computing each prompt gives, without a tier.
    let reference = |p: &[u32]| {
        let plain = EngineSetup {
            kv_disk: None,
            ..setup(1)
        };
        let (mut core, _) = build_engine(common::tiny(&spec), &plain).unwrap();
        run(&mut core, request(1, p.to_vec()))
    };
    // `p` computed, then evicted to disk by two other prompts.
    let write = |ranks: usize, p: &[u32], id: u64| {
        let (mut core, _) = build_engine(common::tiny(&spec), &setup(ranks)).unwrap();
        run(&mut core, request(id, p.to_vec()));
        run(&mut core, request(id + 1, prompt(200, id as u32)));
        run(&mut core, request(id + 2, prompt(200, id as u32 + 1)));
        wait_for_writes(&core, 9);
    };
    // `p` read back from disk (9 blocks: the last token is computed).
    let read = |ranks: usize, p: &[u32]| {
        let (mut core, _) = build_engine(common::tiny(&spec), &setup(ranks)).unwrap();
        let out = run(&mut core, request(9, p.to_vec()));
        assert_eq!(
            out[0].num_cached_tokens, 144,
            "{ranks} rank(s) read the prefix"
        );
        out
    };
    let close = |a: &[EngineOutput], b: &[EngineOutput], what: &str| {
        let toks = |o: &[EngineOutput]| -> Vec<u32> {
            o.iter().flat_map(|x| x.new_token_ids.clone()).collect()
        };
        assert_eq!(toks(a), toks(b), "{what}: tokens");
        let lps = |o: &[EngineOutput]| -> Vec<f32> {
            o.iter()
                .flat_map(|x| x.logprobs.iter().map(|l| l.logprob))
                .collect()
        };
        for (x, y) in lps(a).iter().zip(lps(b)) {
            assert!((x - y).abs() < 0.05, "{what}: logprob {x} vs {y}");
        }
    };
    write(1, &q, 10);
    close(
        &read(2, &q),
        &reference(&q),
        "one process's blocks, two ranks",
    );
    write(2, &p, 20);
    close(
        &read(1, &p),
        &reference(&p),
        "two ranks' blocks, one process",
    );
}
