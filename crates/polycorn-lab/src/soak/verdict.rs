//! The soak's verdicts: set-up times and memory under attack, protocol violations in the logs, the final judgement.

use super::*;

/// The passengers' connection set-up times (to the first byte) before the attacks and under
/// them (from 5 s after they started): one line, and a problem when the median or the p90
/// under attack is more than twice the baseline's.
pub(super) fn setup_under_attack(
    setup: &[(f64, u64)],
    attack_at: f64,
    load_secs: f64,
) -> (String, Option<String>) {
    let window = |from: f64, to: f64| {
        let mut v: Vec<u64> = setup
            .iter()
            .filter(|(t, _)| *t >= from && *t < to)
            .map(|(_, us)| *us)
            .collect();
        v.sort_unstable();
        v
    };
    let (base, hit) = (window(0.0, attack_at), window(attack_at + 5.0, load_secs));
    // `percentile` turns µs into ms.
    let ms = |v: &[u64], q: f64| percentile(v, q);
    let line = format!(
        "connection set-up (to the first byte): before the attacks p50 {:.1} ms, p90 {:.1} ms \
         ({} connections); under them p50 {:.1} ms, p90 {:.1} ms ({} connections)",
        ms(&base, 0.5),
        ms(&base, 0.9),
        base.len(),
        ms(&hit, 0.5),
        ms(&hit, 0.9),
        hit.len()
    );
    let problem = if base.is_empty() || hit.is_empty() {
        Some("too few connections before or under the attacks to compare set-up times".into())
    } else {
        [("p50", 0.5), ("p90", 0.9)]
            .into_iter()
            .find(|&(_, q)| ms(&hit, q) > 2.0 * ms(&base, q))
            .map(|(name, q)| {
                format!(
                    "connection set-up {name} under attack {:.1} ms, more than twice the \
                     baseline's {:.1} ms",
                    ms(&hit, q),
                    ms(&base, q)
                )
            })
    };
    (line, problem)
}

/// Each end's resident memory through the attacks: the peak of their second half against
/// the first's. A problem when it grew by more than a quarter plus 16 MiB (a leak, or a
/// buffer without a bound, grows with the attack's length; an allocator keeping its peak
/// does not).
pub(super) fn memory_under_attack(
    memory: &[(f64, f64, f64)],
    attack_at: f64,
) -> (String, Option<String>) {
    let under: Vec<_> = memory.iter().filter(|m| m.0 >= attack_at).collect();
    let (first, second) = under.split_at(under.len() / 2);
    let peak = |v: &[&(f64, f64, f64)], relay: bool| {
        v.iter()
            .map(|m| if relay { m.1 } else { m.2 })
            .fold(0.0, f64::max)
    };
    let mut line = String::from("memory under attack (peak of its first half → second half):");
    let mut problem = None;
    for (who, relay) in [("relay", true), ("proxy", false)] {
        let (a, b) = (peak(first, relay), peak(second, relay));
        line += &format!(" {who} {a:.1} → {b:.1} MiB;");
        if !first.is_empty() && b > a * 1.25 + 16.0 {
            problem = Some(format!(
                "{who}'s memory kept growing under attack: {a:.1} MiB, then {b:.1} MiB"
            ));
        }
    }
    (line, problem)
}

/// Relay and proxy speak only to each other here, so a protocol violation in `who`'s log
/// (a subflow torn down for a frame the session refused) is a bug, even when reinjection
/// hid it from the passengers: one problem naming how many and the first.
pub(super) fn protocol_violations(who: &str, log: &std::path::Path) -> Result<Option<String>> {
    let text = std::fs::read_to_string(log)
        .with_context(|| format!("read {who} log {}", log.display()))?;
    let mut hits = text.lines().filter(|l| l.contains("protocol violation"));
    Ok(hits.next().map(|first| {
        format!(
            "{who} logged {} protocol violation(s) between relay and proxy (first: {})",
            1 + hits.count(),
            first.trim()
        )
    }))
}

/// What went wrong in a soak: failed connections or pings (`errors`: per kind, count and the
/// first message), and per daemon (`name`, reading before the load, reading after it settled,
/// passenger connections it counted over all its runs) a count of connections other than the
/// clients' (more than the clients' when `restarted`: a killed run's last flows go uncounted),
/// flows left open, or more descriptors.
pub(super) fn judge(
    started: u64,
    failed: u64,
    ping_failures: u64,
    errors: &[String],
    daemons: &[(&str, Reading, Reading, f64)],
    restarted: bool,
) -> Vec<String> {
    let mut problems = Vec::new();
    if failed + ping_failures > 0 {
        problems.push(format!(
            "{failed} of {started} connections and {ping_failures} pings failed — {}",
            errors.join("; ")
        ));
    }
    for &(who, before, after, opened) in daemons {
        if restarted && opened.is_finite() && opened <= started as f64 {
            // What a killed run counted after its last reading is lost with it.
        } else if opened != started as f64 {
            problems.push(format!(
                "{who} counted {opened:.0} passenger connections, the clients opened {started}"
            ));
        }
        if after.flows_open != 0.0 {
            problems.push(format!(
                "{who} still had {:.0} flows open {} s after every connection closed",
                after.flows_open,
                SETTLE.as_secs()
            ));
        }
        if after.fds > before.fds + FD_SLACK {
            problems.push(format!(
                "{who} holds {} file descriptors after the load, {} before",
                after.fds, before.fds
            ));
        }
    }
    problems
}
