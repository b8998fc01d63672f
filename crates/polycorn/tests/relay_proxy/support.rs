//! Helpers shared by several topics: blackouts, waiting on logs and metrics, background
//! downloads, path checks, traffic counters and per-namespace host names.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::bed::*;

/// Drop everything on the relay's `devices` (ingress and egress) until the guard is dropped.
pub(crate) struct Blackhole {
    pub(crate) ns: String,
    pub(crate) table: String,
}

impl Blackhole {
    pub(crate) fn new(ns: &str, devices: &[&str]) -> Blackhole {
        let mut rules = String::new();
        for d in devices {
            rules += &format!(
                "  chain in_{d} {{ type filter hook ingress device \"{d}\" priority 0; policy drop; }}\n  chain out_{d} {{ type filter hook egress device \"{d}\" priority 0; policy drop; }}\n"
            );
        }
        Blackhole::with_rules(ns, &rules)
    }

    /// In the namespace `ns`, drop the IPv4 packets arriving on `device` from TCP port `port`
    /// that carry payload (longer than a pure ACK with options): the data of that one
    /// connection's sender is lost on the way, while its acknowledgements and every other
    /// connection pass. (Dropping at the sender's egress instead would report a local
    /// transmit failure to its TCP, which then neither counts the segment in flight nor backs
    /// off.)
    pub(crate) fn incoming_data(ns: &str, device: &str, port: u16) -> Blackhole {
        Blackhole::with_rules(
            ns,
            &format!(
                "  chain in_{device} {{ type filter hook ingress device \"{device}\" priority 0; policy accept; meta protocol ip ip protocol tcp tcp sport {port} ip length > 60 drop; }}\n"
            ),
        )
    }

    pub(crate) fn with_rules(ns: &str, chains: &str) -> Blackhole {
        let table = "pctestdrop".to_string();
        let rules = format!("table netdev {table} {{\n{chains}}}\n");
        let mut c = Command::new("ip")
            .args(["netns", "exec", ns, "nft", "-f", "-"])
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        c.stdin.take().unwrap().write_all(rules.as_bytes()).unwrap();
        assert!(c.wait().unwrap().success(), "nft drop rules");
        Blackhole {
            ns: ns.into(),
            table,
        }
    }
}

impl Drop for Blackhole {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.ns,
                "nft",
                "delete",
                "table",
                "netdev",
                &self.table,
            ])
            .status();
    }
}

/// Bytes a path must have carried of the download before [`transfer_with_outage`] cuts it.
const OUTAGE_AFTER_BYTES: f64 = 4e6;

/// The payload bytes written to path `p{index}` (its `polycorn_path_sent_bytes_total`, summed
/// over relays) in the metrics text `m`.
pub(crate) fn path_sent_bytes(m: &str, index: &str) -> f64 {
    let label = format!("path=\"p{index}\"");
    m.lines()
        .filter(|l| l.starts_with("polycorn_path_sent_bytes_total{") && l.contains(&label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A 64 MB download with the relay's `devices` blacked out for `outage`, from at least `after`
/// into it and once the download flows over every one of them.
pub(crate) fn transfer_with_outage(
    bed: &Bed,
    stack: &Stack,
    devices: &'static [&'static str],
    after: Duration,
    outage: Duration,
) {
    let ns = bed.ns("relay");
    let proxy_ns = bed.ns("proxy");
    // Downlink bytes the proxy has written to each path to be cut.
    let sent = move || {
        let m = scrape_metrics(&proxy_ns);
        devices
            .iter()
            .map(|d| path_sent_bytes(&m, d.trim_start_matches("path")))
            .collect::<Vec<f64>>()
    };
    let before = sent();
    let cut = std::thread::spawn(move || {
        // The outage must find the download flowing over every path it cuts (a path with
        // nothing in flight has nothing to move): a loaded machine can take seconds to get the
        // transfer going.
        let start = Instant::now();
        std::thread::sleep(after);
        while sent()
            .iter()
            .zip(&before)
            .any(|(now, was)| now - was < OUTAGE_AFTER_BYTES)
        {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "the download did not reach every path of {devices:?} within 60 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let b = Blackhole::new(&ns, devices);
        eprintln!("outage of {devices:?} for {} s", outage.as_secs());
        std::thread::sleep(outage);
        drop(b);
        eprintln!("outage over");
    });
    let r = in_ns(&bed.ns("client"), move || {
        Box::pin(async move {
            tokio::time::timeout(
                Duration::from_secs(180),
                one(Via::Transparent4, MB, 64 * MB, None),
            )
            .await
        })
    });
    cut.join().unwrap();
    match r {
        Ok(Ok(t)) => eprintln!(
            "64 MB with {devices:?} out for {} s: {:.1} s",
            outage.as_secs(),
            t.complete.as_secs_f64()
        ),
        other => panic!(
            "transfer across the outage failed: {other:?}\n--- relay ---\n{}\n--- proxy ---\n{}",
            tail(&stack.relay.log()),
            tail(&stack.proxy.log())
        ),
    }
    assert!(
        !stack.relay.log().contains("hold time"),
        "flows must not be reset"
    );
}

/// Wait up to 20 s for `want` in the relay's log; fail at once if `forbid` (with its reason)
/// appears first, and with `missing` if the time runs out.
pub(crate) fn wait_for_relay_log(
    stack: &Stack,
    want: &str,
    forbid: Option<(&str, &str)>,
    missing: &str,
) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !stack.relay.log().contains(want) {
        if let Some((line, why)) = forbid {
            assert!(
                !stack.relay.log().contains(line),
                "{why}:\n{}",
                tail(&stack.relay.log())
            );
        }
        assert!(
            Instant::now() < deadline,
            "{missing}:\n{}\nproxy:\n{}",
            tail(&stack.relay.log()),
            tail(&stack.proxy.log())
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// One transparent transfer from the client (`up` bytes up, `down` down, byte-checked) that
/// must finish within 60 s.
pub(crate) fn fetch_ok(bed: &Bed, stack: &Stack, up: u64, down: u64, what: &str) {
    fetch_ok_or_show(bed, up, down, what, &stack.relay.log());
}

/// [`fetch_ok`], showing the tail of `log` if it fails.
pub(crate) fn fetch_ok_or_show(bed: &Bed, up: u64, down: u64, what: &str, log: &str) {
    let r = in_ns(&bed.ns("client"), move || {
        Box::pin(async move {
            tokio::time::timeout(
                Duration::from_secs(60),
                one(Via::Transparent4, up, down, None),
            )
            .await
        })
    });
    assert!(matches!(r, Ok(Ok(_))), "{what}: {r:?}\n{}", tail(log));
}

/// The value of metric line `key` (its name and labels) on the metrics page of `ns`'s daemon.
pub(crate) fn metric_value(ns: &str, key: &str) -> Option<i64> {
    let key = format!("{key} ");
    scrape_metrics(ns)
        .lines()
        .find_map(|l| l.strip_prefix(&key)?.trim().parse().ok())
}

/// `polycorn relay --config relay.toml --check-paths` in the relay's namespace, with the
/// stack's relay configuration: its exit status and its output.
pub(crate) fn check_paths(bed: &Bed, stack: &Stack) -> (Option<i32>, String) {
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            &bed.ns("relay"),
            bin(),
            "relay",
            "--config",
        ])
        .arg(stack.dir.path().join("relay.toml"))
        .arg("--check-paths")
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code(), text)
}

/// The line `check_paths` printed for `path`.
pub(crate) fn line(text: &str, path: &str) -> String {
    text.lines()
        .find(|l| l.starts_with(&format!("{path} (")))
        .unwrap_or_else(|| panic!("no line for {path}:\n{text}"))
        .to_string()
}

/// Established TCP connections in namespace `ns` to `dst` (an address, as `ss` filters it).
pub(crate) fn established_to(ns: &str, dst: &str) -> usize {
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            ns,
            "ss",
            "-Htn",
            "state",
            "established",
            "dst",
            dst,
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).lines().count()
}

/// [`download_in_background`], returned once the proxy has connected it to the server.
pub(crate) fn download_reaching_the_server(
    bed: &Bed,
    stack: &Stack,
    down: u64,
    secs: u64,
) -> std::thread::JoinHandle<Result<Result<(), String>, tokio::time::error::Elapsed>> {
    let download = download_in_background(bed, down, secs);
    let proxy_ns = bed.ns("proxy");
    // Where the passenger's connection got to, shown if the proxy never connects it.
    let sockets = || {
        let ss = |ns: String| {
            let out = Command::new("ip")
                .args(["netns", "exec", &ns, "ss", "-tni"])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default();
            format!("--- ss -tni in {ns} ---\n{out}")
        };
        format!(
            "{}\n{}\n{}\n{}",
            stack_log(stack),
            ss(bed.ns("client")),
            ss(bed.ns("relay")),
            ss(bed.ns("proxy"))
        )
    };
    wait_until(20, "the proxy connects to the server", sockets, || {
        established_to(&proxy_ns, "10.0.2.2") > 0 || download.is_finished()
    });
    if download.is_finished() && established_to(&proxy_ns, "10.0.2.2") == 0 {
        let r = download.join();
        panic!(
            "the download ended before the proxy was seen connecting it: {r:?}\n{}",
            sockets()
        );
    }
    download
}

/// A transparent passenger download of `down` bytes on its own thread, given `secs` at most.
pub(crate) fn download_in_background(
    bed: &Bed,
    down: u64,
    secs: u64,
) -> std::thread::JoinHandle<Result<Result<(), String>, tokio::time::error::Elapsed>> {
    let ns = bed.ns("client");
    std::thread::spawn(move || {
        in_ns(&ns, move || {
            Box::pin(async move {
                tokio::time::timeout(
                    Duration::from_secs(secs),
                    one(Via::Transparent4, KB, down, None),
                )
                .await
                .map(|r| r.map(|_| ()).map_err(|e| e.to_string()))
            })
        })
    })
}

/// The download of `restart::stop_during_a_download` ended in an error, not a timeout.
pub(crate) fn assert_cut(
    r: &Result<Result<(), String>, tokio::time::error::Elapsed>,
    stack: &Stack,
) {
    assert!(
        matches!(r, Ok(Err(_))),
        "the passenger's download was cut: {r:?}\n{}",
        stack_log(stack)
    );
}

/// Both daemons' logs' tails, for failure messages.
pub(crate) fn stack_log(stack: &Stack) -> String {
    format!(
        "proxy:\n{}\nrelay:\n{}",
        tail(&stack.proxy.log()),
        tail(&stack.relay.log())
    )
}

/// Packets and bytes both ways through `dev` in `ns` so far (its link counters).
pub(crate) fn link_traffic(ns: &str, dev: &str) -> (u64, u64) {
    let read = |name: &str| -> u64 {
        let out = Command::new("ip")
            .args(["netns", "exec", ns, "cat"])
            .arg(format!("/sys/class/net/{dev}/statistics/{name}"))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        text.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{ns} {dev} {name}: {text:?}"))
    };
    (
        read("rx_packets") + read("tx_packets"),
        read("rx_bytes") + read("tx_bytes"),
    )
}

/// Packets and bytes both ways through `path0` and `path1` of `ns` while `run` runs.
pub(crate) fn traffic_during(ns: &str, run: impl FnOnce()) -> Vec<(u64, u64)> {
    let paths = ["path0", "path1"];
    let before: Vec<_> = paths.iter().map(|d| link_traffic(ns, d)).collect();
    run();
    paths
        .iter()
        .zip(before)
        .map(|(d, (p0, b0))| {
            let (p1, b1) = link_traffic(ns, d);
            (p1 - p0, b1 - b0)
        })
        .collect()
}

/// `/etc/netns/NS/hosts`, which `ip netns exec NS` mounts over `/etc/hosts` for the processes
/// it starts (so a name resolves inside the relay's namespace only); removed on drop, with
/// `/etc/netns` itself when this created it.
pub(crate) struct NetnsHosts {
    pub(crate) dir: PathBuf,
    pub(crate) created_parent: bool,
}

impl NetnsHosts {
    pub(crate) fn new(ns: &str) -> NetnsHosts {
        let parent = PathBuf::from("/etc/netns");
        let created_parent = !parent.exists();
        let dir = parent.join(ns);
        std::fs::create_dir_all(&dir).unwrap();
        NetnsHosts {
            dir,
            created_parent,
        }
    }
    /// Rewrites the file in place (same inode: a running daemon's mount sees the change).
    pub(crate) fn set(&self, name: &str, addr: &str) {
        std::fs::write(
            self.dir.join("hosts"),
            format!("127.0.0.1 localhost\n{addr} {name}\n"),
        )
        .unwrap();
    }
}

impl Drop for NetnsHosts {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
        if self.created_parent {
            // Only if empty: another namespace's entry made meanwhile stays.
            let _ = std::fs::remove_dir("/etc/netns");
        }
    }
}
