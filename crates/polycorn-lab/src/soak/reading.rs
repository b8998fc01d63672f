//! Reading a daemon: memory, descriptors and threads from /proc, counters from its metrics; the progress row.

use super::*;

/// Resident memory, descriptors and threads of `pid` from /proc; flows from its metrics.
pub(super) fn read_daemon(pid: u32, ns: &str) -> Result<Reading> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("read /proc/{pid}/status (did the daemon exit?)"))?;
    let field = |name: &str| -> f64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .with_context(|| format!("list /proc/{pid}/fd"))?
        .count();
    let samples = polycorn_net::scrape::parse_samples(&crate::harness::scrape_metrics(ns)?)
        .with_context(|| format!("metrics of the daemon in {ns}"))?;
    let named = |name: &'static str| samples.iter().filter(move |x| x.name == name);
    // NaN when the daemon did not report it, so it never passes for a match.
    let metric = |name| named(name).next().map_or(f64::NAN, |x| x.value);
    Ok(Reading {
        rss_mib: field("VmRSS:") / 1024.0,
        fds,
        threads: field("Threads:") as usize,
        flows_open: metric("polycorn_flows_open"),
        flows_total: metric("polycorn_flows_total"),
        reconnects: named("polycorn_path_reconnects_total")
            .map(|x| x.value)
            .sum(),
        loss_delay: {
            let mut counts = [0.0; LOSS_BUCKETS];
            for x in named("polycorn_cell_loss_report_delay_seconds_bucket") {
                let le = match x.label("le") {
                    Some("+Inf") => f64::INFINITY,
                    Some(v) => v.parse().unwrap_or(f64::NAN),
                    None => f64::NAN,
                };
                // One series per relay: summed.
                if let Some(i) = (0..LOSS_BUCKETS).find(|&i| loss_bucket_le(i) == le) {
                    counts[i] += x.value;
                }
            }
            (
                counts,
                named("polycorn_cell_loss_report_delay_seconds_sum")
                    .map(|x| x.value)
                    .sum(),
            )
        },
    })
}

/// The `q`-quantile of durations in µs, in ms ([`polycorn_link::trip::quantile`]'s nearest rank; NaN when empty).
pub(super) fn percentile(us: &[u64], q: f64) -> f64 {
    let mut ms: Vec<f64> = us.iter().map(|&u| u as f64 / 1000.0).collect();
    polycorn_link::trip::quantile(&mut ms, q)
}

pub(super) fn row(t: f64, counts: &Counts, relay: &Reading, proxy: &Reading) {
    println!(
        "{t:>6.0} {:>8} {:>6} {:>8.1} {:>5} {:>6} {:>8.1} {:>5} {:>6}",
        counts.done.load(Ordering::Relaxed),
        counts.failed.load(Ordering::Relaxed) + counts.ping_failures.load(Ordering::Relaxed),
        relay.rss_mib,
        relay.fds,
        relay.flows_open,
        proxy.rss_mib,
        proxy.fds,
        proxy.flows_open,
    );
}

/// One reading of a daemon.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Reading {
    /// Resident memory, MiB.
    pub rss_mib: f64,
    /// Open file descriptors.
    pub fds: usize,
    /// Threads.
    pub threads: usize,
    /// `polycorn_flows_open`.
    pub flows_open: f64,
    /// `polycorn_flows_total`.
    pub flows_total: f64,
    /// `polycorn_path_reconnects_total`, summed over paths.
    pub reconnects: f64,
    /// `polycorn_cell_loss_report_delay_seconds`: cumulative counts of the buckets
    /// ([`polycorn_net::metrics::CELL_LOSS_DELAY_BUCKETS`], then `+Inf`), and the sum.
    pub loss_delay: ([f64; LOSS_BUCKETS], f64),
}

/// `polycorn_cell_loss_report_delay_seconds`' buckets with `+Inf`.
pub(super) const LOSS_BUCKETS: usize = polycorn_net::metrics::CELL_LOSS_DELAY_BUCKETS.len() + 1;

/// The upper bound of bucket `i` of [`Reading::loss_delay`].
pub(super) fn loss_bucket_le(i: usize) -> f64 {
    polycorn_net::metrics::CELL_LOSS_DELAY_BUCKETS
        .get(i)
        .copied()
        .unwrap_or(f64::INFINITY)
}

/// What `polycorn_cell_loss_report_delay_seconds` says, in a line; `None` without a loss.
pub(super) fn loss_delay_summary(counts: &[f64; LOSS_BUCKETS], sum: f64) -> Option<String> {
    let buckets: Vec<(f64, f64)> = counts
        .iter()
        .enumerate()
        .map(|(i, c)| (loss_bucket_le(i), *c))
        .collect();
    let n = buckets.last().map(|b| b.1).filter(|n| *n > 0.0)?;
    let within = |q: f64| {
        buckets
            .iter()
            .find(|b| b.1 >= q * n)
            .map_or(f64::INFINITY, |b| b.0)
    };
    let one = buckets.iter().find(|b| b.0 >= 1.0).map_or(n, |b| b.1);
    Some(format!(
        "{n:.0} cell losses reported by the modem monitor, each path silent by then for {:.2} s on average (median at most {} s, p90 at most {} s; {:.0}% within 1 s)",
        sum / n,
        within(0.5),
        within(0.9),
        100.0 * one / n
    ))
}
