//! Speculative decoding, as the scheduler sees it: how many tokens each decoding sequence may
//! have proposed and verified in a step (a fixed K, or one chosen per step from each sequence's
//! acceptance and the measured cost of a step), and the counters that metrics read. Proposing
//! and verifying happen in the executor; the core only reserves the slots and takes the result.

pub mod acceptance;
pub mod config;
pub mod controller;
pub mod cost_model;

pub use acceptance::Acceptance;
pub use config::{NumSpecTokens, SpecConfig, SpecMethod};
pub use controller::{SpecCandidate, SpecController, SpecCounters};
pub use cost_model::StepCostModel;
