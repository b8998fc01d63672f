//! polycorn-link's trace files on arbitrary text; every input goes to each parser: mahimahi
//! capacity traces (`DeliveryTrace::parse`), delay CSVs (`DelaySeries::parse`), outage CSVs
//! (`Outages::parse`) and G-NetTrack throughput logs (`throughput::parse`).
//!
//! Checked: no panic; errors render as `file:line: message` with a line inside the input;
//! what parses writes back (`to_mahimahi`, `to_csv`) to text that parses to an equal value; the
//! queries the link model makes (opportunity times, delay at a time, outage state, looping)
//! answer without panicking; a throughput log becomes delivery traces and a delay series
//! (unless its traces would exceed a million opportunities: bounded by `MAX_OPPORTUNITIES`,
//! but slow, so skipped here).
#![no_main]

use libfuzzer_sys::fuzz_target;
use polycorn_link::throughput;
use polycorn_link::{DelaySeries, DeliveryTrace, Outages, TraceError};

fn check_error(e: &TraceError, text: &str) {
    let lines = text.split('\n').count();
    assert!(
        e.line >= 1 && e.line <= lines + 1,
        "line {} of {lines}: {e}",
        e.line
    );
    assert!(e.to_string().starts_with("in:"), "{e}");
}

/// Opportunities a rate series would make (12,000 bits each).
fn opportunities(series: &[(u64, u64)]) -> u128 {
    series
        .iter()
        .map(|&(ms, bps)| u128::from(ms) * u128::from(bps) / 1000 / 12_000)
        .sum()
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let probes = [0u64, 1, 999, 1_000, 1_000_000, u64::MAX / 2, u64::MAX];

    match DeliveryTrace::parse("in", text) {
        Ok(t) => {
            let again =
                DeliveryTrace::parse("out", &t.to_mahimahi()).expect("written trace parses");
            assert_eq!(again, t);
            let n = t.opportunity_count();
            assert!(n >= 1 && t.opportunities_ms().len() == n);
            for idx in [0, 1, n / 2, n - 1, n] {
                for looping in [false, true] {
                    let _ = t.opportunity_us(idx, 0, looping);
                    let _ = t.opportunity_us(idx, t.period_ms(), looping);
                }
            }
            let _ = t.mean_rate_bps();
        }
        Err(e) => check_error(&e, text),
    }

    match DelaySeries::parse("in", text) {
        Ok(d) => {
            let again = DelaySeries::parse("out", &d.to_csv()).expect("written delays parse");
            assert_eq!(again, d);
            let max = d.max_delay_us();
            let looped = d.clone().looped(d.points().last().map_or(0, |p| p.0));
            for t in probes {
                assert!(d.delay_at_us(t) <= max);
                let _ = looped.delay_at_us(t);
            }
        }
        Err(e) => check_error(&e, text),
    }

    match Outages::parse("in", text) {
        Ok(o) => {
            let again = Outages::parse("out", &o.to_csv()).expect("written outages parse");
            assert_eq!(again, o);
            let _ = o.dark_ms();
            for t in probes {
                let _ = o.is_out(t);
                if let Some(next) = o.next_change_after(t) {
                    assert!(next > t, "next change {next} not after {t}");
                }
            }
            let period = o.spans_ms().last().map_or(0, |s| s.1);
            let looped = o.looped(period, period.saturating_mul(3).min(1 << 20));
            let _ = looped.dark_ms();
        }
        Err(e) => check_error(&e, text),
    }

    match throughput::parse("in", text) {
        Ok(s) => {
            let small =
                opportunities(&s.downlink) <= 1_000_000 && opportunities(&s.uplink) <= 1_000_000;
            if small {
                match s.traces() {
                    Ok((dl, ul)) => {
                        let _ = (dl.mean_rate_bps(), ul.mean_rate_bps());
                    }
                    Err(e) => {
                        let _ = e.to_string();
                    }
                }
            }
            if let Some(d) = s.delay_series() {
                let _ = d.max_delay_us();
            }
        }
        Err(e) => check_error(&e, text),
    }
});
