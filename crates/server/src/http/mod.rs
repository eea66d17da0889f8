//! Stage 1, bytes -> an API request: the accept loop and connection timeouts, the JSON body
//! (its size limit and error shape), who is calling (API keys, tenants), CORS and the request id
//! every log line and response carries.

pub mod auth;
pub mod body;
pub mod cors;
pub(crate) mod listener;
pub mod request_id;
pub mod wire_request;
