//! What a request's output must match (structured output), as the core sees it: a constraint
//! compiled once at the edge and carried with the request, which starts one grammar state per
//! sequence. The core never looks inside; the executor masks logits with the state each step.

use std::fmt;
use std::sync::Arc;

use thiserror::Error;

/// A compiled constraint (JSON schema, regex, choice, grammar): `Send + Sync`, shared by every
/// sequence of every request that asked for it.
pub trait TokenConstraint: Send + Sync {
    /// What the user asked for (`json`, `regex`, `choice`, ...), for logs and errors.
    fn kind(&self) -> &'static str;
    /// A grammar state at the start of the output, for one sequence.
    fn start(&self) -> Box<dyn ConstraintState>;
}

/// One sequence's grammar state: the mask of the next position, then the chosen token.
pub trait ConstraintState: Send {
    /// The grammar admits nothing more: the sequence must end with [`Self::eos_token`].
    fn is_finished(&self) -> bool;
    /// The end-of-generation id a finished grammar emits.
    fn eos_token(&self) -> u32;
    /// Sets every logit the grammar does not allow at the next position to -inf.
    fn apply_mask(&mut self, logits: &mut [f32]) -> Result<(), ConstraintError>;
    /// Advances the state with the token chosen for the next position.
    fn consume(&mut self, token: u32) -> Result<(), ConstraintError>;
    /// An independent copy of this state.
    fn clone_state(&self) -> Box<dyn ConstraintState>;
}

/// The grammar failed at run time (a limit hit while matching, an internal error).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{0}")]
pub struct ConstraintError(pub String);

/// A request's constraint as `SamplingParams` carries it: compared by identity, since two
/// compilations of one schema are interchangeable but not cheaply comparable.
#[derive(Clone)]
pub struct ConstraintRef(pub Arc<dyn TokenConstraint>);

impl ConstraintRef {
    pub fn new(c: Arc<dyn TokenConstraint>) -> Self {
        Self(c)
    }

    pub fn kind(&self) -> &'static str {
        self.0.kind()
    }

    pub fn start(&self) -> Box<dyn ConstraintState> {
        self.0.start()
    }
}

impl PartialEq for ConstraintRef {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl fmt::Debug for ConstraintRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ConstraintRef({})", self.kind())
    }
}

impl fmt::Display for ConstraintRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind())
    }
}

impl Clone for Box<dyn ConstraintState> {
    fn clone(&self) -> Self {
        self.clone_state()
    }
}

impl fmt::Debug for dyn ConstraintState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConstraintState")
            .field("finished", &self.is_finished())
            .finish()
    }
}
