//! The pack cache: the first load of a model file writes its packed weights, the next one maps
//! them, and either way the logits are bit for bit those of a load without a cache. A damaged,
//! truncated or stale cache file, or a model file changed under it, is noticed and repacked;
//! an unwritable cache directory still loads. Tiny random-weight models in a temporary
//! directory, so no test writes beside the real models.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::logits_in_chunks;
use pagoda_gguf::GgufFile;
use pagoda_model::{CacheMiss, CpuExecutor, Model, PackCache, PackCacheStatus};
use pagoda_testkit::tiny_model::TinyModel;

/// A fresh directory for one test, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("pagoda-pack-cache-{}-{name}", std::process::id()));
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

/// Writes a model file's bytes as `dir/tiny.gguf`.
fn write_model(dir: &Path, bytes: &[u8]) -> PathBuf {
    let path = dir.join("tiny.gguf");
    std::fs::write(&path, bytes).unwrap();
    path
}

/// Every logit of a 12-token prompt fed in steps of 5, 1 and 6 tokens, as bits.
fn logits(model: Model) -> Vec<u32> {
    let mut exec = CpuExecutor::new(model, 4, 16).unwrap();
    let tokens: Vec<u32> = (0..12).map(|i| (i * 37 + 5) % 256).collect();
    let out = logits_in_chunks(&mut exec, &tokens, &[5, 1, 6], &[0]);
    out.iter().map(|v| v.to_bits()).collect()
}

/// Logits of the model file `bytes`, loaded from memory and packed with no cache.
fn uncached(bytes: &[u8]) -> Vec<u32> {
    let model = Model::load(Arc::new(GgufFile::from_bytes(bytes.to_vec()).unwrap())).unwrap();
    assert_eq!(model.pack_cache_status(), &PackCacheStatus::Off);
    logits(model)
}

/// True when this CPU packs weights at all (else there is nothing to cache).
fn packs(status: &PackCacheStatus) -> bool {
    if status == &PackCacheStatus::NotNeeded {
        eprintln!("no packed kernels on this CPU: nothing to cache");
        return false;
    }
    true
}

/// Loads `path` with `cache`, checks the logits against `want` and returns the status.
fn load(path: &Path, cache: &PackCache, want: &[u32]) -> PackCacheStatus {
    let model = Model::open_with(path, cache).unwrap();
    let status = model.pack_cache_status().clone();
    assert!(logits(model) == want, "logits differ after {status:?}");
    status
}

fn written_to(status: &PackCacheStatus) -> &Path {
    match status {
        PackCacheStatus::Written { path, .. } => path,
        other => panic!("expected a written cache, got {other:?}"),
    }
}

#[test]
fn the_first_load_writes_the_cache_and_the_next_maps_it_with_identical_logits() {
    for spec in [TinyModel::llama(), TinyModel::gemma3()] {
        let tmp = TempDir::new(&format!("hit-{:?}", spec.arch));
        let bytes = spec.to_bytes();
        let path = write_model(&tmp.0, &bytes);
        let cache = PackCache::Beside { fallback: None };
        let want = uncached(&bytes);
        let first = load(&path, &cache, &want);
        if !packs(&first) {
            return;
        }
        assert_eq!(
            first,
            PackCacheStatus::Written {
                path: tmp.0.join("tiny.gguf.pagoda-packed"),
                miss: CacheMiss::Absent
            }
        );
        let second = load(&path, &cache, &want);
        assert_eq!(second, PackCacheStatus::Hit(written_to(&first).to_owned()));
        // Only the cache file was added: the temporary file was renamed, not left behind.
        let mut names: Vec<_> = std::fs::read_dir(&tmp.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["tiny.gguf", "tiny.gguf.pagoda-packed"]);
    }
}

#[test]
fn a_damaged_or_truncated_cache_file_is_repacked_and_rewritten() {
    let bytes = TinyModel::llama().to_bytes();
    let tmp = TempDir::new("damaged");
    let path = write_model(&tmp.0, &bytes);
    let cache = PackCache::In(tmp.0.join("cache"));
    let want = uncached(&bytes);
    let first = load(&path, &cache, &want);
    if !packs(&first) {
        return;
    }
    let file = written_to(&first).to_owned();
    let good = std::fs::read(&file).unwrap();
    let last = good.len() - 1;
    type Damage = Box<dyn Fn(&mut Vec<u8>)>;
    let damages: [(&str, Damage); 6] = [
        ("a flipped data byte", Box::new(move |b| b[last - 100] ^= 4)),
        ("a flipped index byte", Box::new(|b| b[100] ^= 1)),
        ("a flipped key byte", Box::new(|b| b[20] ^= 1)),
        ("truncated data", Box::new(move |b| b.truncate(last))),
        ("truncated header", Box::new(|b| b.truncate(50))),
        (
            "another file",
            Box::new(|b| *b = b"GGUF not a cache".to_vec()),
        ),
    ];
    for (what, damage) in &damages {
        let mut bad = good.clone();
        damage(&mut bad);
        std::fs::write(&file, &bad).unwrap();
        let status = load(&path, &cache, &want);
        match &status {
            PackCacheStatus::Written {
                path,
                miss: CacheMiss::Invalid(_),
            } if path == &file => {}
            other => panic!("{what}: expected a rewrite after an invalid file, got {other:?}"),
        }
        assert_eq!(
            std::fs::read(&file).unwrap(),
            good,
            "{what}: rewritten as before"
        );
        assert_eq!(
            load(&path, &cache, &want),
            PackCacheStatus::Hit(file.clone())
        );
    }
}

#[test]
fn a_changed_model_file_makes_the_cache_stale() {
    let spec = TinyModel::llama();
    let bytes = spec.to_bytes();
    let tmp = TempDir::new("stale");
    let path = write_model(&tmp.0, &bytes);
    let cache = PackCache::Beside { fallback: None };
    let old = uncached(&bytes);
    let first = load(&path, &cache, &old);
    if !packs(&first) {
        return;
    }
    // Other weights of the same size and shapes: only the file's metadata tells them apart,
    // and mapping the old cache would give the old model's logits.
    let other = TinyModel { seed: 99, ..spec }.to_bytes();
    let want = uncached(&other);
    assert_ne!(want, old);
    assert_eq!(other.len(), bytes.len());
    std::fs::write(&path, &other).unwrap();
    let mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
    let moved = mtime + std::time::Duration::from_secs(1);
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(moved)
        .unwrap();
    let status = load(&path, &cache, &want);
    assert!(
        matches!(
            &status,
            PackCacheStatus::Written {
                miss: CacheMiss::Stale,
                ..
            }
        ),
        "{status:?}"
    );
    assert!(matches!(
        load(&path, &cache, &want),
        PackCacheStatus::Hit(_)
    ));

    // Only the mtime moves: still stale.
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(moved + std::time::Duration::from_nanos(1))
        .unwrap();
    let status = load(&path, &cache, &want);
    assert!(
        matches!(
            &status,
            PackCacheStatus::Written {
                miss: CacheMiss::Stale,
                ..
            }
        ),
        "{status:?}"
    );
}

#[test]
fn an_unwritable_cache_directory_still_loads() {
    let bytes = TinyModel::gemma3().to_bytes();
    let tmp = TempDir::new("unwritable");
    let path = write_model(&tmp.0, &bytes);
    let want = uncached(&bytes);
    // A directory under a regular file can be neither created nor written, even by root.
    let blocker = tmp.0.join("not-a-dir");
    std::fs::write(&blocker, b"").unwrap();
    let cache = PackCache::In(blocker.join("cache"));
    for _ in 0..2 {
        let status = load(&path, &cache, &want);
        if !packs(&status) {
            return;
        }
        assert!(
            matches!(
                &status,
                PackCacheStatus::NotWritten {
                    miss: CacheMiss::Absent,
                    ..
                }
            ),
            "{status:?}"
        );
    }
}

#[test]
fn when_the_model_directory_cannot_take_the_cache_the_fallback_directory_does() {
    let bytes = TinyModel::llama().to_bytes();
    let tmp = TempDir::new("fallback");
    let path = write_model(&tmp.0, &bytes);
    let want = uncached(&bytes);
    // A directory where the file beside the model would go: it can be neither read as a cache
    // nor renamed over.
    std::fs::create_dir(tmp.0.join("tiny.gguf.pagoda-packed")).unwrap();
    let fallback = tmp.0.join("fallback");
    let cache = PackCache::Beside {
        fallback: Some(fallback.clone()),
    };
    let first = load(&path, &cache, &want);
    if !packs(&first) {
        return;
    }
    let file = written_to(&first).to_owned();
    assert_eq!(file.parent(), Some(fallback.as_path()));
    assert_eq!(load(&path, &cache, &want), PackCacheStatus::Hit(file));
}

#[test]
fn turned_off_it_neither_reads_nor_writes() {
    let bytes = TinyModel::llama().to_bytes();
    let tmp = TempDir::new("off");
    let path = write_model(&tmp.0, &bytes);
    let want = uncached(&bytes);
    assert_eq!(load(&path, &PackCache::Off, &want), PackCacheStatus::Off);
    assert_eq!(std::fs::read_dir(&tmp.0).unwrap().count(), 1);
}
