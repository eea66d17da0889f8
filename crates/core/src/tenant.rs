//! Who a request belongs to, as far as the scheduler cares: a tenant id (the server maps its
//! API keys' tenant names to ids) and the tenant's weight in the fair share.

/// A request's tenant and its weight under `SchedulingPolicy::Fair`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tenant {
    /// Stable for the life of the engine; requests without a tenant use 0.
    pub id: u32,
    /// Share of the token throughput relative to other waiting tenants (>= 1): a tenant of
    /// weight 2 is served twice the tokens of one of weight 1 while both wait.
    pub weight: u32,
}

impl Default for Tenant {
    fn default() -> Self {
        Self { id: 0, weight: 1 }
    }
}
