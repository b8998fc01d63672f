//! `polycorn bench --trace FILE …` and `polycorn sim bench --trace FILE …`: the bench on
//! recorded paths instead of the HSR trip model.
//!
//! Each file becomes one path, replayed in a loop like `polycorn testbed up --trace`: a mahimahi
//! trace (`X.down`, with `X.up` for the uplink when it exists) or a per-second throughput CSV
//! (`Timestamp,DL_bitrate,UL_bitrate`, e.g. ucc5g). The paths become a [`Trip`] without a train
//! ([`Trip::from_traces`]), so every system, the oracle, the IM lower bound and the report see
//! them exactly as they see a generated trip; what needs a train (handovers, context, LinkDB's
//! predictions) is absent.

use std::path::PathBuf;

use anyhow::{bail, Result};
use polycorn_link::trace::{DelaySeries, DeliveryTrace, Outages};
use polycorn_link::trip::{TracePath, Trip};

/// One-way delay of trace paths without a delay of their own, unless `--delay-ms` says
/// otherwise, ms (as `testbed up`).
pub const DEFAULT_DELAY_MS: f64 = crate::testbed_cmd::DEFAULT_DELAY_MS;

/// One recorded path.
#[derive(Debug, Clone)]
struct Path {
    name: String,
    down: DeliveryTrace,
    up: DeliveryTrace,
    delay: DelaySeries,
    /// Where the delay comes from (`20 ms`, `half the PINGMIN of …`, a `.delay.csv` file).
    delay_source: String,
    /// Outages within one loop (`X.outages.csv`), and the held ones among them.
    outages: Outages,
    interruptions: Outages,
    /// What the outages were read from, if any.
    outage_source: Option<String>,
}

/// The recorded paths of a bench run.
#[derive(Debug, Clone)]
pub struct Traces {
    paths: Vec<Path>,
    /// `traces-` and 12 hex digits of a SHA-256 over the paths' opportunities, delays and
    /// outages.
    pub id: String,
    /// The files, as given.
    pub files: Vec<PathBuf>,
}

impl Traces {
    /// Reads and validates every file (errors name the file and line). `delay_ms`: none (each
    /// path its recording's own delay, else [`DEFAULT_DELAY_MS`]), one for all, or one per file.
    pub fn load(files: &[PathBuf], delay_ms: &[f64]) -> Result<Traces> {
        use sha2::{Digest, Sha256};
        if files.len() > polycorn_sched::MAX_PATHS {
            bail!(
                "{} traces: at most {} paths",
                files.len(),
                polycorn_sched::MAX_PATHS
            );
        }
        let recorded = files
            .iter()
            .map(|f| crate::testbed_cmd::read_trace(f))
            .collect::<Result<Vec<_>>>()?;
        let own: Vec<_> = recorded.iter().map(|r| r.delay.clone()).collect();
        let delays = crate::testbed_cmd::path_delays(delay_ms, &own, DEFAULT_DELAY_MS)?;
        let mut h = Sha256::new();
        let mut paths: Vec<Path> = Vec::new();
        for (i, ((f, r), (delay, delay_source))) in
            files.iter().zip(recorded).zip(delays).enumerate()
        {
            for t in [&r.down, &r.up] {
                h.update((t.opportunity_count() as u64).to_le_bytes());
                for m in t.opportunities_ms() {
                    h.update(m.to_le_bytes());
                }
            }
            // Paths without outages hash as they did before outages were read.
            if !(r.outages.is_empty() && r.interruptions.is_empty()) {
                for o in [&r.outages, &r.interruptions] {
                    h.update((o.spans_ms().len() as u64).to_le_bytes());
                    for (a, b) in o.spans_ms() {
                        h.update(a.to_le_bytes());
                        h.update(b.to_le_bytes());
                    }
                }
            }
            h.update(delay.period_ms().unwrap_or(0).to_le_bytes());
            h.update((delay.points().len() as u64).to_le_bytes());
            for (at, us) in delay.points() {
                h.update(at.to_le_bytes());
                h.update(us.to_le_bytes());
            }
            let stem = f
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| format!("path{i}"));
            // Two files with one stem (a/x.down, b/x.down) still get distinct names.
            let name = if paths.iter().any(|p| p.name == stem) {
                format!("{stem}#{i}")
            } else {
                stem
            };
            paths.push(Path {
                name,
                down: r.down,
                up: r.up,
                delay,
                delay_source,
                outages: r.outages,
                interruptions: r.interruptions,
                outage_source: r.outage_source,
            });
        }
        let digest = h.finalize();
        let hex: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
        Ok(Traces {
            paths,
            id: format!("traces-{hex}"),
            files: files.to_vec(),
        })
    }

    /// The paths as a trip of `duration_ms`, each trace (and delay series) looped from its start.
    pub fn trip(&self, duration_ms: u64) -> Trip {
        let paths: Vec<TracePath<'_>> = self
            .paths
            .iter()
            .map(|p| TracePath {
                name: p.name.clone(),
                down: &p.down,
                up: &p.up,
                delay: &p.delay,
                outages: &p.outages,
                interruptions: &p.interruptions,
            })
            .collect();
        Trip::from_traces(&paths, duration_ms)
    }

    /// The paths' names (the files' stems), in order.
    pub fn names(&self) -> Vec<&str> {
        self.paths.iter().map(|p| p.name.as_str()).collect()
    }

    /// Per path with outages, `name: where they come from`.
    pub fn outages(&self) -> Vec<String> {
        self.paths
            .iter()
            .filter_map(|p| Some(format!("{}: {}", p.name, p.outage_source.as_ref()?)))
            .collect()
    }

    /// Per path, `name: delay` (a constant in ms, or where the series comes from).
    pub fn delays(&self) -> Vec<String> {
        self.paths
            .iter()
            .map(|p| format!("{}: {}", p.name, p.delay_source))
            .collect()
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
        let t = Traces::load(&[a.clone(), b.clone()], &[]).unwrap();
        assert_eq!(t.delays(), ["fast: 20 ms", "slow: 20 ms"]);
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
        assert_eq!(Traces::load(&[a.clone(), b.clone()], &[]).unwrap().id, t.id);
        assert_ne!(
            Traces::load(&[a.clone(), b.clone()], &[30.0]).unwrap().id,
            t.id
        );
        // A bad line is named by file and line.
        std::fs::write(&b, "5\nx\n").unwrap();
        let e = format!(
            "{:#}",
            Traces::load(&[a.clone(), b.clone()], &[]).unwrap_err()
        );
        assert!(e.contains("slow.down") && e.contains(":2"), "{e}");
        let e = format!(
            "{:#}",
            Traces::load(std::slice::from_ref(&a), &[-1.0]).unwrap_err()
        );
        assert!(e.contains("--delay-ms"), "{e}");
        let e = format!("{:#}", Traces::load(&[a], &[10.0, 20.0]).unwrap_err());
        assert!(e.contains("2 values for 1 paths"), "{e}");
    }

    /// A directory with `a.down` and `b.down`: one opportunity per ms, period 100 ms.
    fn two_paths() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let (a, b) = (d.path().join("a.down"), d.path().join("b.down"));
        let ms: String = (1..=100).map(|m| format!("{m}\n")).collect();
        std::fs::write(&a, &ms).unwrap();
        std::fs::write(&b, &ms).unwrap();
        (d, a, b)
    }

    /// Each path its own delay: one `--delay-ms` value per path; `X.delay.csv` beside
    /// `X.down` (what `trip generate` writes) and a log's `PINGMIN` column give series, looped
    /// with the capacity trace; an explicit `--delay-ms` overrides them.
    #[test]
    fn paths_take_their_own_delays() {
        let (d, a, b) = two_paths();
        let t = Traces::load(&[a.clone(), b.clone()], &[10.0, 60.5]).unwrap();
        let trip = t.trip(200);
        assert_eq!(trip.paths[0].owd_us, vec![10_000; 20]);
        assert_eq!(trip.paths[1].owd_us, vec![60_500; 20]);
        assert_eq!(t.delays(), ["a: 10 ms", "b: 60.5 ms"]);
        // a.delay.csv: 30 ms, 50 ms from 50 ms; looped every 100 ms (a's period).
        let dc = d.path().join("a.delay.csv");
        std::fs::write(&dc, "t_ms,delay_ms\n0,30\n50,50\n").unwrap();
        let t = Traces::load(&[a.clone(), b.clone()], &[]).unwrap();
        let trip = t.trip(200);
        let want: Vec<u64> = (0..20)
            .map(|k| if k % 10 < 5 { 30_000 } else { 50_000 })
            .collect();
        assert_eq!(trip.paths[0].owd_us, want);
        assert_eq!(trip.paths[1].owd_us, vec![20_000; 20]);
        assert!(t.delays()[0].ends_with("a.delay.csv"), "{:?}", t.delays());
        // Explicit values win; the delay is part of the identity.
        let t2 = Traces::load(&[a.clone(), b.clone()], &[20.0]).unwrap();
        assert_eq!(t2.trip(200).paths[0].owd_us, vec![20_000; 20]);
        assert_ne!(t.id, t2.id);
        // A bad delay file is named by file and line.
        std::fs::write(&dc, "t_ms,delay_ms\n0,30\n50,x\n").unwrap();
        let e = format!("{:#}", Traces::load(&[a], &[]).unwrap_err());
        assert!(e.contains("a.delay.csv:3"), "{e}");
        // A throughput log with PINGMIN: half of it, held until the next report.
        let log = d.path().join("drive.csv");
        std::fs::write(
            &log,
            "Timestamp,DL_bitrate,UL_bitrate,PINGMIN\n2020.02.13_13.03.24,8000,0,-\n\
             2020.02.13_13.03.25,8000,0,80\n2020.02.13_13.03.26,8000,0,-\n\
             2020.02.13_13.03.27,8000,0,120\n",
        )
        .unwrap();
        let t = Traces::load(std::slice::from_ref(&log), &[]).unwrap();
        let owd = &t.trip(4000).paths[0].owd_us;
        assert_eq!(owd[0], 40_000);
        assert_eq!(owd[299], 40_000);
        assert_eq!(owd[300], 60_000);
        assert!(
            t.delays()[0].contains("PINGMIN (2 of 4 rows"),
            "{:?}",
            t.delays()
        );
        // A log with no downlink throughput at all: the file is named.
        std::fs::write(
            &log,
            "Timestamp,DL_bitrate,UL_bitrate\n2020.02.13_13.03.24,0,5\n",
        )
        .unwrap();
        let e = format!("{:#}", Traces::load(&[log], &[]).unwrap_err());
        assert!(e.contains("drive.csv") && e.contains("DL_bitrate"), "{e}");
    }

    /// `X.outages.csv` and `X.interruptions.csv` beside `X.down` (what `trip generate` writes)
    /// black the path out, looping with its trace; they are part of the identity, described,
    /// and an interruption file without outages is refused.
    #[test]
    fn paths_take_their_own_outages() {
        let (d, a, b) = two_paths();
        let before = Traces::load(&[a.clone(), b.clone()], &[]).unwrap();
        assert!(before.outages().is_empty());
        assert!(before.trip(300).paths[0].outages_ms.is_empty());
        // An outage reaching past the loop is cut there; one after it never plays.
        std::fs::write(
            d.path().join("a.outages.csv"),
            "start_ms,end_ms\n10,30\n90,120\n150,160\n",
        )
        .unwrap();
        std::fs::write(
            d.path().join("a.interruptions.csv"),
            "start_ms,end_ms\n10,30\n",
        )
        .unwrap();
        let t = Traces::load(&[a.clone(), b.clone()], &[]).unwrap();
        assert_ne!(t.id, before.id);
        let trip = t.trip(250);
        assert_eq!(
            trip.paths[0].outages_ms,
            [(10, 30), (90, 100), (110, 130), (190, 200), (210, 230)]
        );
        assert_eq!(
            trip.paths[0].interruptions_ms,
            [(10, 30), (110, 130), (210, 230)]
        );
        assert!(trip.paths[1].outages_ms.is_empty());
        let o = t.outages();
        assert_eq!(o.len(), 1, "{o:?}");
        assert!(
            o[0].starts_with("a: ")
                && o[0].contains("a.outages.csv (2 outages, 0.0 s dark per 0.1 s loop")
                && o[0].contains("packets held in the 1 interruptions"),
            "{o:?}"
        );
        // A bad line is named by file and line.
        std::fs::write(
            d.path().join("a.outages.csv"),
            "start_ms,end_ms\n10,30\n40,35\n",
        )
        .unwrap();
        let e = format!(
            "{:#}",
            Traces::load(std::slice::from_ref(&a), &[]).unwrap_err()
        );
        assert!(e.contains("a.outages.csv:3"), "{e}");
        // Interruptions without outages: refused, naming both files.
        std::fs::remove_file(d.path().join("a.outages.csv")).unwrap();
        let e = format!("{:#}", Traces::load(&[a], &[]).unwrap_err());
        assert!(
            e.contains("a.interruptions.csv") && e.contains("a.outages.csv"),
            "{e}"
        );
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
        let t = Traces::load(std::slice::from_ref(&f), &[]).unwrap();
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
