//! A relay whose paths' serving cells and signal come from ModemManager (`[context] cells =
//! "modemmanager"`): the mock ModemManager of `polycorn_net::modem::mock` (a private
//! dbus-daemon with python-dbusmock, on a socket file the relay's namespace reaches), one modem
//! per path matched by the path's interface, positions from the first modem's GNSS. The proxy
//! receives and records the relay's context with each path's cell; `polycorn status` and
//! `--check-paths` show each path's technology, cell and RSRP; a handover reaches the proxy's
//! record; a bearer that drops is a cell loss at once, on which the proxy's ER reinjects the
//! path's data, and the passenger's download stays byte-exact. A path whose configured modem sits on another
//! interface stops the relay with an error naming the path.
//!
//! Needs, besides root, `dbus-daemon` and python3-dbusmock (apt `dbus`, `python3-dbusmock`).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use polycorn_net::config::CellSource;
use polycorn_net::modem::mock::{MockControl, MockModemManager};

use crate::bed::*;
use crate::support::*;

const IMEI0: &str = "350000000000001";
const IMEI1: &str = "350000000000002";

/// The mock and a runtime its control connection lives on.
struct Modems {
    bus: MockModemManager,
    control: MockControl,
    rt: tokio::runtime::Runtime,
    objects: Vec<String>,
}

impl Modems {
    /// The mock with modem `i` on interface `path{i}` (IMEI0, IMEI1), serving cells 0x1A2B
    /// (6699) and 0xBEEF (48879).
    fn start() -> Modems {
        let bus = MockModemManager::start().unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let control = rt.block_on(bus.control()).unwrap();
        let objects = rt.block_on(async {
            let m0 = control.add_modem(0, IMEI0, "path0").await.unwrap();
            let m1 = control.add_modem(1, IMEI1, "path1").await.unwrap();
            control.set_cell(&m0, "262,01,0,1A2B,7").await.unwrap();
            control.set_cell(&m1, "262,02,0,BEEF,9").await.unwrap();
            // The train's position, from the first path's modem (no gpsd).
            control.set_gnss(&m0, 39.865, 116.378).await.unwrap();
            vec![m0, m1]
        });
        Modems {
            bus,
            control,
            rt,
            objects,
        }
    }

    fn run<T>(&self, f: impl std::future::Future<Output = Result<T, String>>) -> T {
        self.rt.block_on(f).unwrap()
    }
}

/// The value of the gauge line `key` (name and labels) on the relay's metrics page.
fn gauge(ns: &str, key: &str) -> Option<f64> {
    let key = format!("{key} ");
    scrape_metrics(ns)
        .lines()
        .find_map(|l| l.strip_prefix(&key)?.trim().parse().ok())
}

/// `polycorn status` of the daemon whose metrics are on 127.0.0.1:9100 in `ns`.
fn status(ns: &str) -> String {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, bin(), "status", "--metrics"])
        .args(["127.0.0.1:9100", "--interval", "0"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `polycorn relay --config config` in the relay's namespace until it exits (within 30 s):
/// its exit status and what it wrote.
fn relay_once(bed: &Bed, config: &std::path::Path) -> (Option<i32>, String) {
    let mut child = Command::new("ip")
        .args([
            "netns",
            "exec",
            &bed.ns("relay"),
            bin(),
            "relay",
            "--config",
        ])
        .arg(config)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > until {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "the relay kept running with a wrong modem:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// Path 0's cells in the order the proxy recorded them (`""`: no cell), repeats merged.
fn recorded_cells(dir: &std::path::Path) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let Ok(files) = std::fs::read_dir(dir.join("polycorn-relay")) else {
        return out;
    };
    let mut files: Vec<_> = files.map(|e| e.unwrap().path()).collect();
    files.sort();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let mut lines = text.lines();
        let header: Vec<&str> = lines.next().unwrap_or("").split(',').collect();
        let Some(col) = header.iter().position(|c| *c == "cell_A") else {
            continue;
        };
        for l in lines {
            let cell = l.split(',').nth(col).unwrap_or("?").to_string();
            if out.last() != Some(&cell) {
                out.push(cell);
            }
        }
    }
    out
}

/// Does `seq` hold `want` in this order (other entries between allowed)?
fn in_order(seq: &[String], want: &[&str]) -> bool {
    let mut it = seq.iter();
    want.iter().all(|w| it.any(|s| s == w))
}

#[test]
fn relay_reads_its_paths_from_modemmanager() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("mm", 20, 10);
    start_server(&bed);
    let modems = Modems::start();
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite:{}", dir.path().join("linkdb.sqlite").display());
    let proxy_record = dir.path().join("proxy-context");
    let address = modems.bus.address().to_string();
    let ends = |r: &mut RelayConfig, p: &mut ProxyConfig| {
        r.context.source = ContextSource::ModemManager;
        r.context.cells = CellSource::ModemManager;
        r.context.dbus = Some(address.clone());
        p.context.record = Some(proxy_record.clone());
        // A LinkDB predictor (of no rides) on the proxy: it knows when a path lost its cell,
        // which ER with cell_loss acts on.
        p.linkdb = LinkDbConfig {
            db: Some(db.clone()),
            track_origin: Some([39.865, 116.378]),
            track_heading_deg: 160.0,
            ..LinkDbConfig::default()
        };
    };
    let mut stack = start_stack_with(&bed, "polycorn", "polycorn", 2, ends, dir);
    stack
        .relay
        .wait_for("serving cells and signal from ModemManager", 1);
    stack.proxy.wait_for("first train context", 1);

    // Each path's technology, cell and RSRP: the relay's status and metrics.
    let relay_ns = bed.ns("relay");
    wait_until(
        20,
        "the radios on the relay's status",
        || stack_log(&stack),
        || {
            let s = status(&relay_ns);
            s.contains("radio p0: lte, cell 6699, RSRP -90.0 dBm")
                && s.contains("radio p1: lte, cell 48879, RSRP -90.0 dBm")
        },
    );
    assert_eq!(
        gauge(&relay_ns, "polycorn_path_radio_cell{path=\"p0\"}"),
        Some(f64::from(0x1A2B))
    );
    // `--check-paths` shows each path's modem first.
    let (_, text) = check_paths(&bed, &stack);
    assert!(
        text.contains("modem of \"p0\": /org/freedesktop/ModemManager1/Modem/0 lte registered")
            && text.contains("(6699)")
            && text.contains("modem of \"p1\""),
        "{text}"
    );

    // A handover on p0, with a weaker signal on the new cell.
    modems.run(async {
        let m0 = &modems.objects[0];
        modems.control.set_signal(m0, -101.0, -14.0, 3.0).await?;
        modems.control.set_cell(m0, "262,01,0,1A2C,7").await
    });
    wait_until(
        20,
        "the handover on the relay's status and in the proxy's record",
        || {
            format!(
                "{}\nrecorded: {:?}\n{}",
                status(&relay_ns),
                recorded_cells(&proxy_record),
                stack_log(&stack)
            )
        },
        || {
            status(&relay_ns).contains("radio p0: lte, cell 6700, RSRP -101.0 dBm")
                && in_order(&recorded_cells(&proxy_record), &["6699", "6700"])
        },
    );

    // p0's bearer drops while a download runs, and p0 goes dark: a cell loss at once, on
    // which the proxy reinjects what p0 had in flight.
    let download = download_reaching_the_server(&bed, &stack, 64 * MB, 120);
    std::thread::sleep(Duration::from_secs(2));
    let dark = Blackhole::new(&relay_ns, &["path0"]);
    modems.run(modems.control.set_bearer(&modems.objects[0], false));
    wait_until(
        20,
        "the proxy told of p0's cell loss",
        || stack_log(&stack),
        || {
            stack.proxy.log().lines().any(|l| {
                l.contains("reinjected a path's unacknowledged chunks")
                    && l.contains("path_name=p0")
                    && l.contains("trigger=cell loss")
            })
        },
    );
    assert!(
        status(&relay_ns).contains("radio p0: lte, no cell"),
        "{}",
        status(&relay_ns)
    );
    std::thread::sleep(Duration::from_secs(3));
    modems.run(modems.control.set_bearer(&modems.objects[0], true));
    drop(dark);
    let r = download.join().unwrap();
    assert!(matches!(r, Ok(Ok(()))), "{r:?}\n{}", stack_log(&stack));
    wait_until(
        20,
        "p0's cell again in the proxy's record",
        || stack_log(&stack),
        || {
            in_order(
                &recorded_cells(&proxy_record),
                &["6699", "6700", "", "6700"],
            )
        },
    );
    fetch_ok(&bed, &stack, 10 * KB, 4 * MB, "after p0's bearer is back");
    assert_eq!(
        gauge(&relay_ns, "polycorn_path_radio_cell{path=\"p1\"}"),
        Some(f64::from(0xBEEF))
    );

    // A path whose modem sits on another interface: the relay refuses to start, naming it.
    let mut bad = RelayConfig::from_toml(
        &std::fs::read_to_string(stack.dir.path().join("relay.toml")).unwrap(),
        "relay.toml",
    )
    .unwrap();
    bad.paths[1].modem = Some(IMEI0.into());
    // Nothing that would meet the running relay's listeners or rules.
    bad.intercept = InterceptConfig::default();
    bad.intercept.socks5 = Some(parsed("127.0.0.1:1081"));
    bad.dns = Default::default();
    bad.metrics.listen = None;
    let file = stack.dir.path().join("bad-modem.toml");
    write_relay_config(&file, &bad);
    let (code, text) = relay_once(&bed, &file);
    assert_ne!(code, Some(0), "{text}");
    assert!(
        text.contains("path \"p1\"") && text.contains(IMEI0) && text.contains("\"path1\""),
        "{text}"
    );
}
