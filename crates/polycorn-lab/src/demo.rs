//! `polycorn demo`: scripted, deterministic scenarios that show each HRSCH stage deciding next
//! to the baseline it improves on, with every path move explained.
//!
//! The scenarios drive `polycorn-sched` directly with hand-set path states (the same calls the
//! relay and proxy make from `TCP_INFO`): they explain decisions, they do not measure networks.
//! Delivery times printed are the scheduler's own estimate `owd + queued / bandwidth` (the
//! quantity TPR reasons with), not measurements.

use std::fmt::Write as _;

use anyhow::Result;
use polycorn_sched::{
    Bandwidth, Decision, Duration, FixedPredictions, FlowId, Instant, PathId, SchedConfig,
    Scheduler, TcpInfoSample, UserId,
};

/// Names of the built-in scenarios, in run order.
pub const SCENARIOS: &[(&str, &str)] = &[
    (
        "tail",
        "TPR (POLYCORN §4.4, Appendix A): tail chunks wait for the fast path",
    ),
    (
        "handover",
        "HPR (§4.3): a predicted handover failure takes the path out beforehand",
    ),
    (
        "blackout",
        "ER (§4.5): one chunk per RTO as MPTCP, then at the 3rd RTO all of a path's chunks move",
    ),
    (
        "idle",
        "ORI (§4.6): an idle path gets redundant copies of the next 16 chunks",
    ),
];

const A: usize = 0;
const B: usize = 1;

fn pid(i: usize) -> PathId {
    PathId::new(i).expect("demo uses paths 0 and 1")
}

/// One path's state as TCP_INFO would report it.
#[derive(Clone, Copy)]
struct PathSpec {
    srtt_ms: u64,
    rttvar_ms: u64,
    cwnd_pkts: u64,
    unacked_pkts: u64,
    mbit: u64,
}

fn sample(p: PathSpec) -> TcpInfoSample {
    TcpInfoSample {
        srtt: Duration::from_millis(p.srtt_ms),
        rttvar: Duration::from_millis(p.rttvar_ms),
        min_rtt: None,
        cwnd_bytes: p.cwnd_pkts * 1448,
        mss_bytes: 1448,
        unacked_bytes: p.unacked_pkts * 1448,
        notsent_bytes: 0,
        delivery_rate: Bandwidth::from_mbit_per_sec(p.mbit),
        rto_backoff: 0,
        bytes_acked: 0,
        unacked_age: Duration::ZERO,
    }
}

struct Run {
    sched: Scheduler,
    predictor: FixedPredictions,
    now: Instant,
    out: String,
}

impl Run {
    fn new(spec: &str, paths: &[PathSpec]) -> Result<Self> {
        let mut sched = Scheduler::from_spec(SchedConfig::default(), spec)?;
        let now = Instant::ZERO;
        for (i, p) in paths.iter().enumerate() {
            sched.add_path(now, pid(i))?;
            sched.on_tcp_info(now, pid(i), &sample(*p))?;
        }
        Ok(Run {
            sched,
            predictor: FixedPredictions::new(),
            now,
            out: String::new(),
        })
    }

    fn line(&mut self, s: impl AsRef<str>) {
        self.out.push_str("    ");
        self.out.push_str(s.as_ref());
        self.out.push('\n');
    }

    /// Delivery estimate of a chunk just queued on `path` (TPR's T⁻ after the chunk).
    fn eta(&self, path: PathId) -> Duration {
        let p = self.sched.path(path).expect("configured");
        p.owd + p.effective_bandwidth().time_to_send(p.queued_bytes())
    }

    /// Poll until the scheduler has nothing to send now; print each decision.
    fn drain(&mut self) -> Vec<(Decision, Instant)> {
        let mut ds = Vec::new();
        while let Some(d) = self.sched.poll_decision(self.now, &self.predictor) {
            let eta = d
                .paths
                .iter()
                .map(|p| self.eta(p))
                .min()
                .unwrap_or(Duration::MAX);
            let mut why = String::new();
            for m in self.sched.trace().moves() {
                let _ = write!(
                    why,
                    " [{}: {} {}->{} {}]",
                    m.stage, m.path, m.from, m.to, m.reason
                );
            }
            let fin = if d.fin { "+FIN" } else { "" };
            let kind = if d.reinjection { " reinjected" } else { "" };
            self.line(format!(
                "{} {} [{}..{}){fin}{kind} on paths {} (est. delivered +{eta}){why}",
                self.now,
                d.flow,
                d.offset,
                d.offset + u64::from(d.len),
                d.paths
            ));
            ds.push((d, self.now + eta));
        }
        let waits: Vec<String> = self
            .sched
            .trace()
            .moves()
            .iter()
            .map(|m| {
                format!(
                    "[{}: {} {}->{} {}]",
                    m.stage, m.path, m.from, m.to, m.reason
                )
            })
            .collect();
        if self.sched.has_backlog() {
            self.line(format!("{} waits: {}", self.now, waits.join(" ")));
        }
        ds
    }
}

fn header(out: &mut String, name: &str) {
    let what = SCENARIOS
        .iter()
        .find(|(n, _)| *n == name)
        .map_or("", |(_, w)| w);
    let _ = writeln!(out, "\n== {name}: {what}");
}

/// Appendix A: A fast but its window full, B slow and empty; a flow in its tail.
fn tail() -> Result<String> {
    let mut out = String::new();
    header(&mut out, "tail");
    let fast_full = PathSpec {
        srtt_ms: 50,
        rttvar_ms: 5,
        cwnd_pkts: 20,
        unacked_pkts: 20,
        mbit: 20,
    };
    let slow_empty = PathSpec {
        srtt_ms: 400,
        rttvar_ms: 100,
        cwnd_pkts: 20,
        unacked_pkts: 0,
        mbit: 2,
    };
    let _ = writeln!(out, "  path0: 50 ms, 20 Mbit/s, window full; path1: 400 ms, 2 Mbit/s, idle. Flow 1: 4200 B then FIN.");
    let mut last = Vec::new();
    for spec in ["vanilla", "hrsch"] {
        let mut r = Run::new(spec, &[fast_full, slow_empty])?;
        let _ = writeln!(r.out, "  -- {spec} ({})", r.sched.pipeline().spec());
        r.sched.open_flow(r.now, FlowId(1), UserId(1))?;
        r.sched.on_flow_data(r.now, FlowId(1), 4200)?;
        r.sched.on_flow_fin(r.now, FlowId(1))?;
        let mut done = r.drain();
        if r.sched.has_backlog() {
            // Path 0 drains its full window (20 × 1448 B at 20 Mbit/s ≈ 11.6 ms) and reports it.
            r.now += Bandwidth::from_mbit_per_sec(20).time_to_send(20 * 1448);
            r.sched.on_tcp_info(
                r.now,
                pid(A),
                &sample(PathSpec {
                    unacked_pkts: 0,
                    ..fast_full
                }),
            )?;
            done.extend(r.drain());
        }
        if let Some(t) = done.iter().map(|(_, eta)| *eta).max() {
            r.line(format!("last byte estimated at {t}"));
            last.push((spec, t));
        }
        out.push_str(&r.out);
    }
    if let [(_, v), (_, h)] = last[..] {
        let _ = writeln!(out, "  => tail completes ~{} earlier with TPR", v - h);
    }
    Ok(out)
}

/// HPR: path 0 will fail its next handover in 250 ms; the train runs at 300 km/h.
fn handover() -> Result<String> {
    let mut out = String::new();
    header(&mut out, "handover");
    let a = PathSpec {
        srtt_ms: 100,
        rttvar_ms: 10,
        cwnd_pkts: 40,
        unacked_pkts: 0,
        mbit: 20,
    };
    let b = PathSpec {
        srtt_ms: 200,
        rttvar_ms: 20,
        cwnd_pkts: 40,
        unacked_pkts: 0,
        mbit: 10,
    };
    let _ = writeln!(out, "  path0: 100 ms; path1: 200 ms; 83.3 m/s; LinkDB predicts path0's handover fails at t=0.25 s.");
    for spec in ["vanilla", "hrsch"] {
        let mut r = Run::new(spec, &[a, b])?;
        let _ = writeln!(r.out, "  -- {spec} ({})", r.sched.pipeline().spec());
        r.sched.on_train_speed(r.now, 83.3);
        r.predictor
            .set_failure(pid(A), Some(Instant::from_millis(250)));
        r.sched.open_flow(r.now, FlowId(1), UserId(1))?;
        r.sched.on_flow_data(r.now, FlowId(1), 2800)?;
        let ds = r.drain();
        let on_a = ds.iter().filter(|(d, _)| d.paths.contains(pid(A))).count();
        r.line(format!(
            "chunks placed on path0 before its blackout: {on_a} of {}",
            ds.len()
        ));
        // The relay reports the new cell at t = 3 s: no failure predicted any more.
        r.now = Instant::from_millis(3000);
        r.predictor.set_failure(pid(A), None);
        r.sched.on_tcp_info(r.now, pid(A), &sample(a))?;
        r.sched.on_tcp_info(r.now, pid(B), &sample(b))?;
        r.sched.on_flow_data(r.now, FlowId(1), 1400)?;
        r.drain();
        out.push_str(&r.out);
    }
    Ok(out)
}

/// ER: path 0 goes dark with 10 chunks in flight and times out three times.
fn blackout() -> Result<String> {
    let mut out = String::new();
    header(&mut out, "blackout");
    let a = PathSpec {
        srtt_ms: 60,
        rttvar_ms: 10,
        cwnd_pkts: 10,
        unacked_pkts: 0,
        mbit: 20,
    };
    let b = PathSpec {
        srtt_ms: 150,
        rttvar_ms: 20,
        cwnd_pkts: 40,
        unacked_pkts: 0,
        mbit: 10,
    };
    let _ = writeln!(
        out,
        "  path0 carries 10 chunks, then blacks out and reaches RTO 1, 2, 3; path1 is healthy."
    );
    for spec in ["vanilla", "hrsch", "hpr,minrtt,tpr,ori+er(k=3,oldest=0)"] {
        let mut r = Run::new(spec, &[a, b])?;
        let _ = writeln!(r.out, "  -- {spec} ({})", r.sched.pipeline().spec());
        r.sched.open_flow(r.now, FlowId(1), UserId(1))?;
        r.sched.on_flow_data(r.now, FlowId(1), 10 * 1400)?;
        // Place 10 chunks on path 0 (path 1 kept full meanwhile so minRTT uses path 0 only).
        r.sched.on_tcp_info(
            r.now,
            pid(B),
            &sample(PathSpec {
                unacked_pkts: 40,
                ..b
            }),
        )?;
        let placed = {
            let saved = std::mem::take(&mut r.out);
            let n = r.drain().len();
            r.out = saved;
            n
        };
        r.line(format!("{placed} chunks in flight on path0"));
        r.sched.on_tcp_info(r.now, pid(B), &sample(b))?;
        for k in 1..=3u64 {
            r.now = Instant::from_millis(200 * (1 << k));
            r.sched.on_rto(r.now, pid(A))?;
            let pending = r.sched.flow_pending_reinjection(FlowId(1)).unwrap_or(0);
            r.line(format!(
                "{} RTO #{k} on path0: {pending} B queued for reinjection",
                r.now
            ));
            r.drain();
        }
        let _ = writeln!(
            r.out,
            "    reinjected in total: {} B",
            r.sched.stats().reinjected_bytes
        );
        out.push_str(&r.out);
    }
    Ok(out)
}

/// ORI: path 1 has not been used; the next chunks are duplicated onto it.
fn idle() -> Result<String> {
    let mut out = String::new();
    header(&mut out, "idle");
    let a = PathSpec {
        srtt_ms: 50,
        rttvar_ms: 5,
        cwnd_pkts: 100,
        unacked_pkts: 0,
        mbit: 50,
    };
    let b = PathSpec {
        srtt_ms: 300,
        rttvar_ms: 50,
        cwnd_pkts: 100,
        unacked_pkts: 0,
        mbit: 5,
    };
    let _ = writeln!(
        out,
        "  path0: 50 ms; path1: 300 ms, idle. 20 chunks to send."
    );
    for spec in ["vanilla", "hrsch"] {
        let mut r = Run::new(spec, &[a, b])?;
        let _ = writeln!(r.out, "  -- {spec} ({})", r.sched.pipeline().spec());
        r.sched.open_flow(r.now, FlowId(1), UserId(1))?;
        r.sched.on_flow_data(r.now, FlowId(1), 20 * 1400)?;
        let saved = std::mem::take(&mut r.out);
        let ds = r.drain();
        r.out = saved;
        let copies = ds.iter().filter(|(d, _)| d.paths.len() > 1).count();
        r.line(format!(
            "{} chunks sent, {copies} of them also copied onto path1",
            ds.len()
        ));
        out.push_str(&r.out);
    }
    Ok(out)
}

/// Run the named scenarios (all when empty) and return the report.
pub fn run(names: &[String]) -> Result<String> {
    let mut out = String::from(
        "polycorn demo: the scheduler deciding in scripted situations (decisions and their reasons;\n\
         delivery times are the scheduler's estimates, not measurements)\n",
    );
    let wanted: Vec<&str> = if names.is_empty() {
        SCENARIOS.iter().map(|(n, _)| *n).collect()
    } else {
        names.iter().map(String::as_str).collect()
    };
    for name in wanted {
        let part = match name {
            "tail" => tail()?,
            "handover" => handover()?,
            "blackout" => blackout()?,
            "idle" => idle()?,
            other => anyhow::bail!(
                "unknown scenario `{other}`; valid: {}",
                SCENARIOS
                    .iter()
                    .map(|(n, _)| *n)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        out.push_str(&part);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scenario_runs_and_shows_its_stage() {
        let out = run(&[]).unwrap();
        assert!(out.contains("tpr: path1 S->C"), "{out}");
        assert!(
            out.contains("hpr") || out.contains("chunks placed on path0 before its blackout: 0"),
            "{out}"
        );
        assert!(out.contains("RTO #3"), "{out}");
        assert!(out.contains("also copied onto path1"), "{out}");
    }

    #[test]
    fn unknown_scenario_is_an_error_listing_valid_ones() {
        let e = run(&["nope".into()]).unwrap_err().to_string();
        assert!(e.contains("tail") && e.contains("idle"), "{e}");
    }
}
