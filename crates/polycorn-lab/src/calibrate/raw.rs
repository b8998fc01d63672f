//! Raw output of a measured run: the samples behind the table, per run directory.

use super::*;

pub(super) fn write_raw(dir: &Path, raw: &RawRun, mask: &TimeMask) -> Result<()> {
    let cc = &raw.cc;
    let mut s = String::from("t_end_s,carrier,bytes,mbps,valid\n");
    for (i, bins) in raw.bins.iter().enumerate() {
        for (j, b) in bins.iter().enumerate() {
            let _ = writeln!(
                s,
                "{:.1},{i},{b},{:.4},{}",
                (j + 1) as f64 * BIN_MS as f64 / 1000.0,
                *b as f64 * 8.0 / (BIN_MS as f64 * 1000.0),
                u8::from(mask.bin_valid(j))
            );
        }
    }
    let p = dir.join(format!("goodput-{cc}.csv"));
    fs::write(&p, s).with_context(|| format!("write {}", p.display()))?;
    let mut s = String::from(
        "t_s,carrier,valid,cc,srtt_ms,rttvar_ms,rto_ms,backoff,retrans_now,retrans_total,cwnd,ssthresh,bytes_acked,bytes_retrans,data_segs_out,lost,unacked,delivery_rate_bps\n",
    );
    for r in &raw.ss {
        for (i, f) in r.flows.iter().enumerate() {
            let Some(f) = f else { continue };
            let _ = writeln!(
                s,
                "{:.3},{i},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
                r.t_s,
                u8::from(mask.valid_s(r.t_s)),
                f.cc,
                f.srtt_ms,
                f.rttvar_ms,
                f.rto_ms,
                f.backoff,
                f.retrans_now,
                f.retrans_total,
                f.cwnd,
                f.ssthresh.map_or(String::new(), |v| v.to_string()),
                f.bytes_acked,
                f.bytes_retrans,
                f.data_segs_out,
                f.lost,
                f.unacked,
                f.delivery_rate_bps
            );
        }
    }
    let p = dir.join(format!("ss-{cc}.csv"));
    fs::write(&p, s).with_context(|| format!("write {}", p.display()))?;
    let mut s = format!("t_s,valid,{}\n", NSTAT_KEYS.join(","));
    for r in &raw.nstat {
        let _ = write!(s, "{:.3},{}", r.t_s, u8::from(mask.valid_s(r.t_s)));
        for k in NSTAT_KEYS {
            let _ = write!(s, ",{}", r.counters.get(k).copied().unwrap_or(0));
        }
        s.push('\n');
    }
    let p = dir.join(format!("nstat-{cc}.csv"));
    fs::write(&p, s).with_context(|| format!("write {}", p.display()))?;
    let dir_json = |d: &DirStats| {
        json!({
            "packets_in": d.packets_in,
            "packets_out": d.packets_out,
            "bytes_out": d.bytes_out,
            "dropped": d.dropped,
            "write_failures": d.write_failures,
        })
    };
    let run = json!({
        "cc": cc,
        "cc_seen_in_ss": raw.cc_seen,
        "nstat_before": raw.nstat_before,
        "nstat_after": raw.nstat_after,
        "sent_bytes": raw.sent_bytes,
        "received_bytes": raw.bins.iter().map(|b| b.iter().sum::<u64>()).collect::<Vec<_>>(),
        "connected_at_s": raw.connect_s,
        "ss_samples": raw.ss.len(),
        "emulator": raw.emu.iter().map(|(u, d)| json!({"uplink": dir_json(u), "downlink": dir_json(d)})).collect::<Vec<_>>(),
    });
    let p = dir.join(format!("run-{cc}.json"));
    fs::write(&p, serde_json::to_string_pretty(&run)?)
        .with_context(|| format!("write {}", p.display()))?;
    Ok(())
}
