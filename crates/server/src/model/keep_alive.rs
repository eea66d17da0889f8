//! `keep_alive`, Ollama's semantics: how long a model stays loaded after its last request. A
//! number is seconds, a string a duration (`"5m"`, `"1h30m"`, `"10s"`, `"0"`), zero unloads
//! after the request, a negative value keeps the model until memory is short.

use std::time::Duration;

use serde_json::Value;

/// How long an idle model stays loaded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeepAlive {
    /// Until memory is short or it is unloaded by name.
    Forever,
    /// This long after its last request ends (zero: as soon as it ends).
    For(Duration),
}

impl KeepAlive {
    /// Parses a request's or a flag's value; `None` names what is wrong.
    pub fn from_json(v: &Value) -> Option<Self> {
        match v {
            Value::Number(n) => Self::from_secs(n.as_f64()?),
            Value::String(s) => Self::parse(s),
            _ => None,
        }
    }

    /// `"5m"`, `"90s"`, `"1h30m"`, `"250ms"`, `"0"`, `"-1"`, or bare seconds (`"300"`).
    pub fn parse(text: &str) -> Option<Self> {
        let t = text.trim();
        if t.is_empty() {
            return None;
        }
        if let Ok(secs) = t.parse::<f64>() {
            return Self::from_secs(secs);
        }
        if let Some(positive) = t.strip_prefix('-') {
            // A negative duration ("-1m"), as Ollama: forever.
            return Self::parse(positive).map(|_| Self::Forever);
        }
        let mut total = 0.0;
        let mut rest = t;
        while !rest.is_empty() {
            let digits = rest
                .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                .filter(|&i| i > 0)?;
            let n: f64 = rest[..digits].parse().ok()?;
            rest = &rest[digits..];
            let unit_len = rest
                .find(|c: char| c.is_ascii_digit())
                .unwrap_or(rest.len());
            let scale = match &rest[..unit_len] {
                "ms" => 0.001,
                "s" => 1.0,
                "m" => 60.0,
                "h" => 3600.0,
                _ => return None,
            };
            total += n * scale;
            rest = &rest[unit_len..];
        }
        Self::from_secs(total)
    }

    fn from_secs(secs: f64) -> Option<Self> {
        if secs.is_nan() {
            return None;
        }
        if secs < 0.0 {
            return Some(Self::Forever);
        }
        Duration::try_from_secs_f64(secs).ok().map(Self::For)
    }

    /// As `/v1/models` shows it: seconds, or -1 for forever.
    pub fn seconds(self) -> f64 {
        match self {
            Self::Forever => -1.0,
            Self::For(d) => d.as_secs_f64(),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn ollamas_spellings_parse() {
        let d = |s| KeepAlive::For(Duration::from_secs(s));
        assert_eq!(KeepAlive::parse("5m"), Some(d(300)));
        assert_eq!(KeepAlive::parse("1h30m"), Some(d(5400)));
        assert_eq!(KeepAlive::parse("10s"), Some(d(10)));
        assert_eq!(KeepAlive::parse("0"), Some(d(0)));
        assert_eq!(KeepAlive::parse("-1"), Some(KeepAlive::Forever));
        assert_eq!(KeepAlive::parse("-5m"), Some(KeepAlive::Forever));
        assert_eq!(
            KeepAlive::parse("250ms"),
            Some(KeepAlive::For(Duration::from_millis(250)))
        );
        assert_eq!(KeepAlive::from_json(&json!(120)), Some(d(120)));
        assert_eq!(KeepAlive::from_json(&json!(-1)), Some(KeepAlive::Forever));
        assert_eq!(KeepAlive::from_json(&json!("0s")), Some(d(0)));
    }

    #[test]
    fn nonsense_is_refused() {
        for bad in ["", "5 minutes", "m", "5x", "1e999"] {
            assert_eq!(KeepAlive::parse(bad), None, "{bad}");
        }
        assert_eq!(KeepAlive::from_json(&json!(true)), None);
        assert_eq!(KeepAlive::from_json(&json!(null)), None);
    }
}
