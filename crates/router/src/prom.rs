//! The few numbers the router reads from a replica's Prometheus text: a sample's value
//! (summed over its label sets) and one label of an info metric.

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
    let key = format!("{label}=\"");
    let start = labels.find(&key)? + key.len();
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
}
