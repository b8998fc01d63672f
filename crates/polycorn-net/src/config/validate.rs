//! The checks made after parsing: ranges, names, duplicates, files.

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::path::Path;

use crate::proxy_addr::ProxyAddr;

use super::common::*;
use super::error::*;
use super::parse::resolve;

/// A path name: `[A-Za-z0-9_.-]`, 1 to 32 bytes.
pub(super) fn path_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_PATH_NAME_BYTES {
        return Err(format!(
            "{name:?} must be 1 to {MAX_PATH_NAME_BYTES} characters"
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
    {
        return Err(format!(
            "{name:?} contains {c:?}; use letters, digits, '_', '.' and '-'"
        ));
    }
    Ok(())
}

/// A Linux interface name: 1 to 15 bytes, no '/', ':' or whitespace, not "." or "..".
pub(super) fn device_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 15 {
        return Err(format!("{name:?} is not an interface name (1 to 15 bytes)"));
    }
    if name == "."
        || name == ".."
        || name
            .chars()
            .any(|c| c == '/' || c == ':' || c.is_whitespace())
    {
        return Err(format!(
            "{name:?} is not an interface name (no '/', ':' or spaces)"
        ));
    }
    Ok(())
}

/// A configuration file kind: parsed, then checked (and its relative file names resolved)
/// against the directory it was read from.
pub(super) trait Checked: for<'de> serde::Deserialize<'de> {
    fn validate(&mut self, v: &mut Validator<'_>, base: &Path) -> Result<(), ConfigError>;
}

/// Parses and validates `text`; `origin` names it in errors.
pub(super) fn checked<T: Checked>(text: &str, origin: &str, base: &Path) -> Result<T, ConfigError> {
    let mut config: T = super::parse::parse(text, origin)?;
    config.validate(&mut Validator { origin }, base)?;
    Ok(config)
}

/// Reads and validates `path`; relative file names in it resolve against its directory.
pub(super) fn load<T: Checked>(path: &Path) -> Result<T, ConfigError> {
    let (text, base) = super::parse::read(path)?;
    checked(&text, &path.display().to_string(), &base)
}

/// One validation run over one file: builds errors naming the file.
pub(super) struct Validator<'a> {
    pub(super) origin: &'a str,
}

impl Validator<'_> {
    pub(super) fn invalid(
        &self,
        key: impl Into<String>,
        message: impl Into<String>,
    ) -> ConfigError {
        ConfigError::Invalid {
            origin: self.origin.to_owned(),
            key: key.into(),
            message: message.into(),
        }
    }

    pub(super) fn scheduler(&self, key: &str, spec: &str) -> Result<(), ConfigError> {
        polycorn_sched::Pipeline::from_spec(spec)
            .map(|_| ())
            .map_err(|e| self.invalid(key, e.to_string()))
    }

    /// An address to connect to: a real host and port.
    /// A relay's proxy: a literal address must be one to connect to; a host name needs the
    /// polycorn mode (the baselines take addresses, as their operators configure them).
    pub(super) fn proxy(
        &self,
        key: &str,
        proxy: &ProxyAddr,
        mode: RelayMode,
    ) -> Result<(), ConfigError> {
        match proxy {
            ProxyAddr::Ip(a) => self.remote(key, *a),
            ProxyAddr::Name { .. } if mode != RelayMode::Polycorn => Err(self.invalid(
                key,
                format!(
                    "{proxy}: mode {:?} needs an IP address (host names are resolved in \
                     mode \"polycorn\" only)",
                    format!("{mode:?}").to_lowercase()
                ),
            )),
            ProxyAddr::Name { .. } => Ok(()),
        }
    }

    pub(super) fn remote(&self, key: &str, addr: SocketAddr) -> Result<(), ConfigError> {
        if addr.ip().is_unspecified() || addr.ip().is_multicast() {
            return Err(self.invalid(key, format!("{addr} is not an address to connect to")));
        }
        if addr.port() == 0 {
            return Err(self.invalid(key, format!("{addr}: port must not be 0")));
        }
        Ok(())
    }

    pub(super) fn hold_time(&self, key: &str, seconds: u64) -> Result<(), ConfigError> {
        if seconds > MAX_HOLD_TIME_S {
            return Err(self.invalid(
                key,
                format!("{seconds} is out of range 0..={MAX_HOLD_TIME_S}"),
            ));
        }
        Ok(())
    }

    pub(super) fn idle_probe(&self, key: &str, seconds: u64) -> Result<(), ConfigError> {
        if seconds > MAX_IDLE_PROBE_S {
            return Err(self.invalid(
                key,
                format!(
                    "{seconds} is out of range 0..={MAX_IDLE_PROBE_S} (seconds between probes of \
                     an idle path; 0 probes every 0.2 s always)"
                ),
            ));
        }
        Ok(())
    }

    pub(super) fn window_gain(&self, key: &str, gain: f64) -> Result<(), ConfigError> {
        if gain != 0.0 && !WINDOW_GAIN.contains(&gain) {
            return Err(self.invalid(
                key,
                format!(
                    "{gain} is out of range {}..={} (times a path's recent rate and smallest \
                     RTT the scheduler lets it hold; 0 uses the kernel's window as it is)",
                    WINDOW_GAIN.start(),
                    WINDOW_GAIN.end()
                ),
            ));
        }
        Ok(())
    }

    pub(super) fn idle_probe_after(&self, key: &str, seconds: u64) -> Result<(), ConfigError> {
        if !IDLE_PROBE_AFTER_S.contains(&seconds) {
            return Err(self.invalid(
                key,
                format!(
                    "{seconds} is out of range {}..={} (seconds without a connection before \
                     probes slow down)",
                    IDLE_PROBE_AFTER_S.start(),
                    IDLE_PROBE_AFTER_S.end()
                ),
            ));
        }
        Ok(())
    }

    pub(super) fn drain(&self, key: &str, seconds: u64) -> Result<(), ConfigError> {
        if seconds > MAX_DRAIN_S {
            return Err(self.invalid(key, format!("{seconds} is out of range 0..={MAX_DRAIN_S}")));
        }
        Ok(())
    }

    pub(super) fn congestion(&self, key: &str, name: Option<&str>) -> Result<(), ConfigError> {
        let Some(name) = name else { return Ok(()) };
        let ok = !name.is_empty()
            && name.len() <= MAX_CONGESTION_NAME_BYTES
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !ok {
            return Err(self.invalid(
                key,
                format!(
                    "{name:?} is not a congestion control name (lowercase letters, digits, '_'; \
                     see /proc/sys/net/ipv4/tcp_available_congestion_control)"
                ),
            ));
        }
        Ok(())
    }

    pub(super) fn rto_max(&self, key: &str, ms: Option<u32>) -> Result<(), ConfigError> {
        let range = crate::sockopt::RTO_MAX_RANGE_MS;
        match ms {
            Some(ms) if !range.contains(&ms) => Err(self.invalid(
                key,
                format!(
                    "{ms} is out of range {}..={} (the kernel's limits for TCP_RTO_MAX_MS)",
                    range.start(),
                    range.end()
                ),
            )),
            _ => Ok(()),
        }
    }

    /// TCP listeners must not share an address (and none may use port 0, which would bind a
    /// random port nobody can be told about).
    pub(super) fn distinct_listeners(
        &self,
        list: &[(&str, Option<SocketAddr>)],
    ) -> Result<(), ConfigError> {
        let mut seen: BTreeMap<SocketAddr, &str> = BTreeMap::new();
        for (key, addr) in list {
            let Some(addr) = addr else { continue };
            if addr.port() == 0 {
                return Err(self.invalid(*key, format!("{addr}: port must not be 0")));
            }
            if let Some(other) = seen.insert(*addr, key) {
                return Err(self.invalid(*key, format!("{addr} is already used by {other}")));
            }
        }
        Ok(())
    }

    /// A directory the daemon may create files in: it is one, or it does not exist yet and
    /// its nearest existing ancestor is a directory (the daemon creates the rest at start).
    pub(super) fn keep_days(&self, days: Option<u32>, recording: bool) -> Result<(), ConfigError> {
        let key = "context.keep_days";
        match days {
            None => Ok(()),
            Some(_) if !recording => Err(self.invalid(
                key,
                "nothing to keep without context.record (the directory of the logs)",
            )),
            Some(d) if !(1..=MAX_KEEP_DAYS).contains(&d) => Err(self.invalid(
                key,
                format!(
                    "{d}: 1 to {MAX_KEEP_DAYS} finished days (1 keeps yesterday's log for the \
                     nightly import; leave it out to keep every log)"
                ),
            )),
            Some(_) => Ok(()),
        }
    }

    pub(super) fn record_dir(&self, key: &str, dir: &Path) -> Result<(), ConfigError> {
        for a in dir.ancestors().filter(|a| !a.as_os_str().is_empty()) {
            match std::fs::metadata(a) {
                Ok(m) if m.is_dir() => return Ok(()),
                Ok(_) => return Err(self.invalid(key, format!("{}: not a directory", a.display()))),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
                    ) =>
                {
                    continue
                }
                Err(e) => return Err(self.invalid(key, format!("{}: {e}", a.display()))),
            }
        }
        Ok(())
    }

    pub(super) fn existing_file(&self, key: &str, file: &Path) -> Result<(), ConfigError> {
        match std::fs::metadata(file) {
            Ok(m) if m.is_file() => Ok(()),
            Ok(_) => Err(self.invalid(key, format!("{}: not a regular file", file.display()))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                Err(self.invalid(key, format!("{}: file not found", file.display())))
            }
            Err(e) => Err(self.invalid(key, format!("{}: {e}", file.display()))),
        }
    }

    pub(super) fn tls_files(&self, tls: &mut TlsFiles, base: &Path) -> Result<(), ConfigError> {
        for (key, file) in [
            ("tls.ca", &mut tls.ca),
            ("tls.cert", &mut tls.cert),
            ("tls.key", &mut tls.key),
        ] {
            *file = resolve(base, file);
            self.existing_file(key, file)?;
        }
        Ok(())
    }

    pub(super) fn linkdb(&self, l: &LinkDbConfig) -> Result<(), ConfigError> {
        if let Some(db) = &l.db {
            if db.trim().is_empty() {
                return Err(
                    self.invalid("linkdb.db", "empty; remove the key to run without LinkDB")
                );
            }
            if !["paper", "risk", "loctable"].contains(&l.model.as_str()) {
                return Err(self.invalid(
                    "linkdb.model",
                    format!(
                        "unknown model `{}`: expected paper, risk or loctable",
                        l.model
                    ),
                ));
            }
            match l.track_origin {
                Some([lat, lon])
                    if (-90.0..=90.0).contains(&lat) && (-180.0..=180.0).contains(&lon) => {}
                Some(_) => {
                    return Err(self.invalid("linkdb.track_origin", "must be [lat, lon] in degrees"))
                }
                None => {
                    return Err(self.invalid(
                        "linkdb.track_origin",
                        "required with linkdb.db: [lat, lon] of position 0 of the line",
                    ))
                }
            }
            if !l.track_heading_deg.is_finite() {
                return Err(self.invalid("linkdb.track_heading_deg", "must be a number of degrees"));
            }
            if l.carriers.is_empty() || l.carriers.len() > 32 {
                return Err(self.invalid(
                    "linkdb.carriers",
                    "1 to 32 carrier names, one per path index",
                ));
            }
        }
        match l.keep_days {
            None => Ok(()),
            Some(_) if l.db.is_none() => {
                Err(self.invalid("linkdb.keep_days", "nothing to prune without linkdb.db"))
            }
            Some(d) if !(1..=MAX_KEEP_DAYS).contains(&d) => Err(self.invalid(
                "linkdb.keep_days",
                format!("{d}: 1 to {MAX_KEEP_DAYS} days; leave it out to keep every ride"),
            )),
            Some(_) => Ok(()),
        }
    }

    pub(super) fn limits(&self, l: &Limits) -> Result<(), ConfigError> {
        for (key, value) in [
            ("limits.flow_window_bytes", l.flow_window_bytes),
            ("limits.user_window_bytes", l.user_window_bytes),
        ] {
            if value == 0 || value > MAX_WINDOW_BYTES {
                return Err(self.invalid(
                    key,
                    format!("{value} is out of range 1..={MAX_WINDOW_BYTES}"),
                ));
            }
        }
        if l.user_window_bytes < l.flow_window_bytes {
            return Err(self.invalid(
                "limits.user_window_bytes",
                format!(
                    "{} is smaller than limits.flow_window_bytes ({}); a passenger's cap must \
                     hold at least one flow's window",
                    l.user_window_bytes, l.flow_window_bytes
                ),
            ));
        }
        if l.max_flows == 0 || l.max_flows > MAX_FLOWS {
            return Err(self.invalid(
                "limits.max_flows",
                format!("{} is out of range 1..={MAX_FLOWS}", l.max_flows),
            ));
        }
        if !(64 << 20..=64 << 30).contains(&l.session_buffer_bytes) {
            return Err(self.invalid(
                "limits.session_buffer_bytes",
                format!(
                    "{} is out of range {}..={} (64 MiB to 64 GiB)",
                    l.session_buffer_bytes,
                    64u64 << 20,
                    64u64 << 30
                ),
            ));
        }
        if l.passenger_max_flows > MAX_FLOWS {
            return Err(self.invalid(
                "limits.passenger_max_flows",
                format!(
                    "{} is out of range 0..={MAX_FLOWS} (0: no limit)",
                    l.passenger_max_flows
                ),
            ));
        }
        if l.passenger_flow_rate > 0 && l.passenger_flow_burst == 0 {
            return Err(self.invalid(
                "limits.passenger_flow_burst",
                "0 with a passenger_flow_rate would refuse every connection; at least 1",
            ));
        }
        Ok(())
    }

    pub(super) fn log(&self, log: &LogConfig) -> Result<(), ConfigError> {
        const LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];
        let bad = |what: &str| {
            self.invalid(
                "log.level",
                format!(
                    "{:?}: {what}; expected a level ({}) or `target=level` directives \
                     separated by commas",
                    log.level,
                    LEVELS.join(", ")
                ),
            )
        };
        if log.level.trim().is_empty() {
            return Err(bad("empty"));
        }
        for directive in log.level.split(',') {
            let directive = directive.trim();
            let (target, level) = match directive.split_once('=') {
                Some((t, l)) => (Some(t.trim()), l.trim()),
                None => (None, directive),
            };
            if let Some(t) = target {
                if t.is_empty()
                    || !t
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':' || c == '-')
                {
                    return Err(bad(&format!("bad target {t:?}")));
                }
            }
            if !LEVELS.contains(&level.to_ascii_lowercase().as_str()) {
                return Err(bad(&format!("unknown level {level:?}")));
            }
        }
        Ok(())
    }
}
