//! A request's LoRA adapter as the core sees it: a name (for metrics), the digest of its
//! content (the prefix-cache key and what `--max-loras` counts per step) and an opaque handle
//! that only the executor reads. Compared by digest and name, never by the handle.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

#[derive(Clone)]
pub struct LoraRef {
    name: Arc<str>,
    digest: u64,
    handle: Arc<dyn Any + Send + Sync>,
}

impl LoraRef {
    pub fn new(name: impl Into<Arc<str>>, digest: u64, handle: Arc<dyn Any + Send + Sync>) -> Self {
        Self {
            name: name.into(),
            digest,
            handle,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn shared_name(&self) -> &Arc<str> {
        &self.name
    }

    /// The digest of the adapter's weights and configuration.
    pub fn digest(&self) -> u64 {
        self.digest
    }

    /// The executor's adapter, when it is a `T`.
    pub fn handle<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        self.handle.clone().downcast::<T>().ok()
    }
}

impl PartialEq for LoraRef {
    fn eq(&self, other: &Self) -> bool {
        self.digest == other.digest && self.name == other.name
    }
}

impl fmt::Debug for LoraRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LoraRef({}, {:016x})", self.name, self.digest)
    }
}
