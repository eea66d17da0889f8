//! Scheduling: which sequences compute how many tokens each step, and what happens after.

mod context_shift;
pub mod fair;
pub mod output;
pub mod queue;
pub mod scheduler;
mod slo_step;
mod spec_slots;
pub mod stop;
mod tier_load;

pub use output::{ContextShift, NewSeqData, ScheduledSeq, SchedulerOutput};
pub use scheduler::{Scheduler, SchedulerCounters, SeqResult, SeqUpdate};
