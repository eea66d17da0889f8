//! How several models share a server: the memory budget, how many stay loaded, how long an
//! idle one stays, and `--models-dir` (`ServerConfig::models`).

use std::path::PathBuf;
use std::time::Duration;

use pagoda_model::EngineSetup;

use crate::model::keep_alive::KeepAlive;

/// How many models, how much memory and how long they stay.
#[derive(Clone, Debug)]
pub struct ModelsConfig {
    /// Bytes all loaded models may take (weights + KV + scratch); `None`: `memory::default_budget`.
    pub memory_budget: Option<u64>,
    /// Most models loaded at once; 0: no limit but memory.
    pub max_loaded: usize,
    /// How long an idle model stays loaded unless its requests say otherwise.
    pub keep_alive: KeepAlive,
    /// How long a load waits for busy models to free memory before failing with 503.
    pub room_timeout: Duration,
    /// `--models-dir`: served too, found again on SIGHUP, each with `dir_setup`.
    pub dir: Option<PathBuf>,
    pub dir_setup: EngineSetup,
}

impl Default for ModelsConfig {
    fn default() -> Self {
        Self {
            memory_budget: None,
            max_loaded: 0,
            keep_alive: KeepAlive::Forever,
            room_timeout: Duration::from_secs(60),
            dir: None,
            dir_setup: EngineSetup::default(),
        }
    }
}
