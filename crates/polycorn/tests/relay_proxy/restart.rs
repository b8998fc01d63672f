//! Stops, restarts and crashes of either end: what the other end does, drains, and a relay
//! that lost power.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::bed::*;
use crate::support::*;

/// The proxy crashes and is started again while the relay keeps running and a download is in
/// flight. The new proxy knows nothing of the relay's session: the download is reset on the
/// relay as soon as the new proxy answers (not left hanging), and every later connection works.
#[test]
fn a_proxy_crash_and_restart_resets_the_connections_it_carried_and_new_ones_work() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("r", 40, 20);
    start_server(&bed);
    let stack = start_stack(&bed, "polycorn", "minrtt", 2);
    // A few connections first, so both ends' control frames have been numbered well past 0.
    for i in 0..3 {
        fetch_ok(
            &bed,
            &stack,
            KB,
            64 * KB,
            &format!("connection {i} before the restart"),
        );
    }
    // A download of about 80 s at 2 × 40 Mbit/s, in flight during the restart.
    let ns = bed.ns("client");
    let long = std::thread::spawn(move || {
        in_ns(&ns, move || {
            Box::pin(async move {
                let t0 = Instant::now();
                let r = tokio::time::timeout(
                    Duration::from_secs(60),
                    one(Via::Transparent4, KB, 800 * MB, None),
                )
                .await;
                (
                    r.map(|r| r.map(|_| ()).map_err(|e| e.to_string())),
                    t0.elapsed(),
                )
            })
        })
    });
    std::thread::sleep(Duration::from_secs(3));
    let Stack {
        dir,
        mut proxy,
        relay,
    } = stack;
    let config = dir.path().join("proxy.toml");
    // Killed: an orderly stop would tell the relay (see
    // `a_stopping_relay_or_proxy_tells_the_other_end_at_once`); here the relay learns it only
    // from the new proxy's Hello.
    proxy.crash();
    drop(proxy);
    let restarted = Instant::now();
    let mut proxy = Daemon::start(
        &bed.ns("proxy"),
        "proxy",
        &config,
        dir.path().join("proxy2.log"),
    );
    proxy.wait_for("proxy running", 1);
    let stack = Stack { dir, proxy, relay };
    wait_for_relay_log(
        &stack,
        "the proxy is another one, or lost this session's state",
        None,
        "the relay did not notice the new proxy",
    );
    let (r, took) = long.join().unwrap();
    match r {
        Ok(Err(_)) => {}
        other => panic!(
            "the download the old proxy carried should end in a reset, got {other:?} after \
             {took:?}\n{}",
            tail(&stack.relay.log())
        ),
    }
    assert!(
        restarted.elapsed() < Duration::from_secs(30),
        "the reset took {:?} after the restart",
        restarted.elapsed()
    );
    for i in 0..5 {
        fetch_ok(
            &bed,
            &stack,
            KB,
            256 * KB,
            &format!("connection {i} after the restart"),
        );
    }
}

/// `systemctl stop` on either end tells the other one (a Close frame, then TLS close_notify):
/// a stopping relay has the proxy close its connections to the servers at once, and a
/// stopping proxy has the relay reset its passengers' connections at once — both far sooner
/// than the two-minute hold time configured here, which would otherwise keep them. Neither
/// side logs a warning about the other's subflows for it; a passenger connection opened while
/// no proxy answers is carried once the restarted proxy is up.
#[test]
fn a_stopping_relay_or_proxy_tells_the_other_end_at_once() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("q", 40, 20);
    start_server(&bed);
    let mut stack = start_with_keys(&bed, |r| r.hold_time_s = 120, |p| p.hold_time_s = 120);
    fetch_ok(&bed, &stack, KB, 64 * KB, "a connection first");
    let proxy_ns = bed.ns("proxy");

    // 1. The relay stops.
    let download = stop_during_a_download(&bed, &mut stack, true);
    let took = wait_until(
        30,
        "the proxy closes its connection to the server",
        || stack_log(&stack),
        || established_to(&proxy_ns, "10.0.2.2") == 0,
    );
    eprintln!("relay stop: server connection closed {took:?} later (hold time 120 s)");
    let r = download.join().unwrap();
    assert_cut(&r, &stack);
    wait_until(
        10,
        "the proxy logs the relay's close",
        || stack_log(&stack),
        || {
            stack
                .proxy
                .log()
                .contains("the relay closed the session; its passengers' connections were reset")
        },
    );
    let page = scrape_metrics(&proxy_ns);
    let closed = "polycorn_relay_sessions_ended_total{relay=\"polycorn-relay\",how=\"closed\"} 1";
    assert!(
        page.lines().any(|l| l == closed),
        "no `{closed}` in:\n{page}"
    );
    let plog_text = stack.proxy.log();
    let warned: Vec<&str> = plog_text
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("subflow ended"))
        .collect();
    assert!(
        warned.is_empty(),
        "a relay's orderly stop is no warning:\n{}",
        warned.join("\n")
    );
    assert!(
        !stack.relay.log().contains("WARN"),
        "the relay's own stop logs no warning:\n{}",
        tail(&stack.relay.log())
    );

    // 2. The relay runs again; then the proxy stops.
    stack.start_again(&bed, "relay", "relay2.log");
    stack.relay.wait_for("subflow up", 2);
    fetch_ok(
        &bed,
        &stack,
        KB,
        64 * KB,
        "a connection through the new relay",
    );
    let download = stop_during_a_download(&bed, &mut stack, false);
    let stopped = Instant::now();
    let r = download.join().unwrap();
    let took = stopped.elapsed();
    assert_cut(&r, &stack);
    assert!(
        took < Duration::from_secs(30),
        "the passenger's connection was reset {took:?} after the proxy stopped (hold time 120 s)"
    );
    eprintln!("proxy stop: passenger's connection reset {took:?} later (hold time 120 s)");
    wait_for_relay_log(
        &stack,
        "the proxy closed the session",
        None,
        "the relay did not log the proxy's close",
    );
    // 3. A passenger connects while no proxy answers, then the proxy comes back: that
    // connection is carried by the new proxy, and so are the next ones.
    let waiting = download_in_background(&bed, MB, 60);
    std::thread::sleep(Duration::from_secs(1));
    stack.start_again(&bed, "proxy", "proxy2.log");
    stack.proxy.wait_for("proxy running", 1);
    let r = waiting.join().unwrap();
    assert!(
        matches!(r, Ok(Ok(()))),
        "the connection opened while no proxy answered: {r:?}\n{}",
        stack_log(&stack)
    );
    for i in 0..3 {
        fetch_ok(
            &bed,
            &stack,
            KB,
            256 * KB,
            &format!("connection {i} through the restarted proxy"),
        );
    }
}

/// Starts a download of about 80 s, waits until the proxy has connected it to the server, then
/// stops the relay (`relay`) or the proxy with SIGTERM and checks that it exited cleanly.
/// Returns the download's thread.
fn stop_during_a_download(
    bed: &Bed,
    stack: &mut Stack,
    relay: bool,
) -> std::thread::JoinHandle<Result<Result<(), String>, tokio::time::error::Elapsed>> {
    let download = download_reaching_the_server(bed, stack, 800 * MB, 100);
    std::thread::sleep(Duration::from_secs(2));
    let daemon = if relay {
        &mut stack.relay
    } else {
        &mut stack.proxy
    };
    let st = daemon.stop();
    assert!(st.success(), "exit: {st}\n{}", tail(&daemon.log()));
    download
}

/// With `drain_s`, an orderly stop lets the connections open at that moment finish before the
/// session closes: a download under way when the proxy is stopped completes, byte for byte,
/// and the proxy exits after it; one that cannot finish within the relay's drain is reset at
/// its end.
#[test]
fn a_stop_with_a_drain_lets_open_connections_finish() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("dr", 40, 20);
    start_server(&bed);
    let mut stack = start_with_keys(&bed, |r| r.drain_s = 2, |p| p.drain_s = 8);
    fetch_ok(&bed, &stack, KB, 64 * KB, "a connection first");

    // 1. The proxy stops during a 20 MB download (about 2 s over two 40 Mbit/s paths).
    let download = download_reaching_the_server(&bed, &stack, 20 * MB, 60);
    let st = stack.proxy.stop();
    assert!(st.success(), "exit: {st}\n{}", tail(&stack.proxy.log()));
    let r = download.join().unwrap();
    assert!(
        matches!(r, Ok(Ok(()))),
        "the download under way when the proxy stopped: {r:?}\n{}",
        stack_log(&stack)
    );
    let plog = stack.proxy.log();
    assert!(
        plog.contains("draining: the flows open now may finish") && plog.contains("flows_reset=0"),
        "{}",
        tail(&plog)
    );

    // 2. The proxy runs again; the relay stops during a download too long for its 2 s drain.
    stack.start_again(&bed, "proxy", "proxy2.log");
    stack.proxy.wait_for("subflow up", 2);
    let download = stop_during_a_download(&bed, &mut stack, true);
    let r = download.join().unwrap();
    assert_cut(&r, &stack);
    let rlog = stack.relay.log();
    assert!(
        rlog.contains("draining: the passengers' connections open now may finish")
            && rlog.contains("drained flows_reset=1"),
        "{}",
        tail(&rlog)
    );
}

/// While the proxy drains before it stops, the relay holds the passenger connections it
/// accepts for the next proxy instead of opening them at the one that stops: a long download
/// that starts during the drain completes, byte for byte, through the proxy started after it
/// (carried by the old one it would have been reset at the drain's end), while the download
/// open when the stop began is cut at the drain's end as before.
#[test]
fn a_passenger_connecting_while_the_proxy_drains_is_carried_by_the_next_proxy() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("dn", 40, 20);
    start_server(&bed);
    let mut stack = start_with_keys(&bed, |_| {}, |p| p.drain_s = 4);
    fetch_ok(&bed, &stack, KB, 64 * KB, "a connection first");
    let open = download_reaching_the_server(&bed, &stack, 800 * MB, 60);
    stack.proxy.terminate();
    wait_for_relay_log(
        &stack,
        "the proxy drains before it stops",
        None,
        "the relay was not told of the drain",
    );
    // About 10 s over the two paths: far longer than what is left of the drain.
    let held = download_in_background(&bed, 100 * MB, 60);
    let st = stack.proxy.wait_exit();
    assert!(st.success(), "exit: {st}\n{}", tail(&stack.proxy.log()));
    let r = open.join().unwrap();
    assert_cut(&r, &stack);
    let plog = stack.proxy.log();
    assert!(
        plog.contains("draining: the flows open now may finish") && plog.contains("flows_reset=1"),
        "{}",
        tail(&plog)
    );
    stack.start_again(&bed, "proxy", "proxy2.log");
    stack.proxy.wait_for("proxy running", 1);
    let r = held.join().unwrap();
    assert!(
        matches!(r, Ok(Ok(()))),
        "the download started during the drain: {r:?}\n{}",
        stack_log(&stack)
    );
    let page = scrape_metrics(&bed.ns("relay"));
    assert!(
        page.lines().any(|l| l == "polycorn_flows_held_total 1"),
        "{page}"
    );
    fetch_ok(&bed, &stack, KB, MB, "a connection through the next proxy");
}

/// The local ports of every subflow the relay in `ns` has to a proxy listening on port 7700.
fn subflow_ports(ns: &str) -> Vec<u16> {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "ss", "-Htn", "state", "established"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (local, peer) = (f.get(2)?, f.get(3)?);
            peer.ends_with(":7700")
                .then(|| local.rsplit(':').next()?.parse().ok())?
        })
        .collect()
}

/// A train's gateway loses power in the middle of a download: from that moment nothing of its
/// subflows reaches the proxy — no FIN, no RST, no answer to the proxy's probes (every packet
/// of those connections is dropped at the proxy's devices) — and a few seconds later the
/// gateway is back with a new relay process. The proxy ends the silent session as soon as the
/// new one opens (every path of it silent for the stall time, 1.5 s), resetting its connection
/// to the server far sooner than the two-minute hold time, and the new relay carries
/// passengers. (The same branch after a crash, where the kernel closes the subflows, is
/// `reload::two_trains_share_one_proxy_and_one_is_revoked_alone`.)
#[test]
fn a_relay_that_lost_power_has_its_silent_session_ended_when_it_comes_back() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("pw", 40, 20);
    start_server(&bed);
    let mut stack = start_with_keys(&bed, |r| r.hold_time_s = 120, |p| p.hold_time_s = 120);
    fetch_ok(&bed, &stack, KB, 64 * KB, "a connection first");
    let proxy_ns = bed.ns("proxy");
    let download = download_reaching_the_server(&bed, &stack, 800 * MB, 100);
    let ports = subflow_ports(&bed.ns("relay"));
    assert_eq!(ports.len(), 2, "one subflow per path: {ports:?}");
    let set = ports
        .iter()
        .map(u16::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    let chains: String = (0..2)
        .map(|i| {
            format!(
                "  chain in_path{i} {{ type filter hook ingress device \"path{i}\" priority 0; policy accept; meta protocol ip ip protocol tcp tcp sport {{ {set} }} drop; }}\n  chain out_path{i} {{ type filter hook egress device \"path{i}\" priority 0; policy accept; meta protocol ip ip protocol tcp tcp dport {{ {set} }} drop; }}\n"
            )
        })
        .collect();
    let _silence = Blackhole::with_rules(&proxy_ns, &chains);
    // The power goes: the relay dies without a word reaching the proxy.
    let cut = Instant::now();
    stack.relay.crash();
    let r = download.join().unwrap();
    assert_cut(&r, &stack);
    assert_eq!(
        established_to(&proxy_ns, "10.0.2.2"),
        1,
        "the proxy still holds the server connection of the silent session"
    );
    // The gateway boots again.
    std::thread::sleep(Duration::from_secs(3));
    stack.start_again(&bed, "relay", "relay2.log");
    stack.relay.wait_for("subflow up", 2);
    wait_until(
        20,
        "the proxy closes the silent session's connection to the server",
        || stack_log(&stack),
        || established_to(&proxy_ns, "10.0.2.2") == 0,
    );
    let took = cut.elapsed();
    eprintln!("power cut: server connection closed {took:?} later (hold time 120 s, 3 s reboot)");
    assert!(took < Duration::from_secs(30), "{took:?} (hold time 120 s)");
    assert!(
        stack
            .proxy
            .log()
            .contains("the relay opened a new session and its earlier one had every path down"),
        "{}",
        tail(&stack.proxy.log())
    );
    // Silence, not a close: no subflow of the old session ended before it was ended.
    let plog = stack.proxy.log();
    let before = &plog[..plog.find("earlier one had every path down").unwrap()];
    assert!(
        !before.contains("subflow ended"),
        "the old subflows ended on their own, so the power cut was not silent:\n{plog}"
    );
    let page = scrape_metrics(&proxy_ns);
    let restarted =
        "polycorn_relay_sessions_ended_total{relay=\"polycorn-relay\",how=\"restarted\"} 1";
    assert!(
        page.lines().any(|l| l == restarted),
        "no `{restarted}` in:\n{page}"
    );
    fetch_ok(
        &bed,
        &stack,
        KB,
        MB,
        "a connection through the relay that came back",
    );
}
