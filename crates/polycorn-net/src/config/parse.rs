//! Reading a TOML file into the configuration types, with errors that name the key and,
//! for the parser's, its line and column.

use std::fmt;
use std::net::SocketAddr;
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::Deserialize;

use super::error::*;

pub(super) fn read(path: &Path) -> Result<(String, PathBuf), ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|cause| ConfigError::Read {
        file: path.to_path_buf(),
        cause,
    })?;
    let base = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok((text, base))
}

pub(super) fn resolve(base: &Path, file: &Path) -> PathBuf {
    if file.is_relative() {
        base.join(file)
    } else {
        file.to_path_buf()
    }
}

pub(super) fn parse<T: for<'de> Deserialize<'de>>(
    text: &str,
    origin: &str,
) -> Result<T, ConfigError> {
    toml::from_str(text).map_err(|e| {
        let offset = e.span().map(|s| s.start).unwrap_or(0);
        let (line, column) = line_column(text, offset);
        let mut key = e.span().and_then(|s| locate_key(text, s));
        let message = e.message().trim_end().replace('\n', "; ");
        // "missing field `x`" is reported on the table; name the key that is missing.
        if let Some(field) = message
            .strip_prefix("missing field `")
            .and_then(|rest| rest.strip_suffix('`'))
        {
            key = Some(match key {
                Some(table) => join(&table, field),
                None => field.to_owned(),
            });
        }
        let message = hint(&message, key.as_deref());
        ConfigError::Toml {
            origin: origin.to_owned(),
            line,
            column,
            key,
            message,
        }
    })
}

/// Adds the expected form to the standard library's terse address parse errors (`ipnet`
/// reuses the IP address message for CIDRs, so the key tells them apart).
pub(super) fn hint(message: &str, key: Option<&str>) -> String {
    let cidr = key.is_some_and(|k| k.starts_with("policy.") || k.starts_with("proxy.tunnel_peers"));
    let extra = match message {
        "invalid socket address syntax" => {
            " (expected IP:PORT such as \"10.0.2.1:7700\" or \"[2001:db8::1]:7700\"; host names \
             are not resolved)"
        }
        "invalid IP address syntax" if cidr => {
            " (expected a CIDR such as \"10.0.0.0/8\" or \"2001:db8::/32\")"
        }
        "invalid IP address syntax" => " (expected an IPv4 or IPv6 address, no port)",
        _ => "",
    };
    format!("{message}{extra}")
}

/// 1-based line and column (in characters) of byte `offset`.
pub(super) fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map(|i| i + 1).unwrap_or(0);
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

/// The dotted key path (`path[1].device`) whose key or value is the narrowest span containing
/// the start of `span`, found by re-parsing `text` with spans kept.
pub(super) fn locate_key(text: &str, span: Range<usize>) -> Option<String> {
    let doc = toml_edit::ImDocument::parse(text).ok()?;
    let mut best: Option<(usize, String)> = None;
    walk_table(doc.as_table(), "", span.start, &mut best);
    best.map(|(_, path)| path)
}

pub(super) fn consider(
    span: Option<Range<usize>>,
    offset: usize,
    path: &str,
    best: &mut Option<(usize, String)>,
) {
    let Some(s) = span else { return };
    if s.start <= offset && offset < s.end.max(s.start + 1) {
        let width = s.end - s.start;
        if best.as_ref().is_none_or(|(w, _)| width <= *w) {
            *best = Some((width, path.to_owned()));
        }
    }
}

pub(super) fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_owned()
    } else {
        format!("{prefix}.{key}")
    }
}

pub(super) fn walk_table(
    table: &dyn toml_edit::TableLike,
    prefix: &str,
    offset: usize,
    best: &mut Option<(usize, String)>,
) {
    for (name, item) in table.iter() {
        let path = join(prefix, name);
        if let Some((key, _)) = table.get_key_value(name) {
            consider(key.span(), offset, &path, best);
        }
        consider(item.span(), offset, &path, best);
        match item {
            toml_edit::Item::Table(t) => walk_table(t, &path, offset, best),
            toml_edit::Item::ArrayOfTables(a) => {
                for (i, t) in a.iter().enumerate() {
                    let p = format!("{path}[{i}]");
                    consider(t.span(), offset, &p, best);
                    walk_table(t, &p, offset, best);
                }
            }
            toml_edit::Item::Value(v) => walk_value(v, &path, offset, best),
            toml_edit::Item::None => {}
        }
    }
}

pub(super) fn walk_value(
    value: &toml_edit::Value,
    path: &str,
    offset: usize,
    best: &mut Option<(usize, String)>,
) {
    match value {
        toml_edit::Value::Array(a) => {
            for (i, v) in a.iter().enumerate() {
                let p = format!("{path}[{i}]");
                consider(v.span(), offset, &p, best);
                walk_value(v, &p, offset, best);
            }
        }
        toml_edit::Value::InlineTable(t) => walk_table(t, path, offset, best),
        _ => {}
    }
}

/// `listen` as one address or a list of addresses.
pub(super) fn one_or_many_addrs<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Vec<SocketAddr>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Vec<SocketAddr>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an address \"IP:PORT\" or a list of them")
        }
        fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
            s.parse()
                .map(|a| vec![a])
                .map_err(|_| E::custom(format!("{s:?}: invalid socket address syntax")))
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(a) = seq.next_element::<SocketAddr>()? {
                out.push(a);
            }
            Ok(out)
        }
    }
    d.deserialize_any(V)
}
