//! The proxy given as a host name: resolved, followed when it moves, and failover between the
//! proxies a name lists.

use std::process::Command;
use std::time::Duration;

use crate::bed::*;
use crate::support::*;

/// The relay's configuration `relay` with the proxy given as `name` for every path (as an
/// operator writes it).
fn one_proxy_name(relay: &mut RelayConfig, name: &str) {
    relay.relay.proxy = parsed(&format!("{name}:7700"));
    for path in &mut relay.paths {
        path.proxy = None;
    }
}

/// An operator gives the proxy as a host name. Every path reaches the proxy at the address the
/// name resolves to; when the proxy moves (the name points elsewhere and the old address stops
/// answering), the relay looks the name up again and every path reconnects to the new address.
#[test]
fn a_proxy_host_name_is_resolved_and_followed_when_the_proxy_moves() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("n", 40, 20);
    start_server(&bed);
    let name = "proxy.polycorn.test";
    let hosts = NetnsHosts::new(&bed.ns("relay"));
    // The proxy listens on every address: its path-0 and path-1 addresses are both "it".
    hosts.set(name, "10.100.0.2");
    // One name for every path, as an operator writes it.
    let stack = start_edited(&bed, "polycorn", |r| one_proxy_name(r, name), |_| {}, 2);
    let ups = |log: &str, addr: &str| {
        log.lines()
            .filter(|l| {
                l.contains("subflow up")
                    && l.contains(&format!("proxy={name}:7700"))
                    && l.contains(&format!("addr={addr}:7700"))
            })
            .count()
    };
    assert_eq!(
        ups(&stack.relay.log(), "10.100.0.2"),
        2,
        "{}",
        stack.relay.log()
    );
    fetch_ok(&bed, &stack, 256 * KB, 4 * MB, "transfer via the name");

    // The proxy moves: the name now points at its path-1 address, and the old one is dead.
    hosts.set(name, "10.100.1.2");
    let rules: String = ["path0", "path1"]
        .iter()
        .map(|d| {
            format!(
                "  chain in_{d} {{ type filter hook ingress device \"{d}\" priority 0; policy accept; meta protocol ip ip daddr 10.100.0.2 drop; }}\n"
            )
        })
        .collect();
    let _old_gone = Blackhole::with_rules(&bed.ns("proxy"), &rules);
    let took = wait_until(
        90,
        "the paths did not follow the name",
        || stack.relay.log(),
        || ups(&stack.relay.log(), "10.100.1.2") >= 2,
    );
    eprintln!(
        "both paths reconnected to the new address {:.1} s after the move",
        took.as_secs_f64()
    );
    let log = stack.relay.log();
    assert!(
        log.lines().any(|l| l.contains("proxy address")
            && l.contains("addr=10.100.1.2:7700")
            && l.contains("was=10.100.0.2:7700")),
        "the relay logs the new address:\n{}",
        tail(&log)
    );
    fetch_ok(&bed, &stack, 256 * KB, 4 * MB, "transfer after the move");
}

/// Two proxy processes with the fleet's credentials for one relay whose paths all name the proxy
/// by `name` (its `[relay]` changed by `relay_edit`): the stack's proxy on 10.100.0.2, its
/// `[proxy]` changed by `edit` too, and a second one (returned) on 10.100.1.2, configured alike
/// with its metrics on port 9101.
fn two_proxies(
    bed: &Bed,
    name: &str,
    relay_edit: impl FnOnce(&mut RelaySection),
    edit: impl FnOnce(&mut ProxySection),
) -> (Stack, Daemon) {
    // Listening on 10.100.{i}.2 (subflows on 7700, tunnels on 7701), metrics on 910{i}.
    let on = |i: usize, p: &mut ProxyConfig| {
        p.proxy.listen = vec![parsed(&format!("10.100.{i}.2:7700"))];
        p.proxy.tunnel_listen = Some(parsed(&format!("10.100.{i}.2:7701")));
        p.metrics.listen = Some(parsed(&format!("127.0.0.1:910{i}")));
    };
    let one_name = |r: &mut RelayConfig| {
        one_proxy_name(r, name);
        relay_edit(&mut r.relay);
    };
    let proxy0 = |p: &mut ProxyConfig| {
        on(0, p);
        edit(&mut p.proxy);
    };
    let stack = start_edited(bed, "polycorn", one_name, proxy0, 2);
    let p1_config = stack.dir.path().join("proxy1.toml");
    let mut p1 = read_proxy_config(&stack.dir.path().join("proxy.toml"));
    on(1, &mut p1);
    write_proxy_config(&p1_config, &p1);
    let mut proxy1 = Daemon::start(
        &bed.ns("proxy"),
        "proxy",
        &p1_config,
        stack.dir.path().join("proxy1.log"),
    );
    proxy1.wait_for("proxy running", 1);
    (stack, proxy1)
}

/// How many subflows `relay` has brought up to proxy address `addr` (port 7700) so far.
fn subflows_up_at(relay: &Daemon, addr: &str) -> usize {
    relay
        .log()
        .lines()
        .filter(|l| l.contains("subflow up") && l.contains(&format!("addr={addr}:7700")))
        .count()
}

/// nftables chains (for [`Blackhole::with_rules`] in the proxy's namespace) that drop whatever
/// arrives over `devices` for `addr`: the host there is lost, silently.
fn cut_off(addr: &str, devices: &[&str]) -> String {
    devices
        .iter()
        .map(|d| {
            format!(
                "  chain in_{d} {{ type filter hook ingress device \"{d}\" priority 0; policy accept; meta protocol ip ip daddr {addr} drop; }}\n"
            )
        })
        .collect()
}

/// Failover: the proxy's name lists two proxy hosts (two processes here, each on its own
/// address with the fleet's credentials). While the one in use answers, the relay stays; when
/// its address goes silent (its host lost: every packet to it dropped), the download it
/// carried ends with the relay's hold time, and once no path has reached it for the hold time
/// (10 s at least) the relay moves every path to the other address, where new connections are
/// carried. When that one's process dies in turn (refusing, not silent) and the first host is
/// back, the relay moves back to the first proxy, which kept the session's old state: the
/// relay's renewed epoch makes it start afresh.
#[test]
fn a_relay_moves_to_the_names_other_proxy_when_its_own_is_gone() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("f", 40, 20);
    start_server(&bed);
    let name = "proxies.polycorn.test";
    let hosts = NetnsHosts::new(&bed.ns("relay"));
    std::fs::write(
        hosts.dir.join("hosts"),
        format!("127.0.0.1 localhost\n10.100.0.2 {name}\n10.100.1.2 {name}\n"),
    )
    .unwrap();
    // Proxy 0 on 10.100.0.2, proxy 1 on 10.100.1.2.
    let (stack, proxy1) = two_proxies(&bed, name, |r| r.hold_time_s = 5, |_| {});
    let ups = |addr: &str| subflows_up_at(&stack.relay, addr);
    // The resolver's order decides which comes first; every path is on that one.
    let (used, other) = if ups("10.100.0.2") > 0 {
        ("10.100.0.2", "10.100.1.2")
    } else {
        ("10.100.1.2", "10.100.0.2")
    };
    assert_eq!(ups(used), 2, "{}", stack.relay.log());
    assert_eq!(ups(other), 0, "{}", stack.relay.log());
    fetch_ok(&bed, &stack, 256 * KB, 4 * MB, "transfer before the loss");
    // The pre-service check tries every path at both proxies, the one in use first.
    let (code, text) = check_paths(&bed, &stack);
    eprintln!("{text}");
    assert_eq!(code, Some(0), "{text}");
    let at = |text: &str, addr: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.contains(&format!(" {addr}:7700")))
            .map(String::from)
            .collect()
    };
    for addr in [used, other] {
        let lines = at(&text, addr);
        assert_eq!(lines.len(), 2, "{addr}:\n{text}");
        assert!(lines.iter().all(|l| l.contains(": ok,")), "{text}");
    }
    assert!(
        text.contains("4 of 4 checks passed (2 path(s), 2 proxy address(es))"),
        "{text}"
    );
    let p0: Vec<&str> = text.lines().filter(|l| l.starts_with("p0 (")).collect();
    assert!(p0[0].contains(used) && p0[1].contains(other), "{text}");
    let download = download_reaching_the_server(&bed, &stack, 800 * MB, 120);

    // The host of the proxy in use is lost: nothing reaches its address any more.
    let gone = Blackhole::with_rules(&bed.ns("proxy"), &cut_off(used, &["path0", "path1"]));
    let (code, text) = check_paths(&bed, &stack);
    eprintln!("{text}");
    assert_eq!(code, Some(1), "{text}");
    let lost = at(&text, used);
    assert!(
        lost.len() == 2
            && lost
                .iter()
                .all(|l| l.contains("FAILED") && l.contains("timed out")),
        "{text}"
    );
    assert!(
        at(&text, other).iter().all(|l| l.contains(": ok,")),
        "{text}"
    );
    let moved = |log: &str| {
        log.lines().any(|l| {
            l.contains("moving to the name's next address")
                && l.contains(&format!("addr={other}:7700"))
                && l.contains(&format!("was={used}:7700"))
        })
    };
    let took = wait_until(
        90,
        "the relay did not move to the other proxy",
        || stack.relay.log(),
        || moved(&stack.relay.log()) && ups(other) >= 2,
    );
    eprintln!(
        "both paths up at the other proxy {:.1} s after the loss",
        took.as_secs_f64()
    );
    let log = stack.relay.log();
    let line = log
        .lines()
        .find(|l| l.contains("moving to the name's next address"))
        .unwrap();
    let unreached: u64 = line
        .split("unreached_s=")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no unreached_s: {line}"));
    assert!(
        unreached >= 10,
        "moved after {unreached} s unreached: the hold time (at least 10 s) comes first\n{line}"
    );
    assert_eq!(
        log.matches("moving to the name's next address").count(),
        1,
        "one move:\n{}",
        tail(&log)
    );
    let page = scrape_metrics(&bed.ns("relay"));
    assert!(
        page.lines()
            .any(|l| l == "polycorn_proxy_failovers_total 1"),
        "the relay counts the move:\n{page}"
    );
    // The download the lost proxy carried was reset (with the relay's hold time), not left
    // hanging.
    match download.join().unwrap() {
        Ok(Err(_)) => {}
        other => panic!(
            "the lost proxy's download should end in a reset, got {other:?}\n{}",
            tail(&log)
        ),
    }
    for i in 0..3 {
        fetch_ok(
            &bed,
            &stack,
            64 * KB,
            4 * MB,
            &format!("transfer {i} after the move"),
        );
    }
    let survivor = if other == "10.100.1.2" {
        proxy1.log()
    } else {
        stack.proxy.log()
    };
    assert!(
        survivor.contains("new relay session"),
        "the other proxy carries the relay now:\n{}",
        tail(&survivor)
    );

    // The first host is back, and the other proxy's process dies (its host answers, refusing
    // every connection): the relay moves back around the list.
    drop(gone);
    let pid = if other == "10.100.1.2" {
        proxy1.child.id()
    } else {
        stack.proxy.child.id()
    };
    let killed = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let moves = |log: &str| log.matches("moving to the name's next address").count();
    wait_until(
        90,
        "the relay did not move back",
        || stack.relay.log(),
        || moves(&stack.relay.log()) == 2 && ups(used) >= 4,
    );
    let log = stack.relay.log();
    assert!(
        log.lines()
            .any(|l| l.contains("moving to the name's next address")
                && l.contains(&format!("addr={used}:7700"))
                && l.contains(&format!("was={other}:7700"))),
        "{}",
        tail(&log)
    );
    fetch_ok(&bed, &stack, 64 * KB, 4 * MB, "transfer after moving back");
    let page = scrape_metrics(&bed.ns("relay"));
    assert!(
        page.lines()
            .any(|l| l == "polycorn_proxy_failovers_total 2"),
        "{page}"
    );
    drop(proxy1);
}

/// The proxy's host name moves to another proxy while the first one still works, and one path
/// loses its subflow: that path reaches the other proxy but waits, since the other path still
/// carries the session at the first proxy, so the passenger's download there goes on. When the
/// operator stops the first proxy (drain, then Close), every path moves to the other proxy.
#[test]
fn a_path_that_reaches_another_proxy_waits_until_the_sessions_proxy_stops() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("ew", 40, 20);
    start_server(&bed);
    let name = "proxy.polycorn.test";
    let hosts = NetnsHosts::new(&bed.ns("relay"));
    hosts.set(name, "10.100.0.2");
    let drain = |p: &mut ProxySection| p.drain_s = 2;
    let (mut stack, proxy1) = two_proxies(&bed, name, |_| {}, drain);
    let ups = |addr: &str| subflows_up_at(&stack.relay, addr);
    assert_eq!(ups("10.100.0.2"), 2, "{}", stack.relay.log());
    let download = download_reaching_the_server(&bed, &stack, 800 * MB, 120);

    // The name moves; path 0 no longer reaches the first proxy.
    hosts.set(name, "10.100.1.2");
    let cut = Blackhole::with_rules(&bed.ns("proxy"), &cut_off("10.100.0.2", &["path0"]));
    let waits = |log: &str| {
        log.lines().any(|l| {
            l.contains("the path reached another proxy than the session's")
                && l.contains("path=p0")
                && l.contains("addr=10.100.1.2:7700")
        })
    };
    wait_until(
        60,
        "path 0 did not reach the other proxy",
        || stack.relay.log(),
        || waits(&stack.relay.log()),
    );
    std::thread::sleep(Duration::from_secs(3));
    let log = stack.relay.log();
    assert!(
        !download.is_finished(),
        "the download at the first proxy goes on:\n{}",
        tail(&log)
    );
    assert_eq!(ups("10.100.1.2"), 0, "{}", tail(&log));
    assert!(
        !log.contains("starts afresh") && !log.contains("flows_reset"),
        "nothing was reset:\n{}",
        tail(&log)
    );
    // The other proxy was told at once, and freed what the Hello set up.
    let other = proxy1.log();
    assert!(
        other.contains("this relay's session is with another proxy")
            && other.contains("no passenger connection was open")
            && !other.contains("connections were reset")
            && !other.contains("WARN"),
        "{}",
        tail(&other)
    );

    // The operator stops the first proxy: every path moves to the other one.
    drop(cut);
    stack.proxy.terminate();
    let st = stack.proxy.wait_exit();
    assert!(st.success(), "exit: {st}\n{}", tail(&stack.proxy.log()));
    assert_cut(&download.join().unwrap(), &stack);
    let took = wait_until(
        60,
        "the relay did not move to the other proxy",
        || stack.relay.log(),
        || ups("10.100.1.2") >= 2,
    );
    eprintln!(
        "both paths up at the other proxy {:.1} s after the first proxy's exit",
        took.as_secs_f64()
    );
    for i in 0..2 {
        fetch_ok(
            &bed,
            &stack,
            64 * KB,
            4 * MB,
            &format!("transfer {i} at the other proxy"),
        );
    }
    assert!(
        !stack
            .relay
            .log()
            .contains("starts afresh under a new epoch"),
        "the first proxy closed the session: the other one's answer is a first one\n{}",
        tail(&stack.relay.log())
    );
    drop(proxy1);
}

/// The proxy's host name moves (DNS, one address at a time, no failover) to another proxy
/// while the first one's host is unreachable, and later back while the first proxy still holds
/// the session from before. The relay learns from the other proxy's epoch that it speaks to
/// another proxy and renews its own epoch, so the first proxy, met again, sees a restarted
/// relay and starts afresh instead of taking the relay's new control frames for repeats of
/// old ones (which left every new connection hanging).
#[test]
fn a_relay_follows_its_proxy_name_to_another_proxy_and_back() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("mv", 40, 20);
    start_server(&bed);
    let name = "proxy.polycorn.test";
    let hosts = NetnsHosts::new(&bed.ns("relay"));
    hosts.set(name, "10.100.0.2");
    // Both proxies hold a relay's session for 120 s.
    let hold = |p: &mut ProxySection| p.hold_time_s = 120;
    let (stack, proxy1) = two_proxies(&bed, name, |_| {}, hold);
    let p0_text = std::fs::read_to_string(stack.dir.path().join("proxy.toml")).unwrap();
    assert!(p0_text.contains("hold_time_s = 120"), "{p0_text}");
    let ups = |addr: &str| subflows_up_at(&stack.relay, addr);
    assert_eq!(ups("10.100.0.2"), 2, "{}", stack.relay.log());
    fetch_ok(
        &bed,
        &stack,
        256 * KB,
        4 * MB,
        "transfer at the first proxy",
    );

    // The name moves to the other proxy, and the first one's host is cut off.
    hosts.set(name, "10.100.1.2");
    let gone = Blackhole::with_rules(
        &bed.ns("proxy"),
        &cut_off("10.100.0.2", &["path0", "path1"]),
    );
    let renewed = |log: &str| {
        log.matches("the session starts afresh under a new epoch")
            .count()
    };
    let took = wait_until(
        90,
        "the relay did not follow the name to the other proxy",
        || stack.relay.log(),
        || ups("10.100.1.2") >= 2 && renewed(&stack.relay.log()) >= 1,
    );
    eprintln!(
        "both paths up at the other proxy {:.1} s after the move",
        took.as_secs_f64()
    );
    for i in 0..2 {
        fetch_ok(
            &bed,
            &stack,
            64 * KB,
            4 * MB,
            &format!("transfer {i} at the other proxy"),
        );
    }
    assert!(
        proxy1.log().contains("new relay session"),
        "{}",
        tail(&proxy1.log())
    );

    // Back: the name points at the first proxy again, its host answers again, and the other
    // proxy's process is gone. The first proxy still holds the session from before.
    hosts.set(name, "10.100.0.2");
    drop(gone);
    let killed = Command::new("kill")
        .args(["-KILL", &proxy1.child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let took = wait_until(
        90,
        "the relay did not follow the name back",
        || stack.relay.log(),
        || ups("10.100.0.2") >= 4 && renewed(&stack.relay.log()) >= 2,
    );
    eprintln!(
        "both paths up at the first proxy again {:.1} s after the move back",
        took.as_secs_f64()
    );
    for i in 0..3 {
        fetch_ok(
            &bed,
            &stack,
            64 * KB,
            4 * MB,
            &format!("transfer {i} back at the first proxy"),
        );
    }
    let page = scrape_metrics(&bed.ns("relay"));
    assert!(
        page.lines()
            .any(|l| l == "polycorn_session_renewals_total 2"),
        "two fresh starts, one at each proxy:\n{page}"
    );
    let first = stack.proxy.log();
    assert!(
        first.contains("the peer lost this session's state"),
        "the first proxy saw the relay start afresh:\n{}",
        tail(&first)
    );
    assert_eq!(
        first.matches("new relay session").count(),
        1,
        "the first proxy kept its session:\n{}",
        tail(&first)
    );
    drop(proxy1);
}
