//! Capacity: how many requests per second a replica serves within an SLO, measured and
//! predicted with one definition. `slo` (the targets and the 90% attainment rule),
//! `rate_search` (the ladder-then-bisection over rates shared by `pagoda bench --sweep` and
//! the planner) and `arrival` (the arrival process both use) are the shared ground;
//! `profile` + `step_cost` (a machine's measured step costs and the model fitted to them),
//! `workload`, `simulate` (the scheduler in miniature) and `planner` + `plan_checks` are
//! `pagoda plan`. No pagoda crate below it: the binary measures profiles, the bench measures
//! rates, this crate only computes.
#![deny(missing_docs)]

pub mod arrival;
mod plan_checks;
mod plan_search;
pub mod plan_types;
pub mod planner;
pub mod profile;
pub mod rate_search;
pub mod simulate;
pub mod slo;
pub mod step_cost;
pub mod workload;

pub use planner::{DEFAULTS, Plan, PlanError, PlanOptions, Resource, Settings, plan};
pub use profile::{
    CostProfile, DecodePoint, KvBytes, Machine, ModelInfo, PrefillPoint, ProfileError,
};
pub use rate_search::RateSearch;
pub use slo::{ATTAINMENT, Slo, SloError};
pub use workload::{Length, Workload};

/// XORed into the run's seed to seed arrival times, in the bench and the simulation alike, so
/// the planner sees the arrival times the bench will send.
pub const ARRIVAL_SEED_SALT: u64 = 0xA221_7A15;
