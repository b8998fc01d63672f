//! `polycorn bench --trace FILE …`: the bench on recorded paths instead of the HSR trip model.
//!
//! Each file becomes one path, replayed in a loop like `polycorn testbed up --trace`: a mahimahi
//! trace (`X.down`, with `X.up` for the uplink when it exists) or a per-second throughput CSV
//! (`Timestamp,DL_bitrate,UL_bitrate`, e.g. ucc5g). The paths become a [`Trip`] without a train
//! ([`Trip::from_traces`]), so every system, the oracle, the IM lower bound and the report see
//! them exactly as they see a generated trip; what needs a train (handovers, context, LinkDB's
//! predictions) is absent.

use std::path::PathBuf;

use anyhow::{bail, Result};
use polycorn_link::trace::DeliveryTrace;
use polycorn_link::trip::{TracePath, Trip};

/// One-way delay of trace paths unless `--delay-ms` says otherwise, ms (as `testbed up`).
pub const DEFAULT_DELAY_MS: f64 = 20.0;

/// The recorded paths of a bench run.
#[derive(Debug, Clone)]
pub struct Traces {
    /// Per path: name, downlink, uplink.
    paths: Vec<(String, DeliveryTrace, DeliveryTrace)>,
    /// One-way delay of every path, µs.
    owd_us: u64,
    /// `traces-` and 12 hex digits of a SHA-256 over the paths' opportunities and delay.
    pub id: String,
    /// The files, as given.
    pub files: Vec<PathBuf>,
}

impl Traces {
    /// Reads and validates every file (errors name the file and line).
    pub fn load(files: &[PathBuf], delay_ms: Option<f64>) -> Result<Traces> {
        use sha2::{Digest, Sha256};
        let delay_ms = delay_ms.unwrap_or(DEFAULT_DELAY_MS);
        if !(delay_ms.is_finite() && (0.0..=10_000.0).contains(&delay_ms)) {
            bail!("--delay-ms must be a number of ms from 0 to 10000, got {delay_ms}");
        }
        let owd_us = (delay_ms * 1000.0).round() as u64;
        let mut h = Sha256::new();
        h.update(owd_us.to_le_bytes());
        let mut paths = Vec::new();
        for (i, f) in files.iter().enumerate() {
            let (down, up) = crate::testbed_cmd::read_trace(f)?;
            for t in [&down, &up] {
                h.update((t.opportunity_count() as u64).to_le_bytes());
                for m in t.opportunities_ms() {
                    h.update(m.to_le_bytes());
                }
            }
            let stem = f
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| format!("path{i}"));
            // Two files with one stem (a/x.down, b/x.down) still get distinct names.
            let name = if paths.iter().any(|(n, _, _)| *n == stem) {
                format!("{stem}#{i}")
            } else {
                stem
            };
            paths.push((name, down, up));
        }
        if paths.len() > polycorn_sched::MAX_PATHS {
            bail!(
                "{} traces: at most {} paths",
                paths.len(),
                polycorn_sched::MAX_PATHS
            );
        }
        let digest = h.finalize();
        let hex: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
        Ok(Traces {
            paths,
            owd_us,
            id: format!("traces-{hex}"),
            files: files.to_vec(),
        })
    }

    /// The paths as a trip of `duration_ms`, each trace looped from its start.
    pub fn trip(&self, duration_ms: u64) -> Trip {
        let paths: Vec<TracePath<'_>> = self
            .paths
            .iter()
            .map(|(name, down, up)| TracePath {
                name: name.clone(),
                down,
                up,
                owd_us: self.owd_us,
            })
            .collect();
        Trip::from_traces(&paths, duration_ms)
    }

    /// The delay, ms.
    pub fn delay_ms(&self) -> f64 {
        self.owd_us as f64 / 1000.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_load_with_names_identity_and_clear_errors() {
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("fast.down");
        let b = d.path().join("slow.down");
        std::fs::write(&a, "1\n1\n2\n").unwrap();
        std::fs::write(d.path().join("fast.up"), "2\n").unwrap();
        std::fs::write(&b, "5\n").unwrap();
        let t = Traces::load(&[a.clone(), b.clone()], None).unwrap();
        assert_eq!(t.delay_ms(), DEFAULT_DELAY_MS);
        assert!(t.id.starts_with("traces-") && t.id.len() == 19, "{}", t.id);
        let trip = t.trip(1000);
        let names: Vec<_> = trip.paths.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["fast", "slow"]);
        assert_eq!(trip.paths.len(), 2);
        assert_eq!(trip.paths[0].owd_us, vec![20_000; 100]);
        // fast.down: 3 opportunities every 2 ms = 1.5 per ms; fast.up: 1 every 2 ms.
        let bytes = |bps: &[f64]| bps.iter().sum::<f64>() / 8.0 / 100.0;
        assert_eq!(bytes(&trip.paths[0].dl_bps), 1500.0 * 1500.0);
        assert_eq!(bytes(&trip.paths[0].ul_bps), 500.0 * 1500.0);
        // Without X.up the downlink trace serves both directions.
        assert_eq!(trip.paths[1].ul_bps, trip.paths[1].dl_bps);
        // Same files, same identity; another delay, another one.
        assert_eq!(
            Traces::load(&[a.clone(), b.clone()], None).unwrap().id,
            t.id
        );
        assert_ne!(
            Traces::load(&[a.clone(), b.clone()], Some(30.0))
                .unwrap()
                .id,
            t.id
        );
        // A bad line is named by file and line.
        std::fs::write(&b, "5\nx\n").unwrap();
        let e = format!(
            "{:#}",
            Traces::load(&[a.clone(), b.clone()], None).unwrap_err()
        );
        assert!(e.contains("slow.down") && e.contains(":2"), "{e}");
        let e = format!("{:#}", Traces::load(&[a], Some(-1.0)).unwrap_err());
        assert!(e.contains("--delay-ms"), "{e}");
    }

    /// Real recorded traces (mahimahi's, when ../shared/data is there; they start at 0 ms and
    /// end mid-drive): every opportunity of the first 100 s is in the trip, none more.
    #[test]
    fn mahimahi_driving_traces_keep_every_opportunity() {
        let f = PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../../shared/data/mahimahi/TMobile-LTE-driving.down"
        ));
        if !f.exists() {
            eprintln!("skipped: {} not present", f.display());
            return;
        }
        let t = Traces::load(std::slice::from_ref(&f), None).unwrap();
        let trip = t.trip(100_000);
        let text = std::fs::read_to_string(&f).unwrap();
        let want = text
            .lines()
            .filter_map(|l| l.trim().parse::<u64>().ok())
            .filter(|&m| m <= 100_000)
            .count() as f64;
        let got: f64 = trip.paths[0].dl_bps.iter().sum::<f64>() / 8.0 / 100.0 / 1500.0;
        assert!(
            (got - want).abs() < 1e-6,
            "{got} opportunities, trace has {want}"
        );
        // Looped: a window past the trace's end is filled from its start.
        let period_s = text.lines().last().unwrap().trim().parse::<f64>().unwrap() / 1000.0;
        let long = t.trip(((period_s + 60.0) * 1000.0) as u64);
        let steps = long.paths[0].dl_bps.len();
        assert!(long.paths[0].dl_bps[steps - 6000..]
            .iter()
            .any(|&b| b > 0.0));
    }
}
