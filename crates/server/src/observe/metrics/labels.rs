//! The labels every series of one model carries: `model_name`, as vLLM's series do, so a
//! dashboard built for vLLM selects pagoda's series the same way.

use pagoda_exposition::Labels;

/// The `model_name` label every series carries.
pub fn model_labels(model_name: &str) -> Labels {
    vec![("model_name", model_name.to_owned())]
}
