//! The few numbers the router reads from a replica's Prometheus text: a sample's value
//! (summed over its label sets) and the labels of info metrics.

/// The sum of `name`'s samples, or None when it has none.
pub fn value(text: &str, name: &str) -> Option<f64> {
    let mut sum = None;
    for (_, v) in samples(text, name) {
        *sum.get_or_insert(0.0) += v;
    }
    sum
}

/// `label` of `name`'s first sample.
pub fn label(text: &str, name: &str, label: &str) -> Option<String> {
    let (labels, _) = samples(text, name).next()?;
    label_in(labels, label)
}

/// `(a, b)`: labels `a` and `b` of each of `name`'s samples that has both.
pub fn label_pairs(text: &str, name: &str, a: &str, b: &str) -> Vec<(String, String)> {
    samples(text, name)
        .filter_map(|(labels, _)| Some((label_in(labels, a)?, label_in(labels, b)?)))
        .collect()
}

/// The value of `label` in a sample's `k="v",...` label text.
fn label_in(labels: &str, label: &str) -> Option<String> {
    let key = format!("{label}=\"");
    let start = labels
        .match_indices(&key)
        .map(|(i, _)| i)
        .find(|&i| i == 0 || labels[..i].ends_with(','))?
        + key.len();
    let end = labels[start..].find('"')? + start;
    Some(labels[start..end].to_string())
}

/// `(labels, value)` of each line `name{labels} value` or `name value`.
fn samples<'a>(text: &'a str, name: &'a str) -> impl Iterator<Item = (&'a str, f64)> + 'a {
    text.lines().filter_map(move |l| {
        let rest = l.strip_prefix(name)?;
        let (labels, value) = match rest.strip_prefix('{') {
            Some(r) => {
                let end = r.rfind('}')?;
                (&r[..end], &r[end + 1..])
            }
            None if rest.starts_with(' ') => ("", rest),
            None => return None,
        };
        let v = value.split_whitespace().next()?.parse().ok()?;
        Some((labels, v))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_and_labels_are_read() {
        let t = "# HELP x\npagoda:num_requests_running{model_name=\"m\"} 2\n\
                 pagoda:num_requests_running_total 9\n\
                 pagoda:cache_config_info{model_name=\"m\",block_size=\"16\"} 1\nup 1\n";
        assert_eq!(value(t, "pagoda:num_requests_running"), Some(2.0));
        assert_eq!(value(t, "up"), Some(1.0));
        assert_eq!(value(t, "down"), None);
        assert_eq!(
            label(t, "pagoda:cache_config_info", "block_size").as_deref(),
            Some("16")
        );
    }

    #[test]
    fn label_pairs_are_read_from_every_sample_by_whole_name() {
        let t = "pagoda:lora_adapter_info{lora_name=\"a\",cache_digest=\"00ff\"} 1\n\
                 pagoda:lora_adapter_info{xlora_name=\"z\",lora_name=\"b\",cache_digest=\"01\"} 1\n\
                 pagoda:lora_adapter_info{lora_name=\"c\"} 1\n";
        assert_eq!(
            label_pairs(t, "pagoda:lora_adapter_info", "lora_name", "cache_digest"),
            [("a".into(), "00ff".into()), ("b".into(), "01".into())]
        );
    }
}
