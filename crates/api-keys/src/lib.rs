//! API keys as both the server and the router read them: the `--api-keys-file` format
//! (`keys_file`), what a key may do (`scopes`), and the keyed digest kept of a key, from which
//! a tenant's prefix-cache salt comes (`key_digest`): one definition, so the router hashes a
//! tenant's prompts exactly as the replicas do.

pub mod key_digest;
pub mod keys_file;
pub mod scopes;

pub use keys_file::{KeysFileError, Limits};
pub use scopes::Scopes;
