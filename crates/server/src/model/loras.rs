//! The server's LoRA adapters: name -> file, loaded on demand and kept up to `max_cpu_loras`
//! (least recently used dropped beyond that, reloaded from disk when asked for again). A request
//! holds its adapter's `Arc`, so unloading or evicting one never disturbs requests using it.
//! Adapters are GGUF LoRA files or PEFT directories (converted by `pagoda-hf`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use pagoda_core::LoraRef;
use pagoda_model::{LoraAdapter, LoraOptions, ModelConfig};

/// How adapters are served (`--max-lora-rank`, `--max-cpu-loras`, `--max-loras`,
/// `--enable-lora-runtime-updates`, `--lora-modules`).
#[derive(Clone, Debug, Default)]
pub struct LoraConfig {
    /// `(name, path)` loaded at start-up.
    pub modules: Vec<(String, PathBuf)>,
    pub max_lora_rank: usize,
    /// Adapters kept in memory; 0: no limit.
    pub max_cpu_loras: usize,
    /// Adapters per step (reported in `pagoda:lora_requests_info`; the scheduler enforces it).
    pub max_loras: usize,
    /// Whether `/v1/load_lora_adapter` and `/v1/unload_lora_adapter` exist.
    pub runtime_updates: bool,
    /// `--lora-dir`: the only directory `/v1/load_lora_adapter` reads from (a relative
    /// `lora_path` is taken inside it); without it, the route loads nothing.
    pub runtime_dir: Option<PathBuf>,
}

impl LoraConfig {
    /// Where a runtime `lora_path` points, if it lies under `--lora-dir` (after resolving
    /// `..` and symbolic links, so neither can step out).
    pub fn runtime_path(&self, given: &str) -> Result<PathBuf, LoraServeError> {
        let outside = || LoraServeError::OutsideDir {
            path: given.to_owned(),
            dir: self.runtime_dir.as_ref().map(|d| d.display().to_string()),
        };
        let dir = self.runtime_dir.as_ref().ok_or_else(outside)?;
        let dir = dir.canonicalize().map_err(|_| outside())?;
        let path = dir.join(given).canonicalize().map_err(|_| outside())?;
        if path.starts_with(&dir) {
            Ok(path)
        } else {
            Err(outside())
        }
    }
}

/// Reads the adapter at `path`, a GGUF LoRA file or a PEFT directory, for a model of `model`.
pub fn read_adapter(
    path: &Path,
    model: &ModelConfig,
    opts: &LoraOptions,
) -> Result<LoraAdapter, String> {
    if pagoda_hf::is_peft_dir(path) {
        let base = pagoda_hf::LoraBase {
            architecture: model.architecture.name(),
            n_heads: model.n_heads,
            n_kv_heads: model.n_kv_heads,
        };
        let file = pagoda_hf::convert_lora(path, base).map_err(|e| e.to_string())?;
        LoraAdapter::from_gguf(&file, model, opts)
    } else {
        LoraAdapter::open(path, model, opts)
    }
    .map_err(|e| e.to_string())
}

/// Why an adapter cannot be loaded, unloaded or used.
#[derive(Debug, thiserror::Error)]
pub enum LoraServeError {
    #[error("The lora adapter '{0}' cannot be found.")]
    NotFound(String),
    #[error("The lora adapter '{0}' has already been loaded.")]
    AlreadyLoaded(String),
    #[error("The lora adapter name '{0}' is the base model's name.")]
    BaseName(String),
    #[error("{}", outside_message(path, dir.as_deref()))]
    OutsideDir { path: String, dir: Option<String> },
    #[error("Cannot load the lora adapter '{name}' from {path}: {message}")]
    Load {
        name: String,
        path: String,
        message: String,
    },
}

fn outside_message(path: &str, dir: Option<&str>) -> String {
    match dir {
        Some(dir) => format!("lora_path {path:?} is not an adapter under --lora-dir {dir}"),
        None => "runtime adapter loading needs the server started with --lora-dir".into(),
    }
}

struct Entry {
    path: PathBuf,
    /// The adapter's content digest, its identity in prefix-cache block hashes (kept while
    /// evicted, so a router can still compute the hashes).
    digest: u64,
    /// `None` once evicted (reloaded from `path` on the next request).
    adapter: Option<Arc<LoraAdapter>>,
    last_used: u64,
    requests: u64,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<String, Entry>,
    clock: u64,
}

/// The adapters a server offers over its one base model.
pub struct LoraRegistry {
    config: LoraConfig,
    model: ModelConfig,
    base_name: String,
    inner: Mutex<Inner>,
}

impl LoraRegistry {
    /// An empty registry for a base model of `model`, served as `base_name`.
    pub fn new(config: LoraConfig, model: ModelConfig, base_name: &str) -> Self {
        Self {
            config,
            model,
            base_name: base_name.to_owned(),
            inner: Mutex::default(),
        }
    }

    pub fn config(&self) -> &LoraConfig {
        &self.config
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves plain data behind: keep serving.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads the adapter at `path` (a GGUF file or a PEFT directory) for this model.
    fn read(&self, name: &str, path: &Path) -> Result<Arc<LoraAdapter>, LoraServeError> {
        let err = |message: String| LoraServeError::Load {
            name: name.to_owned(),
            path: path.display().to_string(),
            message,
        };
        let opts = LoraOptions {
            scale: 1.0,
            max_rank: self.config.max_lora_rank,
        };
        let started = std::time::Instant::now();
        let adapter = read_adapter(path, &self.model, &opts).map_err(err)?;
        tracing::info!(
            lora = name,
            rank = adapter.max_rank(),
            bytes = adapter.memory_bytes(),
            seconds = started.elapsed().as_secs_f64(),
            "lora adapter loaded"
        );
        Ok(Arc::new(adapter))
    }

    /// Loads `name` from `path` (`/v1/load_lora_adapter`, `--lora-modules`). Blocks while it
    /// reads the file.
    pub fn load(&self, name: &str, path: &Path) -> Result<(), LoraServeError> {
        if name == self.base_name {
            return Err(LoraServeError::BaseName(name.to_owned()));
        }
        if self.lock().entries.contains_key(name) {
            return Err(LoraServeError::AlreadyLoaded(name.to_owned()));
        }
        let adapter = self.read(name, path)?;
        let mut inner = self.lock();
        if inner.entries.contains_key(name) {
            return Err(LoraServeError::AlreadyLoaded(name.to_owned()));
        }
        inner.clock += 1;
        let last_used = inner.clock;
        inner.entries.insert(
            name.to_owned(),
            Entry {
                path: path.to_owned(),
                digest: adapter.digest(),
                adapter: Some(adapter),
                last_used,
                requests: 0,
            },
        );
        self.evict(&mut inner);
        Ok(())
    }

    /// Forgets `name`; requests already using it finish with it.
    pub fn unload(&self, name: &str) -> Result<(), LoraServeError> {
        match self.lock().entries.remove(name) {
            Some(_) => Ok(()),
            None => Err(LoraServeError::NotFound(name.to_owned())),
        }
    }

    /// Whether `name` is an adapter of this server.
    pub fn contains(&self, name: &str) -> bool {
        self.lock().entries.contains_key(name)
    }

    /// The adapter `name` for one request (reloaded from disk if it was evicted), counted.
    pub fn resolve(&self, name: &str) -> Result<LoraRef, LoraServeError> {
        let (cached, path) = {
            let mut inner = self.lock();
            inner.clock += 1;
            let now = inner.clock;
            let e = inner
                .entries
                .get_mut(name)
                .ok_or_else(|| LoraServeError::NotFound(name.to_owned()))?;
            e.last_used = now;
            e.requests += 1;
            (e.adapter.clone(), e.path.clone())
        };
        let adapter = match cached {
            Some(a) => a,
            None => {
                let a = self.read(name, &path)?;
                let mut inner = self.lock();
                if let Some(e) = inner.entries.get_mut(name)
                    && e.path == path
                {
                    e.digest = a.digest();
                    e.adapter = Some(a.clone());
                }
                self.evict(&mut inner);
                a
            }
        };
        let digest = adapter.digest();
        Ok(LoraRef::new(name, digest, adapter))
    }

    /// Drops the least recently used adapters beyond `max_cpu_loras`.
    fn evict(&self, inner: &mut Inner) {
        let max = self.config.max_cpu_loras;
        if max == 0 {
            return;
        }
        loop {
            let loaded: Vec<(&String, u64)> = inner
                .entries
                .iter()
                .filter(|(_, e)| e.adapter.is_some())
                .map(|(n, e)| (n, e.last_used))
                .collect();
            if loaded.len() <= max {
                return;
            }
            let Some(oldest) = loaded
                .iter()
                .min_by_key(|(_, t)| *t)
                .map(|(n, _)| (*n).clone())
            else {
                return;
            };
            if let Some(e) = inner.entries.get_mut(&oldest) {
                e.adapter = None;
            }
        }
    }

    /// `(name, path, requests, in memory)` of every adapter, by name.
    /// Each adapter's name and content digest (`pagoda:lora_adapter_info`, which the router
    /// reads to hash LoRA requests' prompts as the engine does).
    pub fn digests(&self) -> Vec<(String, u64)> {
        let mut out: Vec<_> = self
            .lock()
            .entries
            .iter()
            .map(|(n, e)| (n.clone(), e.digest))
            .collect();
        out.sort();
        out
    }

    pub fn list(&self) -> Vec<(String, String, u64, bool)> {
        let inner = self.lock();
        let mut out: Vec<_> = inner
            .entries
            .iter()
            .map(|(n, e)| {
                (
                    n.clone(),
                    e.path.display().to_string(),
                    e.requests,
                    e.adapter.is_some(),
                )
            })
            .collect();
        out.sort();
        out
    }
}
