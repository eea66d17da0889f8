//! CORS for `--allowed-origins`: browsers' preflight `OPTIONS` is answered before auth (it
//! carries no key), and the allowed origins may read the responses and `X-Request-Id`.

use axum::http::{HeaderValue, Method};
use tower_http::cors::{AllowOrigin, Any, CorsLayer};

use crate::http::request_id::X_REQUEST_ID;

/// The layer for `origins` (`*` allows any); `None` when the list is empty.
pub fn layer(origins: &[String]) -> Option<CorsLayer> {
    if origins.is_empty() {
        return None;
    }
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(
            origins
                .iter()
                .filter_map(|o| HeaderValue::from_str(o.trim_end_matches('/')).ok()),
        )
    };
    Some(
        CorsLayer::new()
            .allow_origin(allow)
            .allow_methods([Method::GET, Method::POST, Method::DELETE, Method::OPTIONS])
            .allow_headers(Any)
            .expose_headers([X_REQUEST_ID.clone()])
            .max_age(std::time::Duration::from_secs(600)),
    )
}
