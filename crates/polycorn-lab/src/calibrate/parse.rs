//! Parsing `nstat` counters and `ss -ti` socket rows.

use super::*;

pub(super) fn nstat_exec(ns: &str) -> Result<BTreeMap<String, u64>> {
    Ok(parse_nstat(&netns::exec_in(ns, "nstat", &["-asz"])?))
}

pub(super) fn parse_nstat(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let (k, v) = (it.next()?, it.next()?);
            NSTAT_KEYS
                .contains(&k)
                .then(|| v.parse().ok().map(|v| (k.to_string(), v)))
                .flatten()
        })
        .collect()
}

/// Sender sockets of carrier 0..n in `ss -tinH` output: local `10.100.i.2:*`, peer
/// `10.100.i.1:port+i`.
pub(super) fn parse_ss(text: &str, n: usize, port: u16) -> Vec<Option<SsInfo>> {
    let mut flows = vec![None; n];
    let mut current: Option<usize> = None;
    for line in text.lines() {
        if line.starts_with(char::is_whitespace) {
            if let Some(i) = current.take() {
                flows[i] = Some(parse_ss_info(line));
            }
            continue;
        }
        current = None;
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 5 {
            continue;
        }
        let (local, peer) = (f[3], f[4]);
        for (i, slot) in flows.iter().enumerate() {
            if slot.is_none()
                && local.starts_with(&format!("{}:", path_addr(i, 2)))
                && peer == format!("{}:{}", path_addr(i, 1), port as usize + i)
            {
                current = Some(i);
            }
        }
    }
    flows
}

pub(super) fn parse_ss_info(line: &str) -> SsInfo {
    let mut s = SsInfo::default();
    let toks: Vec<&str> = line.split_whitespace().collect();
    let num = |v: &str| v.parse::<f64>().unwrap_or(f64::NAN);
    let int = |v: &str| v.parse::<u64>().unwrap_or(0);
    for (k, tok) in toks.iter().enumerate() {
        let Some((key, val)) = tok.split_once(':') else {
            if *tok == "delivery_rate" {
                s.delivery_rate_bps = toks.get(k + 1).map_or(f64::NAN, |v| parse_rate(v));
            } else if k < 4
                && s.cc.is_empty()
                && tok.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !matches!(*tok, "ts" | "sack" | "ecn" | "ecnseen" | "fastopen")
            {
                s.cc = tok.to_string();
            }
            continue;
        };
        match key {
            "rtt" => {
                let (a, b) = val.split_once('/').unwrap_or((val, "nan"));
                s.srtt_ms = num(a);
                s.rttvar_ms = num(b);
            }
            "rto" => s.rto_ms = num(val),
            "backoff" => s.backoff = int(val) as u32,
            "retrans" => {
                let (a, b) = val.split_once('/').unwrap_or(("0", val));
                s.retrans_now = int(a) as u32;
                s.retrans_total = int(b);
            }
            "cwnd" => s.cwnd = int(val),
            "ssthresh" => s.ssthresh = Some(int(val)),
            "bytes_acked" => s.bytes_acked = int(val),
            "bytes_retrans" => s.bytes_retrans = int(val),
            "data_segs_out" => s.data_segs_out = int(val),
            "lost" => s.lost = int(val),
            "unacked" => s.unacked = int(val),
            _ => {}
        }
    }
    s
}

/// `12345bps`, `1.2Mbps`, `800Kbps` → bit/s.
pub(super) fn parse_rate(v: &str) -> f64 {
    let v = v.trim_end_matches("bps");
    let (num, mult) = match v.chars().last() {
        Some('K' | 'k') => (&v[..v.len() - 1], 1e3),
        Some('M') => (&v[..v.len() - 1], 1e6),
        Some('G') => (&v[..v.len() - 1], 1e9),
        _ => (v, 1.0),
    };
    num.parse::<f64>().map_or(f64::NAN, |x| x * mult)
}
