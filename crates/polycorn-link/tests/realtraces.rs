//! Real traces from `../shared/data`, when present (the tests pass without them).

use std::path::Path;

#[test]
fn every_ucc5g_log_parses_into_traces() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/ucc5g");
    if !dir.exists() {
        eprintln!("skipping: {} not present", dir.display());
        return;
    }
    let mut files = Vec::new();
    let mut stack = vec![dir];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "csv") {
                files.push(p);
            }
        }
    }
    assert!(!files.is_empty());
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let s = polycorn_link::throughput::parse(f.to_str().unwrap(), &text)
            .unwrap_or_else(|e| panic!("{e}"));
        let (down, up) = s.traces().unwrap();
        println!(
            "{}: {} rows, {:.1} min, mean {:.2} / {:.2} Mbit/s down / up, {} gaps cut",
            f.file_name().unwrap().to_string_lossy(),
            s.rows,
            down.period_ms() as f64 / 60_000.0,
            down.mean_rate_bps().unwrap_or(0.0) / 1e6,
            up.mean_rate_bps().unwrap_or(0.0) / 1e6,
            s.gaps_cut
        );
    }
}
