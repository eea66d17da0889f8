//! The engine's side of a compiled constraint: `CompiledConstraint` is the core's
//! `TokenConstraint` (one compile, a matcher per sequence) and `ConstraintMatcher` its
//! `ConstraintState`, so the executor masks logits without knowing llguidance or the tokenizer.

use std::sync::Arc;

use pagoda_core::{ConstraintError, ConstraintRef, ConstraintState, TokenConstraint};

use crate::{CompiledConstraint, ConstraintMatcher, StructuredError};

impl TokenConstraint for CompiledConstraint {
    fn kind(&self) -> &'static str {
        self.constraint().kind()
    }

    fn start(&self) -> Box<dyn ConstraintState> {
        Box::new(self.matcher())
    }
}

impl CompiledConstraint {
    /// This compiled constraint as a request carries it to the engine.
    pub fn into_ref(self: Arc<Self>) -> ConstraintRef {
        ConstraintRef::new(self)
    }
}

fn engine_error(e: StructuredError) -> ConstraintError {
    ConstraintError(e.to_string())
}

impl ConstraintState for ConstraintMatcher {
    fn is_finished(&self) -> bool {
        ConstraintMatcher::is_finished(self)
    }

    fn eos_token(&self) -> u32 {
        ConstraintMatcher::eos_token(self)
    }

    fn apply_mask(&mut self, logits: &mut [f32]) -> Result<(), ConstraintError> {
        ConstraintMatcher::apply_mask(self, logits).map_err(engine_error)
    }

    fn consume(&mut self, token: u32) -> Result<(), ConstraintError> {
        ConstraintMatcher::consume(self, token).map_err(engine_error)
    }

    fn clone_state(&self) -> Box<dyn ConstraintState> {
        Box::new(self.clone())
    }
}
