//! `net soak`: churn, attacks, restarts and the emulated trip through a real relay and proxy.

use crate::support::*;

/// A `net soak` that passed: its output and the connections it completed.
fn soak_passed(out: &std::process::Output) -> (String, u64) {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("ok: every connection and ping"), "{stdout}");
    let completed = stdout
        .split(" connections completed")
        .next()
        .and_then(|h| h.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .expect("a completed count");
    (stdout, completed)
}

/// `net soak --attack`: beside the churn, connections to the relay's own addresses from outside
/// and from the LAN, passengers aiming at the proxy's host, a greedy passenger, spoofed DNS
/// queries to a resolver that never answers and a rogue relay sending data for flows it never
/// opened. Every attack is refused, no passenger byte is wrong, the passengers' set-up time
/// stays within twice the attack-free third's, and nothing is left open.
#[test]
fn net_soak_under_attack_refuses_every_attack_and_carries_the_passengers() {
    if !is_root() {
        eprintln!("skipping: needs root");
        return;
    }
    let _quiet = machine_to_myself();
    let name = "pcat-cli";
    let out = polycorn(&[
        "net",
        "soak",
        "--attack",
        "--secs",
        "24",
        "--workers",
        "6",
        "--idle",
        "8",
        "--sample-secs",
        "3",
        "--name",
        name,
    ]);
    let (stdout, completed) = soak_passed(&out);
    assert!(completed >= 100, "{stdout}");
    for line in [
        "attack, loop from outside:",
        "attack, loop from the LAN:",
        "attack, into the proxy's host:",
        "attack, greedy passenger:",
        "attack, DNS flood:",
        "attack, rogue relay:",
        "connection set-up (to the first byte): before the attacks",
    ] {
        assert!(stdout.contains(line), "no `{line}`:\n{stdout}");
    }
    // Each attack ran: the rogue relay was closed at least once, the greedy passenger hit its
    // limit.
    assert!(
        !stdout.contains("rogue relay: 0 sessions") && !stdout.contains(", 0 closed after"),
        "{stdout}"
    );
    let held: u64 = stdout
        .split("at most ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|n| n.parse().ok())
        .expect("the greedy passenger's count");
    assert!((300..=528).contains(&held), "{stdout}");
    assert!(!namespaces().contains(name), "namespaces left behind");
}

/// `net soak`: connection churn and long-lived connections through a real relay and proxy
/// (TLS subflows over two veth paths, transparent interception), the paths blacked out in
/// turn; every byte checked, and afterwards no flow open and no descriptor more than before,
/// on both daemons.
#[test]
fn net_soak_checks_every_byte_and_finds_nothing_left_open() {
    if !is_root() {
        eprintln!("skipping: needs root");
        return;
    }
    let _quiet = machine_to_myself();
    let name = "pcsk-cli";
    let out = polycorn(&[
        "net",
        "soak",
        "--secs",
        "8",
        "--workers",
        "6",
        "--idle",
        "10",
        "--users",
        "3",
        "--sample-secs",
        "2",
        "--blackout-every",
        "3",
        "--blackout-secs",
        "1",
        "--name",
        name,
    ]);
    let (stdout, completed) = soak_passed(&out);
    // Enough churn to mean something: hundreds of connections, with the idle ones pinged
    // at least three times each.
    assert!(completed >= 100, "{stdout}");
    assert!(stdout.contains("(10 answered every one)"), "{stdout}");
    // Paths blacked out in turn while all this ran, and nothing failed.
    let blackouts: u64 = stdout
        .lines()
        .find_map(|l| l.strip_suffix(" blackouts of 1 s"))
        .and_then(|n| n.parse().ok())
        .expect("a blackout count");
    assert!(blackouts >= 2, "{stdout}");
    for who in ["relay", "proxy"] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("{who}: memory")))
            .unwrap_or_else(|| panic!("no {who} line: {stdout}"));
        assert!(
            line.contains(&format!("flows opened {}", completed + 10)),
            "{line}"
        );
        assert!(
            line.contains("open at the end 0; subflow reconnections "),
            "{line}"
        );
    }
    let ns = namespaces();
    assert!(!ns.contains(name), "namespaces left: {ns}");
    // Bad options are refused before anything is built.
    let bad = polycorn(&["net", "soak", "--workers", "0", "--idle", "0"]);
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("nothing would load"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
}

/// `net soak` for 20 s with a restart every 4 s (all four kinds) and `extra` options, light
/// load; asserts it passed and completed 100 connections or more. Returns its output.
fn restart_soak(name: &str, extra: &[&str]) -> String {
    let mut args = vec![
        "net",
        "soak",
        "--secs",
        "20",
        "--restart-every",
        "4",
        "--workers",
        "6",
        "--idle",
        "6",
        "--users",
        "2",
        "--sample-secs",
        "2",
        "--name",
        name,
    ];
    args.extend_from_slice(extra);
    let (stdout, completed) = soak_passed(&polycorn(&args));
    assert!(completed >= 100, "{stdout}");
    stdout
}

/// The soak's summary line of the restart of `kind` (`(relay killed)`, …) says a connection
/// opened after its signal completed.
fn assert_got_through_after(stdout: &str, kind: &str) {
    let line = stdout
        .lines()
        .find(|l| l.starts_with("restart at ") && l.contains(kind))
        .unwrap_or_else(|| panic!("no {kind} restart: {stdout}"));
    assert!(
        line.contains("first connection opened after the signal completed ")
            && !line.ends_with("completed none"),
        "{line}"
    );
}

/// `net soak --restart-every`: relay and proxy stopped in order and killed, in turn, under the
/// churn. Connections a restart cuts must fail as a cut connection should (no wrong byte, no
/// hang, no orderly close mid-download except after a relay crash); every connection opened
/// once a restart is over completes; afterwards no flow is left open — also the proxy's side
/// of a killed relay's flows, well before its hold time (30 s) — and no descriptor more.
#[test]
fn net_soak_restarts_relay_and_proxy_under_load() {
    if !is_root() {
        eprintln!("skipping: needs root");
        return;
    }
    let _quiet = machine_to_myself();
    let name = "pcsk-rst";
    let stdout = restart_soak(name, &[]);
    // All four kinds of restart happened, each cut what it carried, and passengers got
    // through again after each.
    for kind in [
        "(proxy stopped)",
        "(relay stopped)",
        "(proxy killed)",
        "(relay killed)",
    ] {
        assert_got_through_after(&stdout, kind);
    }
    for who in ["relay", "proxy"] {
        assert!(
            stdout.contains(&format!("{who} stopped (SIGTERM): exited in "))
                && stdout.contains(&format!("{who} killed (SIGKILL)")),
            "{stdout}"
        );
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("{who}: memory")))
            .unwrap_or_else(|| panic!("no {who} line: {stdout}"));
        assert!(line.contains("over its 3 runs"), "{line}");
        assert!(line.contains("open at the end 0;"), "{line}");
    }
    // The relay was killed at 16 s; had the proxy held that run's flows for its hold time,
    // they would have been open for at least 10 s after the load.
    let settled: f64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("settled "))
        .and_then(|l| l.split(' ').next())
        .and_then(|n| n.parse().ok())
        .expect("a settle time");
    assert!(settled < 10.0, "{stdout}");
    let ns = namespaces();
    assert!(!ns.contains(name), "namespaces left: {ns}");
    let bad = polycorn(&["net", "soak", "--restart-every", "1"]);
    assert!(
        !bad.status.success()
            && String::from_utf8_lossy(&bad.stderr).contains("--restart-every must be 0"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
}

/// With the relay's listener held across its restarts (what `config example relay.socket`
/// has systemd do), a connection opened after the relay was stopped or killed waits in the
/// backlog for the next relay: the soak then fails any such connection that does not complete,
/// and checks that every relay run took the listener it was passed — and every proxy run the
/// proxy's (`proxy.socket`).
#[test]
fn net_soak_relay_restarts_lose_no_new_connection_with_its_listener_held() {
    if !is_root() {
        eprintln!("skipping: needs root");
        return;
    }
    let _quiet = machine_to_myself();
    let name = "pcsk-held";
    let stdout = restart_soak(name, &["--hold-listeners"]);
    assert!(
        stdout.contains("are held by the soak and passed to every relay and proxy"),
        "{stdout}"
    );
    // The proxy's listener too (every proxy run took it, or the soak would have failed):
    // passengers get through after its restarts as well.
    for kind in [
        "(relay stopped)",
        "(relay killed)",
        "(proxy stopped)",
        "(proxy killed)",
    ] {
        assert_got_through_after(&stdout, kind);
    }
    let ns = namespaces();
    assert!(!ns.contains(name), "namespaces left: {ns}");
}

/// `net soak --trip`: the same churn and checks over the emulated HSR trip — both carriers'
/// capacity, delay and handovers, the relay fed the trip's context, both ends predicting from
/// LinkDB — and the testbed removed afterwards.
#[test]
fn net_soak_over_the_emulated_trip_checks_every_byte() {
    if !is_root() {
        eprintln!("skipping: needs root");
        return;
    }
    let _quiet = machine_to_myself();
    let name = "pcsk-trip";
    let out = polycorn(&[
        "net",
        "soak",
        "--trip",
        "--secs",
        "20",
        "--workers",
        "6",
        "--idle",
        "8",
        "--users",
        "2",
        "--sample-secs",
        "5",
        "--name",
        name,
    ]);
    let (stdout, completed) = soak_passed(&out);
    assert!(
        stdout.contains("over the emulated `hsr` trip (route 1, trip 1) from ")
            && stdout.contains("2 carriers,"),
        "{stdout}"
    );
    assert!(completed >= 20, "{stdout}");
    assert!(stdout.contains("(8 answered every one)"), "{stdout}");
    for who in ["relay", "proxy"] {
        assert!(
            stdout.contains(&format!("{who}: memory"))
                && stdout.lines().any(|l| l.starts_with(who)
                    && l.contains(&format!(
                        "flows opened {}, open at the end 0",
                        completed + 8
                    ))),
            "{stdout}"
        );
    }
    let ns = namespaces();
    assert!(!ns.contains(name), "namespaces left: {ns}");
    // A soak longer than the trip at speed, or with blackouts of its own: refused, saying why.
    let long = polycorn(&["net", "soak", "--trip", "--secs", "3600", "--name", name]);
    let e = String::from_utf8_lossy(&long.stderr);
    assert!(
        !long.status.success() && e.contains("give --secs at most") && !e.contains("logs kept"),
        "{e}"
    );
    let both = polycorn(&["net", "soak", "--trip", "--blackout-every", "30"]);
    let e = String::from_utf8_lossy(&both.stderr);
    assert!(
        !both.status.success() && e.contains("cannot be used with"),
        "{e}"
    );
    assert!(!namespaces().contains(name));
}
