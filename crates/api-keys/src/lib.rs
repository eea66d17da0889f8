//! API keys as both the server and the router read them: the `--api-keys-file` format
//! (`keys_file`), what a key may do (`scopes`), and the keyed digest kept of a key, from which
//! a tenant's prefix-cache salt comes (`key_digest`): one definition, so the router hashes a
//! tenant's prompts exactly as the replicas do.

pub mod key_digest;
pub mod keys_file;
pub mod scopes;

pub use keys_file::{KeysFileError, Limits};

/// The header a router sends its own key in (a key with the `router` scope), beside the
/// client's key, which still names the tenant: replicas with keys take `kv_transfer_params`
/// only from a request carrying it.
pub const ROUTER_KEY_HEADER: &str = "x-pagoda-router-key";
pub use scopes::Scopes;
