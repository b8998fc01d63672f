//! What an operator changes on a running proxy or relay (`systemctl reload`): revoked relays,
//! renewed certificates, destination policy; and two trains sharing one proxy.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use polycorn_net::loadgen;

use crate::bed::*;
use crate::support::*;

/// An operator revokes a relay on a running proxy (`systemctl reload`, SIGHUP): its subflows
/// are cut at once and its reconnections refused; a file that does not load changes nothing;
/// taking the name off the list lets the relay in again, and passengers are carried.
#[test]
fn a_relay_revoked_on_reload_is_cut_at_once_and_let_in_again() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("v", 40, 20);
    start_server(&bed);
    let mut stack = start_stack(&bed, "polycorn", "minrtt", 2);
    fetch_ok(&bed, &stack, KB, MB, "transfer before the revocation");
    let file = stack.dir.path().join("proxy.toml");
    let text = std::fs::read_to_string(&file).unwrap();
    let ups = |stack: &Stack| stack.proxy.log().matches("subflow up").count();
    // A file that does not load: reported, nothing changes.
    std::fs::write(&file, "[proxy]\nrevoked_relays = [\"Not A Name\"]\n").unwrap();
    stack.proxy.hangup();
    stack
        .proxy
        .wait_for("reload: configuration not loaded; nothing changed", 1);
    fetch_ok(&bed, &stack, KB, MB, "transfer after a failed reload");
    // Revoked.
    std::fs::write(&file, revoking(&text, "polycorn-relay")).unwrap();
    stack.proxy.hangup();
    stack.proxy.wait_for("reload: revoked relays applied", 1);
    stack
        .proxy
        .wait_for("relay revoked: its subflows were cut", 1);
    stack
        .proxy
        .wait_for("relay certificate `polycorn-relay` is revoked", 1);
    // The relay is told why (the TLS alert `certificate_revoked`), and says so at once.
    wait_for_relay_log(
        &stack,
        "the proxy refuses this relay's certificate as revoked",
        None,
        "the relay does not say it was revoked",
    );
    // It retries after 2 s, then less and less often (up to once a minute).
    assert!(
        stack.relay.log().lines().any(|l| l
            .contains("the proxy refuses this relay's certificate as revoked")
            && l.contains("retry_in_s=2")),
        "the relay does not say when it tries again:\n{}",
        tail(&stack.relay.log())
    );
    let before = ups(&stack);
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        ups(&stack),
        before,
        "a revoked relay got a subflow up:\n{}",
        tail(&stack.proxy.log())
    );
    // Let in again.
    std::fs::write(&file, &text).unwrap();
    stack.proxy.hangup();
    stack.proxy.wait_for("reload: revoked relays applied", 2);
    stack.proxy.wait_for("subflow up", before + 2);
    fetch_ok(
        &bed,
        &stack,
        KB,
        MB,
        "transfer after the relay was let in again",
    );
}

/// Waits up to 20 s for metric `key` of `ns`'s daemon to end `days` days from now (± one day).
fn wait_metric_days(ns: &str, key: &str, days: i64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        let got = metric_value(ns, key);
        if got.is_some_and(|end| (end - now - days * 86_400).abs() <= 86_400) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{ns}: {key} is {got:?}, not {days} days from now"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// `polycorn tls ARGS` on the credentials in `dir`.
fn tls_cmd(dir: &Path, args: &[&str]) {
    let out = Command::new(bin())
        .arg("tls")
        .args(args)
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "tls {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An operator renews both ends' certificates without a restart (`systemctl reload`,
/// SIGHUP): the relay's paths replace their subflows with ones made with the new
/// certificate, at idle moments, while passengers are carried; the proxy's new certificate
/// reaches new subflows; a key that does not match, or files that did not change, change
/// nothing; a certificate the proxy refuses is reported, and the subflows made before stay.
#[test]
fn certificates_renewed_on_reload_take_effect_without_a_restart() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("rn", 40, 20);
    start_server(&bed);
    let mut stack = start_stack(&bed, "polycorn", "minrtt", 2);
    fetch_ok(&bed, &stack, KB, MB, "transfer before the renewal");
    let dir = stack.dir.path().to_path_buf();
    let (relay_ns, proxy_ns) = (bed.ns("relay"), bed.ns("proxy"));
    let renewed_paths = "replaced it with a connection made with the new ones";

    // Renewals gone wrong, each reported with the old credentials kept: a key that is not the
    // certificate's, and a certificate naming another relay (the proxy binds the session to
    // the relay's name).
    let (cert, key) = (
        std::fs::read(dir.join("relay.pem")).unwrap(),
        std::fs::read(dir.join("relay.key")).unwrap(),
    );
    tls_cmd(&dir, &["relay", "--name", "train-9"]);
    for (n, (pem, key_file, why)) in [
        (
            "relay.pem",
            "proxy.key",
            "private key does not match the certificate",
        ),
        (
            "train-9.pem",
            "train-9.key",
            "names relay `train-9`, this relay runs as `polycorn-relay`",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        std::fs::copy(dir.join(pem), dir.join("relay.pem.new")).unwrap();
        std::fs::rename(dir.join("relay.pem.new"), dir.join("relay.pem")).unwrap();
        std::fs::copy(dir.join(key_file), dir.join("relay.key")).unwrap();
        stack.relay.hangup();
        stack.relay.wait_for(
            "reload: TLS credentials not replaced, the ones in use stay",
            n + 1,
        );
        assert!(
            stack.relay.log().contains(why),
            "{}",
            tail(&stack.relay.log())
        );
        std::fs::write(dir.join("relay.pem"), &cert).unwrap();
        std::fs::write(dir.join("relay.key"), &key).unwrap();
        fetch_ok(&bed, &stack, KB, MB, "transfer after a failed reload");
    }

    // A certificate of another CA: it loads, but the proxy refuses it. The relay says so at
    // its first renewal attempt and keeps the subflows made before.
    let other = dir.join("other");
    generate_credentials(&other);
    for f in ["relay.pem", "relay.key"] {
        std::fs::copy(other.join(f), dir.join(f)).unwrap();
    }
    stack.relay.hangup();
    stack.relay.wait_for("reload: TLS credentials replaced", 1);
    stack.relay.wait_for(
        "the TLS credentials loaded at the reload do not get through",
        1,
    );
    fetch_ok(
        &bed,
        &stack,
        KB,
        MB,
        "transfer with credentials the proxy refuses",
    );
    // Fixed and reloaded: the paths renew with the files that work.
    std::fs::write(dir.join("relay.pem"), &cert).unwrap();
    std::fs::write(dir.join("relay.key"), &key).unwrap();
    stack.relay.hangup();
    stack.relay.wait_for("reload: TLS credentials replaced", 2);
    stack.relay.wait_for(renewed_paths, 2);

    // The train's certificate renewed (20 days, as a fleet on a schedule would), in place,
    // with a download under way.
    tls_cmd(
        &dir,
        &["relay", "--name", "polycorn-relay", "--valid-days", "20"],
    );
    std::fs::rename(dir.join("polycorn-relay.pem"), dir.join("relay.pem")).unwrap();
    std::fs::rename(dir.join("polycorn-relay.key"), dir.join("relay.key")).unwrap();
    let download = download_in_background(&bed, 16 * MB, 60);
    std::thread::sleep(Duration::from_millis(500));
    stack.relay.hangup();
    stack.relay.wait_for("reload: TLS credentials replaced", 3);
    // The relay says how long the new certificate lasts, as at a start.
    stack.relay.wait_for("only 19 days left: renew it", 1);
    let r = download.join().unwrap();
    assert!(
        matches!(r, Ok(Ok(_))),
        "the download under way at the renewal: {r:?}\n{}",
        tail(&stack.relay.log())
    );
    stack.relay.wait_for(renewed_paths, 4);
    wait_metric_days(
        &relay_ns,
        "polycorn_tls_not_after_seconds{file=\"cert\"}",
        20,
    );
    // The proxy sees the renewed certificate on the replaced subflows.
    wait_metric_days(
        &proxy_ns,
        "polycorn_relay_tls_not_after_seconds{relay=\"polycorn-relay\"}",
        20,
    );
    fetch_ok(&bed, &stack, KB, MB, "transfer after the relay's renewal");

    // The proxy's certificate renewed from the same CA (the trains keep their files).
    tls_cmd(&dir, &["proxy", "--valid-days", "40", "--force"]);
    stack.proxy.hangup();
    stack.proxy.wait_for("reload: TLS credentials replaced", 1);
    wait_metric_days(
        &proxy_ns,
        "polycorn_tls_not_after_seconds{file=\"cert\"}",
        40,
    );
    // New subflows get it: a path check makes new ones.
    let out = Command::new("ip")
        .args(["netns", "exec", &relay_ns, bin(), "relay", "--config"])
        .arg(dir.join("relay.toml"))
        .args(["--check-paths", "--json"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        let c: serde_json::Value = serde_json::from_str(l).unwrap();
        let end = c["proxy_cert_not_after"].as_i64().unwrap();
        assert!((end - now - 40 * 86_400).abs() <= 86_400, "{c}");
    }
    // The subflows up when the proxy renewed keep working.
    fetch_ok(&bed, &stack, KB, MB, "transfer after the proxy's renewal");

    for l in stack.relay.log().lines() {
        if l.contains("reload") || l.contains(renewed_paths) {
            eprintln!("relay: {l}");
        }
    }
    // A reload with the files unchanged changes nothing: no subflow is replaced.
    stack.relay.hangup();
    stack
        .relay
        .wait_for("reload: the TLS files are unchanged", 1);
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        stack.relay.log().matches(renewed_paths).count(),
        4,
        "{}",
        tail(&stack.relay.log())
    );
}

/// An operator changes the proxy's destination policy (`systemctl reload`): later
/// connections follow it at once, a download open at the change goes on, and nothing restarts.
#[test]
fn a_destination_policy_changed_on_reload_applies_to_new_connections() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("pol", 40, 20);
    start_server(&bed);
    let mut stack = start_stack(&bed, "polycorn", "minrtt", 2);
    fetch_ok(&bed, &stack, KB, MB, "transfer before the change");
    let file = stack.dir.path().join("proxy.toml");
    let text = std::fs::read_to_string(&file).unwrap();
    // A download under way when the server is denied.
    let download = download_in_background(&bed, 16 * MB, 60);
    std::thread::sleep(Duration::from_millis(500));
    let mut config = read_proxy_config(&file);
    assert!(config.policy.deny.is_empty(), "{text}");
    config.policy.deny = vec![parsed("10.0.2.2/32")];
    let denied = config.to_toml();
    assert_ne!(denied, text);
    std::fs::write(&file, &denied).unwrap();
    stack.proxy.hangup();
    stack
        .proxy
        .wait_for("reload: destination policy applied to new connections", 1);
    let r = download_in_background(&bed, MB, 30).join().unwrap();
    assert!(
        !matches!(r, Ok(Ok(()))),
        "a transfer to a denied server succeeded: {r:?}"
    );
    stack.proxy.wait_for("destination denied by policy", 1);
    let r = download.join().unwrap();
    assert!(
        matches!(r, Ok(Ok(_))),
        "the download open at the change: {r:?}\n{}",
        tail(&stack.proxy.log())
    );
    // Allowed again.
    std::fs::write(&file, &text).unwrap();
    stack.proxy.hangup();
    stack
        .proxy
        .wait_for("reload: destination policy applied to new connections", 2);
    fetch_ok(
        &bed,
        &stack,
        KB,
        MB,
        "transfer after the policy was restored",
    );
    assert!(
        !stack
            .proxy
            .log()
            .contains("restart the proxy for the other changes"),
        "{}",
        tail(&stack.proxy.log())
    );
    assert_eq!(stack.proxy.log().matches("proxy running").count(), 1);
}

/// Proxy configuration `text` with `relay` in `proxy.revoked_relays`.
fn revoking(text: &str, relay: &str) -> String {
    let mut config = ProxyConfig::from_toml(text, "proxy.toml").unwrap();
    config.proxy.revoked_relays.push(relay.into());
    config.to_toml()
}

/// A second train's namespace, joined to the proxy's by one unshaped veth path
/// (10.199.0.1 on the train, 10.199.0.2 at the proxy); removed on drop.
struct SecondTrain {
    ns: String,
    device: String,
}

impl SecondTrain {
    fn new(bed: &Bed) -> SecondTrain {
        let ns = bed.ns("train2");
        let device = format!("{}-2r", bed.name);
        let peer = format!("{}-2p", bed.name);
        // A leftover of an interrupted run, if any (quietly: there is none as a rule).
        let _ = Command::new("ip").args(["netns", "del", &ns]).output();
        let ip = |args: &[&str]| {
            let out = Command::new("ip").args(args).output().unwrap();
            assert!(
                out.status.success(),
                "ip {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        ip(&["netns", "add", &ns]);
        let train = SecondTrain { ns, device };
        let proxy_ns = bed.ns("proxy");
        ip(&[
            "link",
            "add",
            &train.device,
            "netns",
            &train.ns,
            "type",
            "veth",
            "peer",
            "name",
            &peer,
            "netns",
            &proxy_ns,
        ]);
        ip(&["-n", &train.ns, "link", "set", "lo", "up"]);
        ip(&[
            "-n",
            &train.ns,
            "addr",
            "add",
            "10.199.0.1/24",
            "dev",
            &train.device,
        ]);
        ip(&["-n", &train.ns, "link", "set", &train.device, "up"]);
        ip(&[
            "-n",
            &proxy_ns,
            "addr",
            "add",
            "10.199.0.2/24",
            "dev",
            &peer,
        ]);
        ip(&["-n", &proxy_ns, "link", "set", &peer, "up"]);
        train
    }
}

impl Drop for SecondTrain {
    fn drop(&mut self) {
        // Deleting the namespace deletes the veth pair, both ends.
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).status();
    }
}

/// One proxy, two trains with certificates of their own, at once: both carry passengers
/// concurrently, the proxy tells them apart in logs and metrics, a train whose relay restarts
/// is noticed as a second session of its name, and revoking one train leaves the other alone.
#[test]
fn two_trains_share_one_proxy_and_one_is_revoked_alone() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("w", 40, 20);
    start_server(&bed);
    // Train 1: the testbed's relay namespace, with the set's own certificate (`polycorn-relay`).
    let mut stack = start_stack(&bed, "polycorn", "minrtt", 2);
    let dir = stack.dir.path().to_path_buf();
    // Train 2's certificate ends in 20 days (a fleet renewing on a schedule).
    let out = Command::new(bin())
        .args(["tls", "relay", "--name", "train-2", "--valid-days", "20"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Train 2: a namespace of its own, one path, passengers over SOCKS5.
    let train = SecondTrain::new(&bed);
    let relay2 = dir.join("train-2.toml");
    let mut train2 = RelayConfig::new(parsed("10.199.0.2:7700"));
    train2.relay.mode = RelayMode::Polycorn;
    train2.relay.scheduler = "minrtt".into();
    train2.relay.congestion = Some("cubic".into());
    train2.relay.hold_time_s = 3;
    train2.paths = vec![PathConfig {
        name: "p0".into(),
        device: train.device.clone(),
        source: Some(parsed("10.199.0.1")),
        proxy: Some(parsed("10.199.0.2:7700")),
        mtu: None,
        modem: None,
        at_port: None,
    }];
    train2.intercept.socks5 = Some(parsed("127.0.0.1:1080"));
    train2.tls = Some(TlsFiles::new("ca.pem", "train-2.pem", "train-2.key"));
    train2.metrics.listen = Some(parsed("127.0.0.1:9100"));
    write_relay_config(&relay2, &train2);
    let start_train2 = |log: &str| {
        let mut d = Daemon::start(&train.ns, "relay", &relay2, dir.join(log));
        d.wait_for("subflow up", 1);
        d
    };
    let mut relay2_daemon = start_train2("train-2.log");
    let fetch2 = |down: u64| {
        in_ns(&train.ns, move || {
            Box::pin(async move {
                let go = async {
                    let s = socks_connect_via("127.0.0.1:1080", SERVER4.parse().unwrap()).await?;
                    loadgen::transfer(s, KB, down).await
                };
                tokio::time::timeout(Duration::from_secs(60), go)
                    .await
                    .map_err(|_| std::io::Error::other("timed out"))?
            })
        })
    };
    // Both trains at once, byte-checked.
    let t1 = {
        let client = bed.ns("client");
        std::thread::spawn(move || {
            in_ns(&client, || {
                Box::pin(async move {
                    tokio::time::timeout(
                        Duration::from_secs(60),
                        one(Via::Transparent4, KB, 8 * MB, None),
                    )
                    .await
                })
            })
        })
    };
    let r2 = fetch2(8 * MB);
    let r1 = t1.join().unwrap();
    assert!(
        matches!(r1, Ok(Ok(_))),
        "train 1: {r1:?}\n{}",
        tail(&stack.proxy.log())
    );
    assert!(r2.is_ok(), "train 2: {r2:?}\n{}", tail(&stack.proxy.log()));
    let log = stack.proxy.log();
    assert_eq!(
        log.matches("new relay session").count(),
        2,
        "one session per train:\n{}",
        tail(&log)
    );
    for relay in ["polycorn-relay", "train-2"] {
        assert!(
            log.contains(&format!("relay={relay} peer=")),
            "no session of {relay}:\n{}",
            tail(&log)
        );
    }
    // The proxy noticed train 2's certificate ends soon, and only that one.
    let warned: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("the relay's certificate"))
        .collect();
    assert!(
        warned.len() == 1
            && warned[0].contains("(train-2): valid until")
            && warned[0].contains("days left: renew it")
            && warned[0].contains("polycorn tls relay --name train-2"),
        "{warned:?}"
    );
    let check = Command::new("ip")
        .args(["netns", "exec", &bed.ns("proxy"), bin(), "status", "proxy"])
        .arg(stack.dir.path().join("proxy.toml"))
        .arg("--check")
        .output()
        .unwrap();
    let line = String::from_utf8_lossy(&check.stdout);
    assert_eq!(check.status.code(), Some(1), "{line}");
    assert!(
        line.starts_with("WARNING: ")
            && line.contains("TLS certificate of relay train-2 ends in 19 days"),
        "{line}"
    );
    // Metrics: each train's paths under its own name. `wait_paths` polls the proxy's
    // `polycorn_path_up` lines of both trains until `ok` holds (10 s).
    let up = |page: &str, relay: &str| -> Vec<String> {
        page.lines()
            .filter(|l| {
                l.starts_with("polycorn_path_up{") && l.contains(&format!("relay=\"{relay}\""))
            })
            .map(str::to_string)
            .collect()
    };
    let wait_paths = |ok: &dyn Fn(&[String], &[String]) -> bool, what: &str| {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let page = scrape_metrics(&bed.ns("proxy"));
            let (a, b) = (up(&page, "polycorn-relay"), up(&page, "train-2"));
            if ok(&a, &b) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "proxy metrics, {what}: got {a:?} {b:?}"
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    };
    let all = |lines: &[String], v: &str| lines.iter().all(|l| l.ends_with(v));
    wait_paths(
        &|a, b| a.len() == 2 && b.len() == 1 && all(a, " 1") && all(b, " 1"),
        "want 2 paths up for polycorn-relay, 1 for train-2",
    );
    // Train 2's relay crashes and comes back: a new session under the same name. The old one
    // has every path down (the crashed relay's kernel closed its subflow), so the proxy ends it
    // at once instead of holding it for its hold time, and says so; train 2 carries again.
    let _ = relay2_daemon.child.kill();
    let _ = relay2_daemon.child.wait();
    relay2_daemon = start_train2("train-2-again.log");
    stack.proxy.wait_for(
        "the relay opened a new session and its earlier one had every path down",
        1,
    );
    let log = stack.proxy.log();
    assert!(
        log.lines()
            .any(|l| l.contains("earlier one had every path down") && l.contains("train-2")),
        "{}",
        tail(&log)
    );
    // The proxy counts train 2's sessions and how the first ended, for an operator's alert on
    // a crashing relay; train 1 opened one and nothing ended (its series there, at 0).
    let page = scrape_metrics(&bed.ns("proxy"));
    for want in [
        "polycorn_relay_sessions_total{relay=\"train-2\"} 2",
        "polycorn_relay_sessions_ended_total{relay=\"train-2\",how=\"restarted\"} 1",
        "polycorn_relay_sessions_total{relay=\"polycorn-relay\"} 1",
    ] {
        assert!(page.lines().any(|l| l == want), "no `{want}` in:\n{page}");
    }
    for how in ["closed", "restarted", "lost"] {
        let zero = format!(
            "polycorn_relay_sessions_ended_total{{relay=\"polycorn-relay\",how=\"{how}\"}} 0"
        );
        assert!(page.lines().any(|l| l == zero), "no `{zero}` in:\n{page}");
    }
    assert!(fetch2(MB).is_ok(), "train 2 after its restart");
    // Revoke train 2 only: its subflow is cut and refused, train 1 carries on untouched.
    let file = dir.join("proxy.toml");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, revoking(&text, "train-2")).unwrap();
    // Where the logs stood before the reload: only what follows is checked below.
    let proxy_before = stack.proxy.log().len();
    let relay1_before = stack.relay.log().len();
    stack.proxy.hangup();
    stack
        .proxy
        .wait_for("relay revoked: its subflows were cut", 1);
    relay2_daemon.wait_for("the proxy refuses this relay's certificate as revoked", 1);
    // Train 2's passengers get a failure (after its relay's hold time, 3 s here), not a hang.
    let r = fetch2(KB);
    assert!(
        matches!(&r, Err(e) if e.to_string().contains("SOCKS5 reply")),
        "a passenger of a revoked train: {r:?}"
    );
    // The proxy shows train 2's path down (its session waits out the hold time), train 1's up.
    wait_paths(
        &|a, b| a.len() == 2 && all(a, " 1") && all(b, " 0"),
        "after revoking train-2",
    );
    fetch_ok(
        &bed,
        &stack,
        KB,
        8 * MB,
        "train 1 after train 2 was revoked",
    );
    // Train 1 may still replace an idle subflow of its own accord (make before break: a
    // refresh, a silent path on a loaded machine); what the revocation must not do is end any
    // of its subflows from the proxy's side or end its session.
    let log = stack.proxy.log();
    let since = log.get(proxy_before..).unwrap_or(&log);
    let relay1 = stack.relay.log();
    let relay1_since = relay1.get(relay1_before..).unwrap_or(&relay1);
    let touched: Vec<&str> = since
        .lines()
        .filter(|l| l.contains("relay=polycorn-relay"))
        .filter(|l| {
            l.contains("revoked")
                || (l.contains("subflow ended")
                    && !l.contains("replaced by a newer subflow for the same path"))
        })
        .collect();
    assert!(
        touched.is_empty(),
        "train 1's subflows were touched by train 2's revocation: {touched:?}\nproxy:\n{}\nrelay of train 1:\n{}",
        tail(&log),
        tail(&relay1)
    );
    assert!(
        !relay1_since.contains("subflow ended by the proxy"),
        "the proxy ended a subflow of train 1:\n{}",
        tail(&relay1)
    );
    let page = scrape_metrics(&bed.ns("proxy"));
    for want in [
        "polycorn_relay_sessions_total{relay=\"polycorn-relay\"} 1".to_string(),
        "polycorn_relay_sessions_ended_total{relay=\"polycorn-relay\",how=\"closed\"} 0".into(),
        "polycorn_relay_sessions_ended_total{relay=\"polycorn-relay\",how=\"restarted\"} 0".into(),
        "polycorn_relay_sessions_ended_total{relay=\"polycorn-relay\",how=\"lost\"} 0".into(),
    ] {
        assert!(page.lines().any(|l| l == want), "no `{want}` in:\n{page}");
    }
    drop(relay2_daemon);
    drop(train);
}
