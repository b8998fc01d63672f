//! Failed connections, and which of them a restart of relay or proxy excuses.

use super::*;

/// A connection or idle connection that failed: seconds since the load started when it was
/// opened and when it failed, what failed and how.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Failure {
    pub(super) start: f64,
    pub(super) end: f64,
    pub(super) kind: &'static str,
    pub(super) msg: String,
}

/// Kinds of failure no restart excuses: data that arrived wrong, connections left hanging (a
/// cut connection must be told at once), and an orderly close in the middle of the data, which
/// a passenger cannot tell from the end of a complete answer (a cut connection must be reset,
/// also when the relay crashed: it closes its flows' sockets abortively unless they ended in
/// order).
pub(super) const NEVER_EXCUSED: [&str; 9] = [
    "wrong byte",
    "extra bytes",
    "wrong ping",
    "upload hung",
    "download hung",
    "close hung",
    "ping hung",
    "short download",
    "ping closed",
];

/// One restart of relay or proxy during the load, seconds since the load started.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Restart {
    pub(super) who: &'static str,
    pub(super) killed: bool,
    /// The signal.
    pub(super) at: f64,
    /// The restarted daemon running with every path up again.
    pub(super) back: Option<f64>,
    /// The first connection opened after the signal that completed.
    pub(super) first_ok: Option<f64>,
    /// The relay's listener was held across the restart (`--hold-listeners`).
    pub(super) held: bool,
}

/// With the relay's listener held, how long after the signal a connection may still have been
/// accepted by the relay that was stopping, seconds (its listener closes when the signal is
/// handled).
pub(super) const HELD_SLACK: f64 = 0.1;

impl Restart {
    /// Whether `f` is what this restart may do to a connection: one open during the restart
    /// (or opened up to [`RESTART_GRACE`] after it was over) that failed as a cut connection
    /// should.
    ///
    /// With the relay's listener held, only connections open at the signal may be cut: later
    /// ones wait in the backlog for the next relay.
    pub(super) fn excuses(&self, f: &Failure) -> bool {
        let until = if self.held {
            self.at + HELD_SLACK
        } else {
            self.back.unwrap_or(f64::INFINITY) + RESTART_GRACE
        };
        !NEVER_EXCUSED.contains(&f.kind) && f.start <= until && f.end >= self.at
    }
}

/// The failures no restart excuses, and per restart those it excused (a failure goes to the
/// last restart that excuses it).
pub(super) fn sort_failures(
    failures: &[Failure],
    restarts: &[Restart],
) -> (Vec<Failure>, Vec<Vec<Failure>>) {
    let mut cut = vec![Vec::new(); restarts.len()];
    let mut left = Vec::new();
    for f in failures {
        match restarts.iter().rposition(|r| r.excuses(f)) {
            Some(i) => cut[i].push(f.clone()),
            None => left.push(f.clone()),
        }
    }
    (left, cut)
}

/// Per kind, the count and the first message of `failures`.
pub(super) fn error_kinds(failures: &[Failure]) -> Vec<String> {
    let mut kinds: BTreeMap<&str, (u64, &str)> = BTreeMap::new();
    for f in failures {
        kinds.entry(f.kind).or_insert((0, &f.msg)).0 += 1;
    }
    kinds
        .iter()
        .map(|(k, (n, first))| format!("{k}: {n} (first: {first})"))
        .collect()
}
