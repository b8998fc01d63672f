//! LinkDB's CSV importers on arbitrary text: the UCC 5G logs (`import::ucc5g::import`), the
//! WMN Lab metro logs (`import::wmnlab::import`) and a relay's context log
//! (`import::relay::import`, the file the proxy records from the context frames relays send
//! and the nightly import reads). They only read files, so each input is written once per run
//! to a scratch file named as a WMN Lab log (`2023-04-17_qc00_#1_B3.csv`, which the other two
//! accept as well) and every importer reads it. The input's length picks the relay importer's
//! options (direction given or inferred; a monitor lag undone or not).
//!
//! Checked: no panic; an importer either fails naming the file or returns trips whose
//! handovers, fixes and radio samples are in time order (`TripData`'s contract), with bad rows
//! numbered inside the file; the trips build a `LinkIndex`; reports and errors render.
//! Not covered: `import::sim::from_dir` (a directory of the testbed's own trip files).
#![no_main]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use polycorn_linkdb::import::{relay, ucc5g, wmnlab, ImportError, Imported};
use polycorn_linkdb::{Direction, LinkIndex, Track};

fn file() -> &'static PathBuf {
    static FILE: OnceLock<PathBuf> = OnceLock::new();
    FILE.get_or_init(|| polycorn_fuzz::process_dir("linkdb").join("2023-04-17_qc00_#1_B3.csv"))
}

fn check(result: Result<Imported, ImportError>, lines: usize) {
    match result {
        Ok((trips, report)) => {
            for b in &report.bad {
                assert!(
                    b.line >= 1 && b.line <= lines + 1,
                    "bad row at line {}: {b}",
                    b.line
                );
            }
            let _ = report.summary(5);
            for t in &trips {
                assert!(
                    t.handovers
                        .windows(2)
                        .all(|w| w[0].start_ms <= w[1].start_ms),
                    "{}: handovers out of start order",
                    t.meta.name
                );
                assert!(
                    t.samples.windows(2).all(|w| w[0].t_ms <= w[1].t_ms),
                    "{}: fixes out of time order",
                    t.meta.name
                );
                assert!(
                    t.radio.windows(2).all(|w| w[0].t_ms <= w[1].t_ms),
                    "{}: radio samples out of time order",
                    t.meta.name
                );
            }
            let index = LinkIndex::build(&trips);
            let _ = index.cells().len();
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let path = file();
    std::fs::write(path, data).expect("scratch file");
    let lines = data.split(|&b| b == b'\n').count();

    check(ucc5g::import(path), lines);
    check(wmnlab::import(path, wmnlab::Options::default()), lines);
    let opts = relay::Options {
        route: "fuzz".into(),
        track: Track {
            origin: (39.86, 116.37),
            heading_deg: 160.0,
        },
        direction: match data.len() % 3 {
            0 => None,
            1 => Some(Direction::Up),
            _ => Some(Direction::Down),
        },
        carriers: None,
        before_day: None,
        done: BTreeMap::new(),
        monitor_lag_ms: if data.len().is_multiple_of(2) {
            0
        } else {
            1_500
        },
    };
    check(relay::import(path, &opts), lines);
});
