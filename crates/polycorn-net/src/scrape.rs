//! Reading a metrics endpoint: `GET /metrics` over plain HTTP and the Prometheus/OpenMetrics
//! text exposition it answers, as samples (name, labels, value).

use std::io::{Read as _, Write as _};
use std::net::SocketAddr;
use std::time::Duration;

/// How long connecting to, and reading from, a metrics endpoint may take.
pub const TIMEOUT: Duration = Duration::from_secs(5);

/// Why a metrics endpoint could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// Nothing accepted the connection.
    #[error("cannot connect (is the daemon running, with [metrics] listen there?)")]
    Connect(#[source] std::io::Error),
    /// The answer could not be read to its end.
    #[error("cannot read the answer")]
    Read(#[source] std::io::Error),
    /// Setting up the connection or sending the request failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The answer is not HTTP.
    #[error("answered without an HTTP header: not a metrics endpoint?")]
    NoHeader,
    /// The answer is HTTP but not 200 (its status line).
    #[error("answered {0}")]
    Status(String),
}

/// `GET /metrics` from `addr`: the body of a 200 answer.
pub fn fetch_metrics(addr: SocketAddr) -> Result<String, FetchError> {
    let mut c =
        std::net::TcpStream::connect_timeout(&addr, TIMEOUT).map_err(FetchError::Connect)?;
    c.set_read_timeout(Some(TIMEOUT))?;
    c.write_all(b"GET /metrics HTTP/1.0\r\n\r\n")?;
    let mut text = String::new();
    c.read_to_string(&mut text).map_err(FetchError::Read)?;
    let (head, body) = text.split_once("\r\n\r\n").ok_or(FetchError::NoHeader)?;
    if !head.starts_with("HTTP/1.0 200") && !head.starts_with("HTTP/1.1 200") {
        return Err(FetchError::Status(
            head.lines().next().unwrap_or("").to_string(),
        ));
    }
    Ok(body.to_string())
}

/// A line of an exposition that is not a sample.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("line {line}: `{text}`: {reason}")]
pub struct ParseError {
    /// Its line number (from 1).
    pub line: usize,
    /// The line, trimmed.
    pub text: String,
    /// What is wrong with it.
    pub reason: String,
}

/// One sample of the OpenMetrics text: `name{label="value",…} value`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Metric name, with its suffix (`_total`, `_bucket`, …).
    pub name: String,
    /// Labels in their order.
    pub labels: Vec<(String, String)>,
    /// The value.
    pub value: f64,
}

impl Sample {
    /// The value of label `key`, if present.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Every sample of an OpenMetrics/Prometheus text exposition (comments skipped). A line that
/// is not a sample is an error naming its line number.
pub fn parse_samples(text: &str) -> Result<Vec<Sample>, ParseError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        out.push(parse_line(line).map_err(|reason| ParseError {
            line: i + 1,
            text: line.to_string(),
            reason,
        })?);
    }
    Ok(out)
}

fn parse_line(line: &str) -> Result<Sample, String> {
    let name_end = line
        .find(|c: char| c == '{' || c.is_whitespace())
        .ok_or("no value")?;
    let name = &line[..name_end];
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    {
        return Err(format!("bad metric name `{name}`"));
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(r) = rest.strip_prefix('{') {
        rest = r;
        loop {
            rest = rest.trim_start_matches([' ', ',']);
            if let Some(r) = rest.strip_prefix('}') {
                rest = r;
                break;
            }
            let (key, r) = rest.split_once("=\"").ok_or("label without =\"value\"")?;
            let mut value = String::new();
            let mut chars = r.char_indices();
            let end = loop {
                match chars.next() {
                    Some((j, '"')) => break j,
                    Some((_, '\\')) => match chars.next() {
                        Some((_, 'n')) => value.push('\n'),
                        Some((_, c)) => value.push(c),
                        None => return Err("unterminated label value".into()),
                    },
                    Some((_, c)) => value.push(c),
                    None => return Err("unterminated label value".into()),
                }
            };
            labels.push((key.trim().to_string(), value));
            rest = &r[end + 1..];
        }
    }
    let value = rest.split_whitespace().next().ok_or("no value")?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v
            .parse()
            .map_err(|e| format!("value `{v}` is not a number: {e}"))?,
    };
    Ok(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_exposition_is_refused_naming_the_line() {
        for (text, want) in [
            ("# HELP x\nx_total 1\nbad line here\n", "line 3"),
            ("a{b=\"c} 1\n", "unterminated"),
            ("a{b} 1\n", "label without"),
            ("a{b=\"c\"} one\n", "not a number"),
            ("a\n", "no value"),
        ] {
            let e = parse_samples(text).unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e}");
        }
        let s = parse_samples("a{b=\"x\\\"y\",c=\"\"} +Inf 123\n").unwrap();
        assert_eq!(s[0].label("b"), Some("x\"y"));
        assert_eq!(s[0].label("c"), Some(""));
        assert_eq!(s[0].value, f64::INFINITY);
    }
}
