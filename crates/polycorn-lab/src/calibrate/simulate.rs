//! `--sim`: the same run on the simulator's TCP model, recorded as the testbed's run is (goodput
//! bins, `ss`-like sender samples, `nstat`-like counters), so one set of statistics serves
//! both.

use super::*;
use polycorn_sim::bulk::{self, BulkConfig, BulkPath};
use polycorn_sim::tcp::{CongestionControl, TcpConfig};

/// The column name of congestion control `cc` measured on the simulator.
pub(super) fn sim_column(cc: &str) -> String {
    format!("sim-{cc}")
}

/// The simulator's congestion control named `cc`.
pub(super) fn sim_cc(cc: &str) -> Result<CongestionControl> {
    CongestionControl::from_name(cc).with_context(|| {
        format!(
            "--sim: congestion control `{cc}` is not simulated ({})",
            CongestionControl::NAMES
        )
    })
}

/// One download per carrier of `trip` for `run_ms` on the simulator with `cc`, every sender
/// sampled each `--sample-ms`. The senders start at once (no connection set-up); the
/// warm-up mask treats them as the testbed's.
pub(super) fn simulate(
    args: &CalibrateArgs,
    trip: &Trip,
    seed: u64,
    cc: &str,
    run_ms: u64,
) -> Result<RawRun> {
    let links = polycorn_link::trip_links::from_trip(trip, args.queue_bytes.map(QueueLimit::Bytes))
        .context("the trip's links")?;
    let cfg = BulkConfig {
        tcp: TcpConfig {
            cc: sim_cc(cc)?,
            seed,
            ..TcpConfig::default()
        },
        run_us: run_ms * 1000,
        sample_us: args.sample_ms * 1000,
        bin_us: BIN_MS * 1000,
    };
    let paths = bulk::run(&links, &cfg).context("simulated downloads")?;
    Ok(raw_run(&sim_column(cc), cc, &paths))
}

/// What the testbed would have recorded of `paths`, in its form.
pub(super) fn raw_run(column: &str, cc: &str, paths: &[BulkPath]) -> RawRun {
    let samples = paths.iter().map(|p| p.samples.len()).min().unwrap_or(0);
    let ss = (0..samples)
        .map(|k| SsRow {
            t_s: paths[0].samples[k].t_us as f64 / 1e6,
            flows: paths
                .iter()
                .map(|p| Some(ss_info(cc, &p.samples[k])))
                .collect(),
        })
        .collect();
    let counters = |k: usize| -> BTreeMap<String, u64> {
        let sum = |f: fn(&polycorn_sim::tcp::SenderStats) -> u64| {
            paths.iter().map(|p| f(&p.samples[k].stats)).sum::<u64>()
        };
        [
            ("TcpOutSegs", sum(|s| s.segments_sent)),
            ("TcpRetransSegs", sum(|s| s.segments_retransmitted)),
            ("TcpExtTCPTimeouts", sum(|s| s.rtos)),
            ("TcpExtTCPLossProbes", sum(|s| s.tail_loss_probes)),
            ("TcpExtTCPSackRecovery", sum(|s| s.recoveries)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    };
    // One snapshot per `nstat` period, as the sampler takes them.
    let nstat: Vec<NstatRow> = (0..samples)
        .filter(|&k| {
            let t_ms = paths[0].samples[k].t_us / 1000;
            k == 0 || t_ms / NSTAT_MS != paths[0].samples[k - 1].t_us / 1000 / NSTAT_MS
        })
        .map(|k| NstatRow {
            t_s: paths[0].samples[k].t_us as f64 / 1e6,
            counters: counters(k),
        })
        .collect();
    RawRun {
        cc: column.to_string(),
        bins: paths.iter().map(|p| p.bins.clone()).collect(),
        ss,
        nstat_before: nstat
            .first()
            .map(|r| r.counters.clone())
            .unwrap_or_default(),
        nstat_after: nstat.last().map(|r| r.counters.clone()).unwrap_or_default(),
        nstat,
        sent_bytes: paths.iter().map(|p| p.stats.bytes_written).collect(),
        connect_s: vec![0.0; paths.len()],
        emu: Vec::new(),
        cc_seen: true,
    }
}

/// The `ss -ti` view of one sender sample.
fn ss_info(cc: &str, s: &polycorn_sim::bulk::BulkSample) -> SsInfo {
    let i = &s.info;
    let mss = u64::from(i.mss_bytes.max(1));
    let ms = |d: polycorn_sim::tcp::Duration| d.as_secs_f64() * 1e3;
    SsInfo {
        cc: cc.to_string(),
        srtt_ms: ms(i.srtt),
        rttvar_ms: ms(i.rttvar),
        rto_ms: ms(s.rto),
        backoff: i.rto_backoff,
        retrans_now: 0,
        retrans_total: s.stats.segments_retransmitted,
        cwnd: i.cwnd_bytes / mss,
        ssthresh: s.ssthresh_segments.map(u64::from),
        bytes_acked: i.bytes_acked,
        bytes_retrans: s.stats.bytes_retransmitted,
        data_segs_out: s.stats.segments_sent,
        lost: 0,
        unacked: i.unacked_bytes / mss,
        delivery_rate_bps: i.delivery_rate.as_bytes_per_sec() as f64 * 8.0,
    }
}
