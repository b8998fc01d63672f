//! Real HSR flows beside the emulated ones: `polycorn testbed compare-real`.
//!
//! Reads the client-side packet traces of the `hsr-mptcp` dataset (Li et al., SIGCOMM'18: MPTCP
//! downloads over two Chinese carriers on high-speed rail, one tshark CSV per subflow, named
//! `client.<start>.<cc>.<host>.M.D<KB>.<iface>.<carrier>.pcap.csv`), rebuilds each download
//! from its subflows and measures its flow completion time the way the bench does: from the
//! client's first packet (the first SYN) to the last data byte from the server. Beside them it
//! prints the FCTs of every system of one or more bench runs, per size. A plausibility check of
//! the emulated trip against a real ride, not a calibration target: the real flows are from
//! 2018, other carriers and networks, and MPTCP v0.9x with reno / lia / olia.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::bench::analysis as an;

/// `polycorn testbed compare-real`.
#[derive(clap::Args, Debug)]
pub struct CompareRealArgs {
    /// The hsr-mptcp dataset (a directory with `mouse/`, or the directory of the CSVs).
    #[arg(long, default_value = "../shared/data/hsr-mptcp")]
    pub hsr_mptcp: PathBuf,
    /// Bench output directories whose flows to print beside the real ones (a multi-ride run or
    /// one ride, as for `bench pool`).
    #[arg(long)]
    pub bench: Vec<PathBuf>,
}

/// One subflow's trace, reduced to what an FCT needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Subflow {
    /// Carrier label from the file name (e.g. `M3`).
    pub carrier: String,
    /// Time of the first packet, s (epoch).
    pub first_s: f64,
    /// Time of the last packet carrying server data, s.
    pub last_data_s: Option<f64>,
    /// Payload bytes from the server.
    pub data_bytes: u64,
}

/// One download: its subflows' traces.
#[derive(Debug, Clone, PartialEq)]
pub struct RealFlow {
    /// Start stamp and congestion control from the file name.
    pub id: String,
    /// Congestion control (reno, lia, olia).
    pub cc: String,
    /// Requested size, bytes (`D256` = 256,000).
    pub size: u64,
    /// Subflows with at least one packet.
    pub subflows: Vec<Subflow>,
}

impl RealFlow {
    /// Payload bytes received over all subflows.
    pub fn bytes(&self) -> u64 {
        self.subflows.iter().map(|s| s.data_bytes).sum()
    }

    /// FCT, s: first packet of any subflow to the last data packet of any; `None` when the
    /// download did not deliver its size (98% of it: the file names round).
    pub fn fct_s(&self) -> Option<f64> {
        if self.bytes() * 100 < self.size * 98 {
            return None;
        }
        let first = self.subflows.iter().map(|s| s.first_s).reduce(f64::min)?;
        let last = self
            .subflows
            .iter()
            .filter_map(|s| s.last_data_s)
            .reduce(f64::max)?;
        Some(last - first)
    }
}

/// What a file name says: (start stamp, cc, size in bytes, carrier); `None` for other names
/// (and for the 100 s `F100` flows, which have no completion time).
pub fn parse_name(name: &str) -> Option<(String, String, u64, String)> {
    let stem = name.strip_suffix(".pcap.csv")?.strip_prefix("client.")?;
    let parts: Vec<&str> = stem.split('.').collect();
    // <start>.<cc>.<host>.M.D<KB>.<iface>.<carrier>
    let [start, cc, _host, _m, size, _iface, carrier] = parts.as_slice() else {
        return None;
    };
    let kb: u64 = size.strip_prefix('D')?.parse().ok()?;
    Some((
        start.to_string(),
        cc.to_string(),
        kb * 1000,
        carrier.to_string(),
    ))
}

/// Read one subflow's CSV. Rows that cannot be read are returned as `file:line: reason`.
pub fn read_subflow(path: &Path, carrier: &str) -> Result<(Option<Subflow>, Vec<String>)> {
    let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    let mut lines = text.lines().enumerate();
    let Some((_, header)) = lines.next() else {
        return Ok((None, Vec::new()));
    };
    let cols: Vec<&str> = header
        .trim_start_matches('\u{feff}')
        .split(',')
        .map(str::trim)
        .collect();
    let col = |name: &str| {
        cols.iter()
            .position(|c| *c == name)
            .with_context(|| format!("{}:1: no `{name}` column", path.display()))
    };
    let (t_i, src_i, len_i, flags_i) = (
        col("frame.time_epoch")?,
        col("ip.src")?,
        col("tcp.len")?,
        col("tcp.flags")?,
    );
    let mut bad = Vec::new();
    let mut client: Option<String> = None;
    let mut sub: Option<Subflow> = None;
    for (i, line) in lines {
        if line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split(',').collect();
        let at = |k: usize| f.get(k).copied().unwrap_or("");
        let t: Option<f64> = at(t_i).parse().ok().filter(|t: &f64| t.is_finite());
        let len: Option<u64> = match at(len_i) {
            "" => Some(0),
            s => s.parse().ok(),
        };
        let flags = u16::from_str_radix(at(flags_i).trim_start_matches("0x"), 16).ok();
        let (Some(t), Some(len), Some(flags)) = (t, len, flags) else {
            bad.push(format!(
                "{}:{}: unreadable time, tcp.len or tcp.flags",
                path.display(),
                i + 1
            ));
            continue;
        };
        let src = at(src_i);
        // The client sends the first SYN (SYN set, ACK not).
        if client.is_none() && flags & 0x12 == 0x02 {
            client = Some(src.to_string());
        }
        let s = sub.get_or_insert(Subflow {
            carrier: carrier.to_string(),
            first_s: t,
            last_data_s: None,
            data_bytes: 0,
        });
        if len > 0 && client.as_deref().is_some_and(|c| c != src) {
            s.data_bytes += len;
            s.last_data_s = Some(t);
        }
    }
    if sub.is_some() && client.is_none() {
        bad.push(format!("{}: no SYN from the client", path.display()));
    }
    Ok((sub, bad))
}

/// Every download under `dir` (`dir/mouse/` when present), by start stamp.
pub fn load(dir: &Path) -> Result<(Vec<RealFlow>, Vec<String>)> {
    let mouse = dir.join("mouse");
    let d = if mouse.is_dir() {
        mouse
    } else {
        dir.to_path_buf()
    };
    let mut names: Vec<PathBuf> = std::fs::read_dir(&d)
        .with_context(|| format!("read directory {}", d.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    names.sort();
    let mut flows: BTreeMap<(String, String, u64), RealFlow> = BTreeMap::new();
    let mut bad = Vec::new();
    for path in names {
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let Some((start, cc, size, carrier)) = parse_name(name) else {
            continue;
        };
        let (sub, b) = read_subflow(&path, &carrier)?;
        bad.extend(b);
        let flow = flows
            .entry((start.clone(), cc.clone(), size))
            .or_insert_with(|| RealFlow {
                id: format!("{start}.{cc}"),
                cc,
                size,
                subflows: Vec::new(),
            });
        flow.subflows.extend(sub);
    }
    if flows.is_empty() {
        bail!(
            "{}: no subflow traces named client.<start>.<cc>.<host>.M.D<KB>.<iface>.<carrier>.pcap.csv",
            d.display()
        );
    }
    Ok((flows.into_values().collect(), bad))
}

fn quartiles(v: &[f64]) -> String {
    if v.is_empty() {
        return "-".into();
    }
    format!(
        "{:.2} [{:.2}, {:.2}]",
        an::quantile(v, 0.5),
        an::quantile(v, 0.25),
        an::quantile(v, 0.75)
    )
}

/// The comparison table.
pub fn report(flows: &[RealFlow], bench: &[crate::bench::report::Results]) -> String {
    use std::fmt::Write as _;
    let mut o = String::new();
    let sizes: Vec<u64> = {
        let mut s: Vec<u64> = flows.iter().map(|f| f.size).collect();
        s.sort_unstable();
        s.dedup();
        s
    };
    let _ = writeln!(
        o,
        "flow completion time, s: median [p25, p75] (completed/flows)"
    );
    let _ = write!(o, "{:<34}", "");
    for s in &sizes {
        let _ = write!(o, " {:>26}", format!("{} KB", s / 1000));
    }
    o.push('\n');
    let _ = write!(o, "{:<34}", "real HSR MPTCP (hsr-mptcp, 2018)");
    for &s in &sizes {
        let of: Vec<&RealFlow> = flows.iter().filter(|f| f.size == s).collect();
        let v: Vec<f64> = of.iter().filter_map(|f| f.fct_s()).collect();
        let _ = write!(
            o,
            " {:>26}",
            format!("{} ({}/{})", quartiles(&v), v.len(), of.len())
        );
    }
    o.push('\n');
    // The bench's nearest size to each real one (256 KB ↔ 262,144 B, 1 MB ↔ 1,048,576 B).
    let mut systems: Vec<String> = Vec::new();
    for r in bench {
        for run in &r.runs {
            if !systems.contains(&run.system) {
                systems.push(run.system.clone());
            }
        }
    }
    for name in &systems {
        let _ = write!(o, "{:<34}", format!("emulated: {name}"));
        for &s in &sizes {
            let mut v = Vec::new();
            let mut n = 0;
            for r in bench {
                let Some(run) = r.run(name) else { continue };
                for fl in run.flows.iter().filter(|f| near(f.size, s)) {
                    n += 1;
                    if fl.ok {
                        v.push(fl.fct_s);
                    }
                }
            }
            let cell = if n == 0 {
                "-".to_string()
            } else {
                format!("{} ({}/{})", quartiles(&v), v.len(), n)
            };
            let _ = write!(o, " {:>26}", cell);
        }
        o.push('\n');
    }
    o
}

/// Whether a bench flow of `bench` bytes is the size class of a real `real`-byte download.
fn near(bench: u64, real: u64) -> bool {
    let (a, b) = (bench as f64, real as f64);
    (a / b - 1.0).abs() < 0.1
}

/// `polycorn testbed compare-real`.
pub fn run(args: &CompareRealArgs) -> Result<()> {
    let (flows, bad) = load(&args.hsr_mptcp)?;
    let rides: Vec<crate::bench::report::Results> = if args.bench.is_empty() {
        Vec::new()
    } else {
        crate::bench::pool::load_dirs(&args.bench)?
            .into_iter()
            .map(|(_, r)| r)
            .collect()
    };
    for f in &flows {
        let per: Vec<String> = f
            .subflows
            .iter()
            .map(|s| format!("{} {} KB", s.carrier, s.data_bytes / 1000))
            .collect();
        println!(
            "{:<22} {:>5} KB  {:>12}  {}",
            f.id,
            f.size / 1000,
            f.fct_s()
                .map_or("incomplete".to_string(), |t| format!("FCT {t:.2} s")),
            per.join(", ")
        );
    }
    if !bad.is_empty() {
        println!("{} unreadable rows or traces:", bad.len());
        for b in bad.iter().take(10) {
            println!("  {b}");
        }
    }
    println!();
    print!("{}", report(&flows, &rides));
    if !rides.is_empty() {
        println!(
            "emulated: {} rides of preset {} route {}",
            rides.len(),
            rides[0].meta.preset,
            rides[0].meta.route_seed
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "frame.time_epoch,ip.src,ip.dst,tcp.srcport,tcp.dstport,tcp.seq,tcp.ack,tcp.len,tcp.flags,tcp.analysis.bytes_in_flight,tcp.analysis.ack_rtt,tcp.options.mptcp.rawdataack,tcp.options.mptcp.rawdataseqno";

    fn write(dir: &Path, name: &str, rows: &[&str]) {
        let mut s = String::from(HEADER);
        for r in rows {
            s.push('\n');
            s.push_str(r);
        }
        std::fs::write(dir.join(name), s).unwrap();
    }

    #[test]
    fn names_parse_and_others_are_skipped() {
        assert_eq!(
            parse_name("client.1529184872.reno.laptop#3.M.D256.wlan12.M3.pcap.csv"),
            Some(("1529184872".into(), "reno".into(), 256_000, "M3".into()))
        );
        assert_eq!(
            parse_name("client.1529470329.olia.laptop#3.M.F100.wlan16.U4.pcap.csv"),
            None
        );
        assert_eq!(parse_name("notes.txt"), None);
    }

    #[test]
    fn a_download_over_two_subflows_has_the_fct_from_first_syn_to_last_data() {
        let d = std::env::temp_dir().join(format!("pc-real-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        // Subflow M3: SYN at 100.0, SYN-ACK, request, 1,500 B at 100.5 and 100.9.
        write(
            &d,
            "client.1.lia.h.M.D3.w1.M3.pcap.csv",
            &[
                "100.0,10.0.0.1,1.2.3.4,1,80,0,0,0,0x00000002,,,,",
                "100.2,1.2.3.4,10.0.0.1,80,1,0,1,0,0x00000012,,0.2,,",
                "100.5,1.2.3.4,10.0.0.1,80,1,1,1,1500,0x00000010,,,,",
                "100.6,10.0.0.1,1.2.3.4,1,80,1,1501,0,0x00000010,,,,",
                "100.9,1.2.3.4,10.0.0.1,80,1,1501,1,1500,0x00000018,,,,",
            ],
        );
        // Subflow U4 joins later and carries the last 1,000 B at 101.25; one row is garbage.
        write(
            &d,
            "client.1.lia.h.M.D3.w2.U4.pcap.csv",
            &[
                "100.4,10.0.0.2,1.2.3.4,2,80,0,0,0,0x00000002,,,,",
                "not-a-time,1.2.3.4,10.0.0.2,80,2,0,1,0,0x00000012,,,,",
                "101.25,1.2.3.4,10.0.0.2,80,2,1,1,1000,0x00000010,,,,",
            ],
        );
        // Another download that delivered only part of its size.
        write(
            &d,
            "client.2.reno.h.M.D64.w1.M3.pcap.csv",
            &[
                "200.0,10.0.0.1,1.2.3.4,1,80,0,0,0,0x00000002,,,,",
                "200.3,1.2.3.4,10.0.0.1,80,1,1,1,1400,0x00000010,,,,",
            ],
        );
        let (flows, bad) = load(&d).unwrap();
        assert_eq!(flows.len(), 2);
        let f = &flows[0];
        assert_eq!((f.size, f.bytes(), f.subflows.len()), (3_000, 4_000, 2));
        assert!((f.fct_s().unwrap() - 1.25).abs() < 1e-9, "{f:?}");
        assert_eq!(flows[1].fct_s(), None, "64 KB asked, 1.4 KB came");
        assert_eq!(bad.len(), 1, "{bad:?}");
        assert!(bad[0].ends_with("U4.pcap.csv:3: unreadable time, tcp.len or tcp.flags"));
        let table = report(&flows, &[]);
        assert!(table.contains("1.25 [1.25, 1.25] (1/1)"), "{table}");
        assert!(table.contains("- (0/1)"), "{table}");
        // A CSV without the needed columns is an error naming the file and column.
        std::fs::write(
            d.join("client.3.lia.h.M.D3.w1.M3.pcap.csv"),
            "time,src\n1,2\n",
        )
        .unwrap();
        let e = format!("{:#}", load(&d).unwrap_err());
        assert!(
            e.contains("client.3.lia.h.M.D3.w1.M3.pcap.csv:1: no `frame.time_epoch` column"),
            "{e}"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// The real dataset, when this machine has it.
    #[test]
    fn the_hsr_mptcp_dataset_loads_when_present() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/hsr-mptcp");
        if !dir.is_dir() {
            eprintln!("{} absent: skipped", dir.display());
            return;
        }
        let (flows, _bad) = load(&dir).unwrap();
        let done = |size: u64| {
            flows
                .iter()
                .filter(|f| f.size == size && f.fct_s().is_some())
                .count()
        };
        assert!(done(256_000) >= 10 && done(1_024_000) >= 10, "{flows:?}");
        // Every completed download took longer than a round trip and less than a minute.
        for f in &flows {
            if let Some(t) = f.fct_s() {
                assert!((0.05..60.0).contains(&t), "{f:?}");
            }
        }
    }
}
