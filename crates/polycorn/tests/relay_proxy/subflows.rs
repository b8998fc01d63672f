//! Subflows through outages and idle times: paths blacked out, subflows refreshed or replaced
//! when idle, timed out or backed off, and the probes of an idle train.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::bed::*;
use crate::support::*;

#[test]
fn transfers_survive_one_path_down_10s_and_all_paths_down_20s() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("c", 40, 20);
    start_server(&bed);
    let stack = start_stack(&bed, "polycorn", "hrsch", 2);
    transfer_with_outage(
        &bed,
        &stack,
        &["path0"],
        Duration::from_secs(3),
        Duration::from_secs(10),
    );
    // The proxy moved what path 0 held to path 1: at once when it found the path failed (its
    // log names the path as the relay's config does; the name came in the relay's Hello), or a
    // few chunks at a time while the path's queue was stuck, when the relay replaced the
    // subflow first (counted in the metrics only).
    let log = stack.proxy.log();
    let reinjected_on_p1 = scrape_metrics(&bed.ns("proxy")).lines().any(|l| {
        l.starts_with("polycorn_path_reinjected_bytes_total{")
            && l.contains("path=\"p1\"")
            && l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) > Some(0.0)
    });
    assert!(
        log.lines()
            .any(|l| l.contains("reinjected a path's unacknowledged chunks")
                && l.contains("path=0 path_name=p0"))
            || reinjected_on_p1,
        "{}",
        tail(&log)
    );
    transfer_with_outage(
        &bed,
        &stack,
        &["path0", "path1"],
        Duration::from_secs(3),
        Duration::from_secs(20),
    );
    eprintln!("logs in {}", stack.dir.path().display());
}

/// A short blackout of an idle path (only probes in flight) cuts its subflow's slow-start
/// threshold to a few segments; the relay replaces that subflow with a fresh connection once
/// the path is back and idle, and traffic afterwards is byte-exact.
#[test]
fn idle_path_blackout_refreshes_its_subflow() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("f", 40, 20);
    start_server(&bed);
    let stack = start_stack(&bed, "polycorn", "minrtt", 2);
    std::thread::sleep(Duration::from_secs(2));
    {
        // Long enough for two RTOs of the probes in flight (which collapse the slow-start
        // threshold), and short enough that the second retransmission (about 0.7 s after the
        // first loss) gets through: the path then never stays silent for the stall time
        // (1.5 s), so the watchdog does not replace the subflow first. A 1.2 s blackout
        // pushed the next retransmission to about 1.7 s and raced the watchdog.
        let _b = Blackhole::new(&bed.ns("relay"), &["path0"]);
        std::thread::sleep(Duration::from_millis(650));
    }
    wait_for_relay_log(
        &stack,
        "congestion state collapsed",
        Some((
            "path silent",
            "the watchdog replaced the subflow before the refresh could",
        )),
        "no refresh after an idle blackout",
    );
    fetch_ok(&bed, &stack, KB, 8 * MB, "transfer after the refresh");
}

/// A timeout at the proxy's end of an idle subflow (its probes' answers lost for a moment,
/// the relay's probes and pure acknowledgements getting through): the proxy asks for a fresh
/// connection (protocol 4), the relay replaces the subflow, and traffic afterwards is
/// byte-exact. The relay's own socket often times out too (acknowledgements ride on the lost
/// answers), and its own check may then replace the subflow first; either replacement counts.
#[test]
fn a_timeout_at_the_proxys_end_of_an_idle_subflow_gets_it_refreshed_as_the_proxy_asks() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("ra", 40, 20);
    start_server(&bed);
    let stack = start_stack(&bed, "polycorn", "minrtt", 2);
    std::thread::sleep(Duration::from_secs(2));
    {
        // The proxy's data on path 0 (probes and their answers) is lost for 650 ms: at least
        // one retransmission timeout there, while the path never stays silent for the relay's
        // stall time (as in `idle_path_blackout_refreshes_its_subflow`).
        let _b = Blackhole::incoming_data(&bed.ns("relay"), "path0", 7700);
        std::thread::sleep(Duration::from_millis(650));
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let relay = stack.relay.log();
        if relay.contains("replaced it with a fresh connection as the proxy asked")
            || relay
                .contains("congestion state collapsed; replaced it with a fresh connection path=p0")
        {
            break;
        }
        assert!(
            !relay.contains("path silent"),
            "the watchdog replaced the subflow before a refresh could:\n{}",
            tail(&relay)
        );
        assert!(
            Instant::now() < deadline,
            "no refresh after the proxy's timeout:\n{}\nproxy:\n{}",
            tail(&relay),
            tail(&stack.proxy.log())
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let proxy = stack.proxy.log();
    assert!(
        proxy.contains("asked the relay for a fresh connection")
            && proxy.contains("path=0 path_name=p0"),
        "the proxy did not say it asked, naming the path:\n{}",
        tail(&proxy)
    );
    fetch_ok(&bed, &stack, KB, 8 * MB, "transfer after the refresh");
}

/// The local port of the relay's subflow to `proxy` (an established TCP connection).
fn subflow_port(ns: &str, proxy: &str) -> u16 {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "ss", "-Htn", "state", "established"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let ports: Vec<u16> = text
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (local, peer) = (f.get(2)?, f.get(3)?);
            (*peer == proxy).then(|| local.rsplit(':').next()?.parse().ok())?
        })
        .collect();
    assert_eq!(ports.len(), 1, "one subflow to {proxy}:\n{text}");
    ports[0]
}

/// After a blackout the proxy's frames can get through again while the relay's own TCP on
/// that path still waits out a backed-off retransmission timer. Here only the data the relay
/// sends on path0's subflow is lost, on its way into the proxy (its acknowledgements and any
/// new connection pass), so
/// the path keeps receiving while that subflow backs off: the relay replaces it (it is
/// neither silent nor idle), and traffic afterwards is byte-exact.
#[test]
fn backed_off_subflow_on_a_working_path_is_replaced() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("g", 40, 20);
    start_server(&bed);
    let stack = start_stack(&bed, "polycorn", "minrtt", 2);
    std::thread::sleep(Duration::from_secs(2));
    let port = subflow_port(&bed.ns("relay"), "10.100.0.2:7700");
    {
        // Probes go out every 200 ms, so the relay always has data in flight to back off on.
        // Its RTOs come about 0.24, 0.72, 1.7 and 3.6 s after the first loss.
        let _b = Blackhole::incoming_data(&bed.ns("proxy"), "path0", port);
        std::thread::sleep(Duration::from_secs(4));
    }
    wait_for_relay_log(
        &stack,
        "waits in RTO back-off",
        Some((
            "path silent",
            "the path kept receiving, yet the watchdog took it for silent",
        )),
        "the backed-off subflow was not replaced",
    );
    fetch_ok(
        &bed,
        &stack,
        256 * KB,
        4 * MB,
        "transfer after the replacement",
    );
}

/// A train with nobody on board (in the depot, at night) costs its SIMs little: a while after
/// the last passenger connection (`idle_probe_after_s`, 10 s here, 120 s by default), both ends
/// probe each path every 5 s (`idle_probe_s`) instead of every 200 ms, no subflow is replaced
/// for seeming silent meanwhile, and the first connection afterwards is carried.
#[test]
fn an_idle_train_probes_its_paths_every_few_seconds() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("ip", 40, 20);
    start_server(&bed);
    let stack = start_with_keys(
        &bed,
        |r| r.idle_probe_after_s = 10,
        |p| p.idle_probe_after_s = 10,
    );
    fetch_ok(&bed, &stack, KB, MB, "before the idle spell");
    let relay_ns = bed.ns("relay");
    let rate = |secs: u64| -> Vec<(f64, f64)> {
        traffic_during(&relay_ns, || std::thread::sleep(Duration::from_secs(secs)))
            .into_iter()
            .map(|(p, b)| (p as f64 / secs as f64, b as f64 / secs as f64))
            .collect()
    };
    // Within the first 10 s: probes every 200 ms from each end.
    std::thread::sleep(Duration::from_secs(1));
    let busy = rate(7);
    std::thread::sleep(Duration::from_secs(5));
    let ups = stack.relay.log().matches("subflow up").count();
    let idle = rate(15);
    eprintln!("per path (packets/s, bytes/s): probing every 200 ms {busy:?}, idle {idle:?}");
    for (p, ((bp, _), (ip, ib))) in busy.iter().zip(&idle).enumerate() {
        assert!(
            *bp > 20.0,
            "path{p}: {bp} packets/s while probing every 200 ms"
        );
        // Each end's probe every 5 s: probe, answer and acknowledgement, about 1.2 packets/s.
        assert!(
            *ip < 3.0 && *ib < 400.0,
            "path{p} idle: {ip} packets/s, {ib} bytes/s"
        );
    }
    assert_eq!(
        stack.relay.log().matches("subflow up").count(),
        ups,
        "a subflow was replaced while idle:\n{}",
        tail(&stack.relay.log())
    );
    fetch_ok(
        &bed,
        &stack,
        64 * KB,
        4 * MB,
        "the first connection after the idle spell",
    );
}

/// With `idle_refresh = "used"`, a subflow that carried a download is replaced by a fresh
/// connection once the path is idle (the proxy's congestion state for it is from the past),
/// and traffic afterwards is byte-exact.
#[test]
fn used_subflow_is_refreshed_when_idle_if_configured() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("h", 40, 20);
    start_server(&bed);
    let stack = start_stack_with(
        &bed,
        "polycorn",
        "minrtt",
        2,
        |r, _| r.relay.idle_refresh = IdleRefresh::Used,
        tempfile::tempdir().unwrap(),
    );
    // Subflows are at least 5 s old before a refresh; 4 MB crosses both paths.
    std::thread::sleep(Duration::from_secs(4));
    fetch_ok(&bed, &stack, KB, 4 * MB, "first download");
    wait_for_relay_log(
        &stack,
        "carried data under past conditions",
        None,
        "no refresh of a used idle subflow",
    );
    fetch_ok(&bed, &stack, KB, 8 * MB, "download after the refresh");
}
