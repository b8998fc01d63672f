//! Path configuration as operators get it wrong or leave open: a path-MTU black hole, paths
//! without `source`, a missing device, and `relay --check-paths`.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::bed::*;
use crate::support::*;

/// A carrier that drops every packet over 1400 bytes and sends no ICMP (a path-MTU black
/// hole): the path's subflows connect (the handshake's packets are small) and then fall silent
/// under data, again and again. The relay says what this looks like and what to set; with
/// `mtu = 1400` on that path its subflow carries the data without falling silent.
#[test]
fn a_path_mtu_black_hole_is_named_and_the_path_mtu_setting_cures_it() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("mtu", 20, 15);
    start_server(&bed);
    let hole = "  chain in_path0 { type filter hook ingress device \"path0\" priority 0; policy accept; ip length > 1400 drop; }\n";
    let _holes = [
        Blackhole::with_rules(&bed.ns("relay"), hole),
        Blackhole::with_rules(&bed.ns("proxy"), hole),
    ];
    let received_p0 = |ns: &str| -> f64 {
        let key = "polycorn_path_received_bytes_total{path=\"p0\",relay=\"polycorn-relay\"} ";
        let m = scrape_metrics(ns);
        m.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {key}in\n{m}"))
    };
    {
        let stack = start_stack(&bed, "polycorn", "polycorn", 2);
        transfers(
            &bed,
            vec![(Via::Transparent4, KB, 8 * MB)],
            "black hole",
            &stack,
        );
        let t0 = Instant::now();
        while !stack.relay.log().contains("path-MTU black hole") {
            if t0.elapsed() > Duration::from_secs(30) {
                panic!("no black-hole warning:\n{}", tail(&stack.relay.log()));
            }
            transfers(
                &bed,
                vec![(Via::Transparent4, KB, 2 * MB)],
                "black hole",
                &stack,
            );
        }
        let log = stack.relay.log();
        let hint = log
            .lines()
            .find(|l| l.contains("path-MTU black hole"))
            .unwrap();
        assert!(
            hint.contains("WARN") && hint.contains("path=p0") && hint.contains("mtu = 1400"),
            "{hint}"
        );
        assert!(!log
            .lines()
            .any(|l| l.contains("black hole") && l.contains("path=p1")));
        // The pre-service check finds it too: the probe sent to the proxy is lost.
        let (code, text) = check_paths(&bed, &stack);
        eprintln!("{text}");
        assert_eq!(code, Some(1), "{text}");
        let l = line(&text, "p0");
        for want in [
            "p0 (path0, 10.100.0.1): FAILED",
            "did not arrive",
            "path-MTU black hole",
        ] {
            assert!(l.contains(want), "`{want}` in {l}");
        }
        assert!(line(&text, "p1").contains(": ok,"), "{text}");
    }
    let stack = start_edited(&bed, "polycorn", |r| r.paths[0].mtu = Some(1400), |_| {}, 2);
    let before = received_p0(&bed.ns("relay"));
    transfers(
        &bed,
        vec![(Via::Transparent4, KB, 16 * MB)],
        "mtu = 1400",
        &stack,
    );
    let carried = received_p0(&bed.ns("relay")) - before;
    let log = stack.relay.log();
    assert!(
        !log.lines()
            .any(|l| l.contains("path=p0")
                && (l.contains("path silent") || l.contains("black hole"))),
        "{}",
        tail(&log)
    );
    assert!(carried > 2e6, "p0 carried {carried} B of 16 MB");
    let (code, text) = check_paths(&bed, &stack);
    assert_eq!(code, Some(0), "with `mtu = 1400` the check passes:\n{text}");
    // 1400 less the IP and TCP headers, less TCP's timestamps.
    assert!(line(&text, "p0").contains("MSS 1348"), "{text}");
    drop(stack);
    // The baselines' tunnels take the setting too: the single-path tunnel of the one passenger
    // (path p0, the black hole's) and kernel MPTCP (one socket option for all its subflows).
    for mode in ["single", "mptcp"] {
        let stack = start_edited(&bed, mode, |r| r.paths[0].mtu = Some(1400), |_| {}, 0);
        transfers(
            &bed,
            vec![
                (Via::Transparent4, KB, 8 * MB),
                (Via::Transparent4, 2 * MB, KB),
            ],
            &format!("{mode}, mtu = 1400 on the black hole's path"),
            &stack,
        );
    }
}

/// A modem that gets a new address when it re-attaches, on a path configured without
/// `source`: the relay connects from the interface's address of the moment, and when that
/// address goes and another comes, the path's next subflow comes from the new one.
#[test]
fn a_path_without_source_follows_its_modems_new_address() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("addr", 20, 10);
    start_server(&bed);
    let stack = start_edited(&bed, "polycorn", |r| r.paths[0].source = None, |_| {}, 2);
    let up_from = |addr: &str| {
        stack
            .relay
            .log()
            .lines()
            .any(|l| l.contains("subflow up path=p0") && l.contains(&format!("source={addr}")))
    };
    assert!(up_from("10.100.0.1"), "{}", stack.relay.log());
    transfers(
        &bed,
        vec![(Via::Transparent4, KB, 4 * MB)],
        "first address",
        &stack,
    );
    // The modem re-attaches with another address.
    let ip = |args: &[&str]| {
        let out = Command::new("ip")
            .args(["netns", "exec", &bed.ns("relay"), "ip"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "ip {args:?}: {out:?}");
    };
    ip(&["addr", "del", "10.100.0.1/24", "dev", "path0"]);
    ip(&["addr", "add", "10.100.0.7/24", "dev", "path0"]);
    let took = wait_until(
        30,
        "no subflow from the new address",
        || stack.relay.log(),
        || up_from("10.100.0.7"),
    );
    eprintln!(
        "path p0 up from its new address {:.1} s after the change",
        took.as_secs_f64()
    );
    transfers(
        &bed,
        vec![(Via::Transparent4, 4 * MB, 4 * MB)],
        "new address",
        &stack,
    );
}

/// Modems with an IPv4 and an IPv6 address, paths without `source`, and a proxy reachable
/// over IPv6 only (one path names it by address, the other by a host name with an AAAA record
/// only): each path takes its modem's IPv6 address, not the IPv4 one it would take first.
#[test]
fn a_path_without_source_takes_the_address_family_its_proxy_has() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("fam", 20, 10);
    start_server(&bed);
    let hosts = NetnsHosts::new(&bed.ns("relay"));
    std::fs::write(
        hosts.dir.join("hosts"),
        "127.0.0.1 localhost\nfd00:100:1::2 proxy6.polycorn.test\n",
    )
    .unwrap();
    let relay_edit = |relay: &mut RelayConfig| {
        relay.relay.proxy = parsed("[fd00:100:0::2]:7700");
        for path in &mut relay.paths {
            path.source = None;
        }
        relay.paths[0].proxy = Some(parsed("[fd00:100:0::2]:7700"));
        relay.paths[1].proxy = Some(parsed("proxy6.polycorn.test:7700"));
    };
    let proxy_edit = |proxy: &mut ProxyConfig| {
        proxy.proxy.listen = vec![parsed("0.0.0.0:7700"), parsed("[::]:7700")];
    };
    let stack = start_edited(&bed, "polycorn", relay_edit, proxy_edit, 2);
    let log = stack.relay.log();
    for (path, addr, source) in [
        ("p0", "[fd00:100::2]:7700", "fd00:100::1"),
        ("p1", "[fd00:100:1::2]:7700", "fd00:100:1::1"),
    ] {
        assert!(
            log.lines().any(|l| l.contains("subflow up")
                && l.contains(&format!("path={path} "))
                && l.contains(&format!("addr={addr}"))
                && l.contains(&format!("source={source}"))),
            "{path} up from {source} to {addr}:\n{log}"
        );
    }
    transfers(
        &bed,
        vec![
            (Via::Transparent4, KB, 8 * MB),
            (Via::Transparent6, 2 * MB, KB),
        ],
        "IPv6 from dual-stack modems",
        &stack,
    );
    // `stack` stops the daemons before `hosts` goes.
}

/// The server, and relay and proxy in polycorn mode with the testbed's two paths and a third,
/// `ghost`, whose device `nosuch0` does not exist.
fn start_with_a_ghost_path(bed: &Bed) -> Stack {
    start_server(bed);
    let ghost = PathConfig {
        name: "ghost".into(),
        device: "nosuch0".into(),
        source: Some(parsed("10.100.9.1")),
        proxy: Some(parsed("10.100.0.2:7700")),
        mtu: None,
        modem: None,
        at_port: None,
    };
    start_stack_with(
        bed,
        "polycorn",
        "polycorn",
        2,
        |r, _| r.paths.push(ghost),
        tempfile::tempdir().unwrap(),
    )
}

/// An operator misnames a path's device (or its modem is missing): the relay says so at once,
/// naming the path, the device and the cause, says it once rather than at every retry, and
/// carries passengers over the paths that work.
#[test]
fn a_path_whose_device_is_missing_is_reported_and_the_others_carry() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("g", 40, 20);
    let stack = start_with_a_ghost_path(&bed);
    wait_for_relay_log(
        &stack,
        "path has no subflow",
        None,
        "no warning about the path whose device is missing",
    );
    fetch_ok(
        &bed,
        &stack,
        256 * KB,
        4 * MB,
        "transfer over the two working paths",
    );
    let log = stack.relay.log();
    let warnings: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("path has no subflow"))
        .collect();
    assert_eq!(
        warnings.len(),
        1,
        "warned once, not at every retry:\n{}",
        tail(&log)
    );
    for want in ["WARN", "ghost", "nosuch0", "No such device"] {
        assert!(warnings[0].contains(want), "`{want}` in {}", warnings[0]);
    }
    assert!(
        !log.lines()
            .any(|l| l.contains("subflow up") && l.contains("path=ghost"))
            && log.matches("subflow up").count() == 2,
        "only the two real paths came up:\n{}",
        tail(&log)
    );
}

/// `polycorn relay --check-paths`, run beside a working relay with the same configuration:
/// over each path it reaches the proxy (TCP pinned to the path, TLS, Hello) and says so with the
/// path's RTT; a path whose device is missing, or whose carrier drops everything, is named as
/// failed with why, and the exit status says some paths failed. The proxy answers the checks
/// without opening a session: the relay's own session, and a download it carries, go on.
#[test]
fn a_path_check_names_each_paths_outcome_and_leaves_the_running_session_alone() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("k", 40, 20);
    let stack = start_with_a_ghost_path(&bed);
    let relay_ns = bed.ns("relay");
    let check = || check_paths(&bed, &stack);
    let download = download_reaching_the_server(&bed, &stack, 32 * MB, 60);
    let (code, text) = check();
    eprintln!("{text}");
    assert_eq!(code, Some(1), "some paths failed:\n{text}");
    for i in 0..2 {
        let l = line(&text, &format!("p{i}"));
        let want = format!("p{i} (path{i}, 10.100.{i}.1): ok, proxy 10.100.{i}.2:7700 reached");
        assert!(l.starts_with(&want), "`{want}` in {l}");
        assert!(l.contains("answered by polycorn"), "{l}");
        // The emulated paths delay each direction by 20 ms.
        let rtt: f64 = l
            .split(", RTT ")
            .nth(1)
            .and_then(|r| r.split(" ms").next())
            .and_then(|r| r.parse().ok())
            .unwrap_or_else(|| panic!("no RTT in {l}"));
        assert!(rtt >= 35.0, "RTT {rtt} ms over a 2 × 20 ms path: {l}");
    }
    let l = line(&text, "ghost");
    for want in [
        "ghost (nosuch0): FAILED",
        "nosuch0",
        "configuration or credentials",
    ] {
        assert!(l.contains(want), "`{want}` in {l}");
    }
    assert!(text.contains("2 of 3 path(s) reach the proxy"), "{text}");
    // The same as JSON, one object per check.
    let out = Command::new("ip")
        .args(["netns", "exec", &relay_ns, bin(), "relay", "--config"])
        .arg(stack.dir.path().join("relay.toml"))
        .args(["--check-paths", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let checks: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(checks.len(), 3, "{checks:?}");
    for (c, i) in checks.iter().zip(0..2) {
        assert_eq!(c["path"], format!("p{i}"));
        assert_eq!(c["ok"], true, "{c}");
        assert_eq!(c["answer"], "checked", "{c}");
        assert_eq!(c["addr"], format!("10.100.{i}.2:7700"), "{c}");
        assert!(c["rtt_ms"].as_f64().unwrap() >= 35.0, "{c}");
        // `tls generate` makes certificates valid for ten years and more.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        let end = c["proxy_cert_not_after"].as_i64().unwrap();
        assert!(end > now + 9 * 365 * 86_400, "{c}");
    }
    // Both daemons export when their certificates end, and the other end's, for monitoring.
    for (role, peer) in [
        ("relay", "polycorn_proxy_tls_not_after_seconds "),
        (
            "proxy",
            "polycorn_relay_tls_not_after_seconds{relay=\"polycorn-relay\"} ",
        ),
    ] {
        let page = scrape_metrics(&bed.ns(role));
        for key in ["{file=\"cert\"} ", "{file=\"ca\"} ", ""] {
            let key = if key.is_empty() {
                peer.to_string()
            } else {
                format!("polycorn_tls_not_after_seconds{key}")
            };
            let end: i64 = page
                .lines()
                .find_map(|l| l.strip_prefix(&key))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or_else(|| panic!("no {key}in the {role}'s metrics:\n{page}"));
            assert!(end > 1_900_000_000, "{role} {key}: {end}");
        }
    }
    assert_eq!(checks[2]["ok"], false);
    assert!(
        checks[2]["error"].as_str().unwrap().contains("nosuch0"),
        "{}",
        checks[2]
    );
    let r = download.join().unwrap();
    assert!(
        matches!(r, Ok(Ok(()))),
        "the relay's download beside the check: {r:?}\n{}",
        tail(&stack_log(&stack))
    );
    let plog = stack.proxy.log();
    assert_eq!(
        plog.matches("path check from a relay answered").count(),
        4,
        "two checks of two paths each:\n{}",
        tail(&plog)
    );
    assert!(
        plog.matches("new relay session").count() == 1 && !plog.contains("WARN"),
        "the checks opened no session and disturbed none:\n{}",
        tail(&plog)
    );

    // Path 0's carrier drops full-size packets towards the train (the handshakes pass): the
    // proxy's answer is lost, and the check says so. Path 1's carrier drops everything: the
    // check says that path timed out.
    let hole = "  chain in_path0 { type filter hook ingress device \"path0\" priority 0; policy accept; ip length > 1400 drop; }\n  chain in_path1 { type filter hook ingress device \"path1\" priority 0; policy drop; }\n";
    let dark = Blackhole::with_rules(&relay_ns, hole);
    let (code, text) = check();
    eprintln!("{text}");
    assert_eq!(code, Some(2), "{text}");
    let l = line(&text, "p0");
    for want in [
        "p0 (path0, 10.100.0.1): FAILED: proxy 10.100.0.2:7700 reached",
        "KiB answer did not arrive",
        "path-MTU black hole",
        "`mtu`",
    ] {
        assert!(l.contains(want), "`{want}` in {l}");
    }
    let l = line(&text, "p1");
    assert!(
        l.starts_with("p1 (path1): FAILED to reach 10.100.1.2:7700") && l.contains("timed out"),
        "{l}"
    );
    drop(dark);
    fetch_ok(&bed, &stack, KB, 256 * KB, "a transfer after the checks");
}
