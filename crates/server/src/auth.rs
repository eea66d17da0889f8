//! API-key check for `--api-key`: the bearer token is compared in constant time, and the
//! tenant's prefix-cache salt is derived from the key so one tenant can never name (and so
//! probe) another tenant's cached blocks.

use std::hash::{BuildHasher, Hasher};

use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::Response;

use crate::error::ApiError;
use crate::error_shape::ErrorShape;
use crate::state::AppState;

/// Equality whose time depends only on the lengths, not on where the bytes differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= usize::from(x ^ y);
    }
    diff == 0
}

/// The prefix-cache salt of the tenant holding `key`: a keyed digest, so the key itself never
/// travels with requests into the engine.
pub fn tenant_salt(key: &str) -> String {
    // SipHash with a fixed seed; the salt only has to differ between keys and stay private.
    let state =
        std::hash::BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default();
    let mut h1 = state.build_hasher();
    h1.write(b"pagoda-tenant-1");
    h1.write(key.as_bytes());
    let mut h2 = state.build_hasher();
    h2.write(b"pagoda-tenant-2");
    h2.write(key.as_bytes());
    format!("tenant:{:016x}{:016x}", h1.finish(), h2.finish())
}

/// The key a request presents: `Authorization: Bearer <key>`, or Anthropic's `x-api-key`.
fn presented_key(headers: &axum::http::HeaderMap) -> Option<&str> {
    let bearer = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let x_api_key = || headers.get("x-api-key").and_then(|v| v.to_str().ok());
    bearer.or_else(x_api_key).map(str::trim)
}

/// Middleware: with an API key configured, requires `Authorization: Bearer <key>` or
/// `x-api-key: <key>`; the refusal is in the error body of the API called.
pub async fn require_key(State(state): State<AppState>, req: Request, next: Next) -> Response {
    if let Some(expected) = state.config().api_key.as_deref() {
        let given = presented_key(req.headers());
        let ok = given.is_some_and(|g| constant_time_eq(g.as_bytes(), expected.as_bytes()));
        if !ok {
            state.metrics().count_rejected("unauthorized");
            let msg = if given.is_none() {
                "missing API key: send `Authorization: Bearer <key>` or `x-api-key: <key>`"
            } else {
                "incorrect API key"
            };
            return ErrorShape::for_path(req.uri().path()).response(ApiError::unauthorized(msg));
        }
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_eq_is_equality() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(!constant_time_eq(b"", b"x"));
        assert!(constant_time_eq(b"", b""));
    }

    #[test]
    fn salts_differ_by_key_and_are_stable() {
        assert_eq!(tenant_salt("a"), tenant_salt("a"));
        assert_ne!(tenant_salt("a"), tenant_salt("b"));
        assert!(!tenant_salt("secret-key").contains("secret"));
    }
}
