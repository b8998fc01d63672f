//! Emulator acceptance tests in real network namespaces with real kernel TCP.
//!
//! They need root (namespaces, TUN). Outside CI a non-root run skips them with a note; under
//! `CI=true` a non-root run fails, so CI can never silently skip them. Tests share one mutex:
//! they measure delays and rates, and two emulators on two cores would disturb each other.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use polycorn_emu::forward::{DirectionModel, Emulator, PathModel};
use polycorn_emu::netns::{exec_in, list_namespaces};
use polycorn_emu::testbed::{self, TestbedSpec};
use polycorn_link::link::{LinkConfig, OutageMode, QueueLimit};
use polycorn_link::trace::{DelaySeries, DeliveryTrace, Outages};

static SERIAL: Mutex<()> = Mutex::new(());

fn can_run() -> bool {
    let root = nix::unistd::geteuid().is_root();
    if !root && std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("testbed tests need root and CI=true forbids skipping them");
    }
    if !root {
        eprintln!("skipping: testbed tests need root");
    }
    root
}

/// A testbed with an emulator thread serving it; the emulator is stopped and the testbed
/// removed even if the test panics (the [`testbed::Guard`] removes it while unwinding).
struct Bed {
    spec: TestbedSpec,
    stop: Arc<AtomicBool>,
    emu: Option<thread::JoinHandle<()>>,
    guard: Option<testbed::Guard>,
}

impl Bed {
    fn new(name: &str, models: Vec<PathModel>) -> Bed {
        let spec = TestbedSpec {
            name: name.into(),
            paths: models.len(),
        };
        let guard = Some(testbed::Guard::replace(&spec).expect("testbed up"));
        let stop = Arc::new(AtomicBool::new(false));
        let mut emu = Emulator::attach(&spec, &models, stop.clone()).expect("attach emulator");
        let emu = Some(thread::spawn(move || {
            emu.run().expect("emulator run");
        }));
        Bed {
            spec,
            stop,
            emu,
            guard,
        }
    }
    fn relay(&self) -> String {
        self.spec.ns("relay")
    }
    fn proxy(&self) -> String {
        self.spec.ns("proxy")
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.emu.take() {
            let _ = h.join();
        }
        if let Some(g) = self.guard.take() {
            if std::thread::panicking() {
                drop(g);
            } else {
                g.down().expect("testbed down");
            }
        }
    }
}

fn constant(rate_bps: u64, delay_ms: u64, queue_packets: u64) -> DirectionModel {
    let mut cfg = LinkConfig::new(DeliveryTrace::from_rate_series(&[(1000, rate_bps)]).unwrap());
    cfg.delay = DelaySeries::constant(delay_ms * 1000);
    cfg.queue = QueueLimit::Packets(queue_packets);
    DirectionModel::Shaped(cfg)
}

fn both(d: DirectionModel) -> PathModel {
    PathModel {
        uplink: d.clone(),
        downlink: d,
    }
}

/// Per-packet RTTs of `count` pings from the relay to the proxy side, ms.
fn ping_rtts_ms(bed: &Bed, count: u32) -> Vec<f64> {
    let out = exec_in(
        &bed.relay(),
        "ping",
        &[
            "-n",
            "-c",
            &count.to_string(),
            "-i",
            "0.02",
            "-I",
            "10.100.0.1",
            "10.100.0.2",
        ],
    )
    .expect("ping");
    // 64 bytes from 10.100.0.2: icmp_seq=1 ttl=64 time=40.3 ms
    let rtts: Vec<f64> = out
        .lines()
        .filter_map(|l| l.split("time=").nth(1))
        .map(|t| t.trim_end_matches(" ms").trim().parse().expect("ping time"))
        .collect();
    assert_eq!(rtts.len(), count as usize, "ping lost replies:\n{out}");
    rtts
}

/// Run iperf3 from relay (path 0) to proxy; return received goodput per 1 s interval, Mbit/s.
fn iperf_intervals(bed: &Bed, secs: u32, port: u16) -> Vec<f64> {
    let proxy = bed.proxy();
    let port_s = port.to_string();
    let server = thread::spawn(move || {
        exec_in(
            &proxy,
            "iperf3",
            &["-s", "-1", "-J", "-B", "10.100.0.2", "-p", &port_s],
        )
    });
    thread::sleep(Duration::from_millis(300));
    exec_in(
        &bed.relay(),
        "iperf3",
        &[
            "-c",
            "10.100.0.2",
            "-B",
            "10.100.0.1",
            "-p",
            &port.to_string(),
            "-t",
            &secs.to_string(),
            "-C",
            "cubic",
            "-J",
        ],
    )
    .expect("iperf3 client");
    // The receiver's intervals: the sender's count bytes handed to its socket, which run ahead
    // of the link while the queue and the send buffer fill.
    let out = server.join().unwrap().expect("iperf3 server");
    let v: serde_json::Value = serde_json::from_str(&out).expect("iperf3 server JSON");
    v["intervals"]
        .as_array()
        .expect("intervals")
        .iter()
        .map(|i| i["sum"]["bits_per_second"].as_f64().unwrap() / 1e6)
        .collect()
}

#[test]
fn idle_ping_rtt_is_within_1ms_of_configured_delay() {
    if !can_run() {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let bed = Bed::new(
        "pct-ping",
        vec![
            both(constant(100_000_000, 20, 100)),
            both(constant(100_000_000, 35, 100)),
        ],
    );
    // Warm up (first packets can meet cold caches and idle CPUs), then measure.
    ping_rtts_ms(&bed, 5);
    // The median, not the mean: this machine is a VM whose host now and then preempts it for
    // several ms, which is neither the emulator's delay nor something it could avoid; one such
    // sample moves the mean of 100 by 0.1 ms or more. A busy host can also slow a whole series
    // of 100 (seen once in CI: min 40.3, median 41.3, max 55 ms), so a series outside the
    // bound is measured again, up to three series. Delay the emulator adds itself is in every
    // series, so it still fails.
    let mut seen = Vec::new();
    for _ in 0..3 {
        let mut rtts = ping_rtts_ms(&bed, 100);
        rtts.sort_by(f64::total_cmp);
        let mean = rtts.iter().sum::<f64>() / rtts.len() as f64;
        let median = (rtts[49] + rtts[50]) / 2.0;
        let line = format!(
            "min {:.3} median {median:.3} mean {mean:.3} max {:.3} ms",
            rtts[0], rtts[99]
        );
        println!("configured RTT 40 ms, measured {line}");
        seen.push(line);
        if (median - 40.0).abs() <= 1.0 {
            return;
        }
    }
    panic!("ping median not within 1 ms of 40 ms in any of 3 series: {seen:?}");
}

#[test]
fn constant_20mbit_path_gives_18_to_20_mbit_tcp_goodput() {
    if !can_run() {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let bed = Bed::new("pct-rate", vec![both(constant(20_000_000, 20, 200))]);
    let iv = iperf_intervals(&bed, 8, 5301);
    // Skip slow start: the mean of seconds 3..8.
    let steady = &iv[3..];
    let mean = steady.iter().sum::<f64>() / steady.len() as f64;
    println!("per-second goodput {iv:.2?}; steady mean {mean:.2} Mbit/s");
    assert!((18.0..=20.0).contains(&mean), "goodput {mean} Mbit/s");
}

#[test]
fn outage_stalls_tcp_with_rto_backoff() {
    if !can_run() {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // Outage from 3 s to 8 s after the emulator starts, in both directions, packets dropped.
    let mut cfg = LinkConfig::new(DeliveryTrace::from_rate_series(&[(1000, 20_000_000)]).unwrap());
    cfg.delay = DelaySeries::constant(20_000);
    cfg.queue = QueueLimit::Packets(200);
    cfg.outages = Outages::new(vec![(3_000, 8_000)]).unwrap();
    cfg.outage_mode = OutageMode::Drop;
    let bed = Bed::new("pct-out", vec![both(DirectionModel::Shaped(cfg))]);
    let relay = bed.relay();
    let watcher = thread::spawn(move || {
        // Sample the sender's RTO back-off (ss shows `backoff:N`) every 200 ms for 10 s.
        let mut max_backoff = 0u32;
        for _ in 0..50 {
            if let Ok(out) = exec_in(&relay, "ss", &["-tin", "dst", "10.100.0.2"]) {
                for tok in out.split_whitespace() {
                    if let Some(n) = tok.strip_prefix("backoff:") {
                        max_backoff = max_backoff.max(n.parse().unwrap_or(0));
                    }
                }
            }
            thread::sleep(Duration::from_millis(200));
        }
        max_backoff
    });
    let iv = iperf_intervals(&bed, 12, 5302);
    let max_backoff = watcher.join().unwrap();
    println!("per-second goodput {iv:.2?}; max RTO backoff {max_backoff}");
    // Seconds 4..7 lie entirely inside the outage (iperf starts ~0.3 s after the emulator).
    assert!(
        iv[4..7].iter().all(|m| *m < 0.1),
        "data flowed during the outage: {iv:?}"
    );
    assert!(max_backoff >= 2, "no RTO back-off seen (max {max_backoff})");
    assert!(
        iv[10..].iter().any(|m| *m > 5.0),
        "TCP did not recover after the outage: {iv:?}"
    );
}

#[test]
fn down_leaves_nothing_behind_and_is_idempotent() {
    if !can_run() {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let spec = TestbedSpec {
        name: "pct-down".into(),
        paths: 3,
    };
    let _ = testbed::down(&spec.name);
    testbed::up(&spec).unwrap();
    assert!(
        matches!(testbed::up(&spec), Err(testbed::TestbedError::Exists(_))),
        "a second up must refuse"
    );
    // A process left inside a namespace (a killed run's relay) is stopped by `down`, or it
    // would keep the namespace alive after `ip netns del`.
    let mut stray = std::process::Command::new("ip")
        .args(["netns", "exec", &spec.ns("relay"), "sleep", "300"])
        .spawn()
        .unwrap();
    thread::sleep(Duration::from_millis(300));
    testbed::down(&spec.name).unwrap();
    let status = stray.wait().unwrap();
    assert!(
        !status.success(),
        "the stray process was not stopped: {status}"
    );
    testbed::down(&spec.name).unwrap();
    let left: Vec<String> = list_namespaces()
        .unwrap()
        .into_iter()
        .filter(|n| n.starts_with("pct-down-"))
        .collect();
    assert!(left.is_empty(), "namespaces left: {left:?}");
    assert!(!spec.state_file().exists());
}

/// The namespaces of testbed `name` that exist.
fn namespaces_of(name: &str) -> Vec<String> {
    list_namespaces()
        .unwrap()
        .into_iter()
        .filter(|n| n.starts_with(&format!("{name}-")))
        .collect()
}

#[test]
fn a_guard_replaces_a_leftover_testbed_and_removes_it_on_panic() {
    if !can_run() {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let spec = TestbedSpec {
        name: "pct-guard".into(),
        paths: 1,
    };
    let _ = testbed::down(&spec.name);
    // A crashed run's leftover: built, never removed.
    testbed::up(&spec).unwrap();
    assert!(
        matches!(
            testbed::Guard::up(&spec),
            Err(testbed::TestbedError::Exists(_))
        ),
        "Guard::up must refuse an existing testbed"
    );
    let guard = testbed::Guard::replace(&spec).expect("replace the leftover");
    assert_eq!(guard.name(), "pct-guard");
    assert_eq!(namespaces_of(&spec.name).len(), 4);
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let _guard = guard;
        panic!("a test failing while the testbed is up");
    }));
    assert!(panicked.is_err());
    let left = namespaces_of(&spec.name);
    assert!(left.is_empty(), "namespaces left after a panic: {left:?}");
    assert!(!spec.state_file().exists());
    // An adopted testbed (built by someone else) is removed on drop as well.
    testbed::up(&spec).unwrap();
    drop(testbed::Guard::adopt(&spec.name));
    let left = namespaces_of(&spec.name);
    assert!(left.is_empty(), "namespaces left after drop: {left:?}");
}

#[test]
fn invalid_specs_are_refused() {
    for (name, paths) in [("", 2), ("bad name", 2), ("x", 0), ("x", 17), ("-x", 1)] {
        let e = testbed::up(&TestbedSpec {
            name: name.into(),
            paths,
        })
        .unwrap_err();
        assert!(
            matches!(e, testbed::TestbedError::Spec(_)),
            "{name:?}/{paths}: {e}"
        );
    }
}

#[test]
fn trip_context_is_replayed_to_the_relay_over_gpsd_json_in_step() {
    use polycorn_emu::context::ContextServer;
    use polycorn_emu::netns::InNamespace;
    use polycorn_link::trip::{Trip, TripConfig};
    use std::io::{BufRead, BufReader, Write};
    if !can_run() {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let trip = Trip::generate(&TripConfig::ktx(2, 3)).unwrap();
    let models = polycorn_emu::models::from_trip(&trip, Some(QueueLimit::Bytes(375_000))).unwrap();
    let bed = Bed::new("pct-ctx", models);
    let names: Vec<String> = trip.paths.iter().map(|p| p.name.clone()).collect();
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], 2947));
    let server = ContextServer::start(
        Some(&bed.relay()),
        addr,
        trip.context.clone(),
        names,
        bed.stop.clone(),
    )
    .unwrap();
    // A gpsd client in the relay namespace.
    let stream = {
        let _inside = InNamespace::enter(&bed.relay()).unwrap();
        std::net::TcpStream::connect(server.addr()).unwrap()
    };
    stream
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    let started = std::time::Instant::now();
    (&stream)
        .write_all(b"?WATCH={\"enable\":true,\"json\":true};\n")
        .unwrap();
    let mut lines = BufReader::new(&stream).lines();
    // (TPV, POLYCORN, arrival) per row; rows are identified by POLYCORN's t_ms.
    let mut reports: Vec<(serde_json::Value, serde_json::Value, Duration)> = Vec::new();
    let mut last_tpv = None;
    while reports.len() < 3 {
        let line = lines.next().expect("stream ended").expect("read");
        let v: serde_json::Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("bad JSON {line}: {e}"));
        match v["class"].as_str().unwrap() {
            "TPV" => last_tpv = Some(v),
            "POLYCORN" => reports.push((
                last_tpv.take().expect("TPV before POLYCORN"),
                v,
                started.elapsed(),
            )),
            _ => {}
        }
    }
    // The first report is the current fix, sent at once; then one row per second.
    assert!(
        reports[0].2 < Duration::from_millis(500),
        "first fix after {:?}",
        reports[0].2
    );
    for (k, (tpv, cells, _)) in reports.iter().enumerate() {
        let t_ms = cells["t_ms"].as_u64().unwrap();
        let row = trip
            .context
            .iter()
            .find(|r| r.t_ms == t_ms)
            .expect("a row of the trip");
        if k > 0 {
            assert_eq!(
                t_ms,
                reports[k - 1].1["t_ms"].as_u64().unwrap() + 1000,
                "rows in order, none skipped"
            );
        }
        assert!(
            (tpv["lat"].as_f64().unwrap() - row.lat).abs() < 1e-6,
            "{tpv}"
        );
        assert!(
            (tpv["lon"].as_f64().unwrap() - row.lon).abs() < 1e-6,
            "{tpv}"
        );
        assert!(
            (tpv["speed"].as_f64().unwrap() - row.speed_mps).abs() < 0.01,
            "{tpv}"
        );
        assert_eq!(
            cells["carriers"][0]["cell"].as_u64(),
            row.carriers[0].cell.map(u64::from)
        );
        assert_eq!(cells["carriers"][1]["name"].as_str(), Some("SKT"));
    }
    // In step with the emulator's clock: consecutive rows one second apart.
    let gap = reports[2].2.saturating_sub(reports[1].2);
    assert!(
        gap > Duration::from_millis(900) && gap < Duration::from_millis(1100),
        "rows {gap:?} apart"
    );
    drop(lines);
    drop(stream);
    bed.stop.store(true, Ordering::Relaxed);
    drop(server);
}
