//! A request as the engine receives it (`EngineRequest`: token ids, sampling parameters,
//! priority, tenant) and the client's id for it.

use crate::kv::ExtraKeys;
use crate::sampling_params::SamplingParams;
use crate::tenant::Tenant;

/// The client's id for a request (all its sequences share it).
pub type RequestId = u64;

/// A request as the engine receives it: tokens, never text.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineRequest {
    pub id: RequestId,
    pub prompt_token_ids: Vec<u32>,
    pub params: SamplingParams,
    /// Lower runs first when priority scheduling is on.
    pub priority: i32,
    /// Whose request this is, for `SchedulingPolicy::Fair`.
    pub tenant: Tenant,
    pub extra_keys: ExtraKeys,
}
