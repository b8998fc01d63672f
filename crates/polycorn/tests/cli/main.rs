//! The `polycorn` binary as a user runs it.

use std::path::{Path, PathBuf};
use std::process::Command;

fn polycorn(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_polycorn"))
        .args(args)
        .output()
        .expect("run polycorn")
}

fn is_root() -> bool {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    if !root && std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("CLI testbed tests need root and CI=true forbids skipping them");
    }
    root
}

/// Held by the test that loads both cores (the soak) and by tests that measure delay, so
/// cargo's parallel test threads cannot turn one into noise in the other.
fn machine_to_myself() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `ip netns list`, to check a test left none of its namespaces behind.
fn namespaces() -> String {
    let out = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("run ip netns list");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn version_names_the_commit_the_binary_was_built_from() {
    let out = polycorn(&["--version"]);
    assert!(out.status.success());
    let v = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(v.starts_with("polycorn 0."), "{v}");
    let head = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    if let Some(head) = head {
        assert!(v.contains(&format!("({head}")), "{v} should name {head}");
    }
}

#[test]
fn output_into_a_closed_pipe_ends_quietly() {
    // `polycorn demo | head -1`: the reader is gone before the output is written.
    let mut child = Command::new(env!("CARGO_BIN_EXE_polycorn"))
        .arg("demo")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run polycorn demo");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("wait");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?} {err}", out.status);
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn proxy_with_a_congestion_control_the_kernel_lacks_stops_at_startup() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let out = polycorn(&["tls", "generate", d]);
    assert!(out.status.success(), "{out:?}");
    let cfg = dir.path().join("proxy.toml");
    std::fs::write(
        &cfg,
        format!(
            "[proxy]\nlisten = \"127.0.0.1:17700\"\ncongestion = \"nosuchcc\"\n\n[tls]\n\
             ca = \"{d}/ca.pem\"\ncert = \"{d}/proxy.pem\"\nkey = \"{d}/proxy.key\"\n"
        ),
    )
    .unwrap();
    let out = polycorn(&["proxy", "--config", cfg.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("proxy.congestion = \"nosuchcc\"") && err.contains("available"),
        "names the key and what the kernel has: {err}"
    );
}

/// Whether `tool` (of the systemd package, which scripts/lib.sh installs) runs here; a test
/// without it is skipped, except under CI=true, which forbids skipping.
fn have_systemd_tool(tool: &str) -> bool {
    let have = Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have {
        assert!(
            std::env::var("CI").map_or(true, |v| v != "true"),
            "{tool} missing (scripts/lib.sh installs systemd) and CI=true forbids skipping"
        );
        eprintln!("skipped: {tool} not installed");
    }
    have
}

/// The systemd units `config example` prints are ones systemd itself accepts
/// (`systemd-analyze verify`: every key known, the binary there and executable), run this very
/// binary, and check the configuration before every start.
#[test]
fn config_example_prints_systemd_units_that_systemd_accepts() {
    if !have_systemd_tool("systemd-analyze") {
        return;
    }
    let bin = env!("CARGO_BIN_EXE_polycorn");
    let dir = tempfile::tempdir().unwrap();
    // `config example WHAT`'s output.
    let example = |what: &str| {
        let out = polycorn(&["config", "example", what]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    // `systemd-analyze verify` accepts `unit` saved as `name`. Complaints about the unit name
    // its file (`…/polycorn-relay.service:12: Unknown key`).
    let verify = |name: &str, unit: &str| {
        let file = dir.path().join(name);
        std::fs::write(&file, unit).unwrap();
        let v = Command::new("systemd-analyze")
            .arg("verify")
            .arg(&file)
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&v.stderr);
        let ours: Vec<&str> = said.lines().filter(|l| l.contains(name)).collect();
        assert!(v.status.success() && ours.is_empty(), "{name}: {said}");
    };
    for role in ["relay", "proxy"] {
        let unit = example(&format!("{role}.service"));
        for line in [
            format!("ExecStartPre={bin} config check {role} /etc/polycorn/{role}.toml"),
            format!("ExecStart={bin} {role} --config /etc/polycorn/{role}.toml"),
            "Restart=always".to_string(),
        ] {
            assert!(unit.lines().any(|l| l == line), "{line} in\n{unit}");
        }
        // Both reload (SIGHUP), after a check of the file: the proxy applies
        // proxy.revoked_relays and the TLS files, the relay the TLS files.
        let reloads: Vec<&str> = unit
            .lines()
            .filter(|l| l.starts_with("ExecReload="))
            .collect();
        // (polycorn sends the signal itself: minimal images lack a `kill` program)
        assert_eq!(
            reloads,
            [format!(
                "ExecReload={bin} config check {role} /etc/polycorn/{role}.toml --reload $MAINPID"
            )]
        );
        verify(&format!("polycorn-{role}.service"), &unit);
    }
    // The socket unit beside the relay's service: the example's listener, transparent, bound
    // to the LAN device, and the interception removed when it stops.
    let unit = example("relay.socket");
    for line in [
        "ListenStream=0.0.0.0:7070".to_string(),
        "Transparent=yes".to_string(),
        "BindToDevice=lan0".to_string(),
        "Service=polycorn-relay.service".to_string(),
        format!("ExecStopPost={bin} relay --config /etc/polycorn/relay.toml --remove-interception"),
    ] {
        assert!(unit.lines().any(|l| l == line), "{line} in\n{unit}");
    }
    verify("polycorn-relay.socket", &unit);
    // The proxy's: its subflow listener, no interception to remove.
    let unit = example("proxy.socket");
    for line in [
        "ListenStream=0.0.0.0:7700",
        "Service=polycorn-proxy.service",
    ] {
        assert!(unit.lines().any(|l| l == line), "{line} in\n{unit}");
    }
    assert!(!unit.contains("ExecStopPost"), "{unit}");
    verify("polycorn-proxy.socket", &unit);
    // The nightly round on the proxy's host: LinkDB learns what the proxy recorded, then the
    // proxy reloads.
    let unit = example("linkdb-learn.service");
    for line in [
        format!(
            "ExecStart={bin} linkdb import --proxy-config /etc/polycorn/proxy.toml --past-days"
        ),
        "ExecStartPost=systemctl try-reload-or-restart polycorn-proxy.service".to_string(),
        "Type=oneshot".to_string(),
    ] {
        assert!(unit.lines().any(|l| l == line), "{line} in\n{unit}");
    }
    verify("polycorn-linkdb-learn.service", &unit);
    let timer = example("linkdb-learn.timer");
    assert!(timer.lines().any(|l| l == "Persistent=true"), "{timer}");
    verify("polycorn-linkdb-learn.timer", &timer);
    let out = polycorn(&["config", "example", "relay.timer"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("relay.timer") && err.contains("relay.service"),
        "{err}"
    );
}

/// `config check relay` on the train's gateway tells what the host lacks (a misnamed or
/// missing interface, an address the host does not have) as warnings naming the key, and
/// still accepts the file: a modem may come up after the relay starts.
#[test]
fn config_check_warns_about_interfaces_and_addresses_this_host_lacks() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("relay.toml");
    std::fs::write(
        &file,
        "[relay]\nmode = \"single\"\nproxy = \"192.0.2.1:7700\"\n\n\
         [[path]]\nname = \"a\"\ndevice = \"lo\"\nsource = \"127.0.0.1\"\n\n\
         [[path]]\nname = \"b\"\ndevice = \"nosuch9\"\nsource = \"192.0.2.77\"\n\n\
         [intercept]\nsocks5 = \"127.0.0.1:1080\"\nlan_device = \"nosuchlan0\"\n",
    )
    .unwrap();
    let out = polycorn(&["config", "check", "relay", file.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("ok: "));
    let warnings: Vec<&str> = err.lines().filter(|l| l.starts_with("warning: ")).collect();
    assert_eq!(warnings.len(), 3, "{err}");
    for want in [
        "path[1].device: no interface \"nosuch9\"",
        "path[1].source: 192.0.2.77 is not an address of this host",
        "intercept.lan_device: no interface \"nosuchlan0\"",
    ] {
        assert!(
            warnings
                .iter()
                .any(|w| w.contains(want) && w.contains("relay.toml")),
            "`{want}` in {err}"
        );
    }
}

/// `polycorn status` says what is wrong when it cannot read a daemon: no endpoint in the
/// configuration, nothing listening, something that is not a metrics endpoint. (Reading a
/// running relay and proxy: `relay_proxy::hundred_passengers_five_flows_each`.)
#[test]
fn status_names_what_keeps_it_from_reading_a_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("relay.toml");
    let relay = "[relay]\nmode = \"single\"\nproxy = \"192.0.2.1:7700\"\n\n\
                 [[path]]\nname = \"a\"\ndevice = \"lo\"\nsource = \"127.0.0.1\"\n\n\
                 [intercept]\nsocks5 = \"127.0.0.1:1080\"\n";
    std::fs::write(&file, relay).unwrap();
    let err = |args: &[&str]| {
        let out = polycorn(args);
        assert!(!out.status.success(), "{args:?} succeeded");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let f = file.to_str().unwrap();
    let e = err(&["status", "relay", f]);
    assert!(
        e.contains("relay.toml: no `[metrics] listen`") && e.contains("restart the relay"),
        "{e}"
    );
    // A port nothing listens on.
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = free.local_addr().unwrap().port();
    drop(free);
    std::fs::write(
        &file,
        format!("{relay}\n[metrics]\nlisten = \"0.0.0.0:{port}\"\n"),
    )
    .unwrap();
    let e = err(&["status", "relay", f, "--interval", "0"]);
    assert!(
        e.contains(&format!("127.0.0.1:{port} (metrics.listen of {f})"))
            && e.contains("cannot connect (is the daemon running"),
        "{e}"
    );
    // As a monitoring check: UNKNOWN, exit status 3, the reason on stdout.
    let out = polycorn(&["status", "relay", f, "--check"]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{said}");
    assert!(
        said.starts_with(&format!("UNKNOWN: metrics endpoint 127.0.0.1:{port}"))
            && said.contains("cannot connect"),
        "{said}"
    );
    let e = err(&["status", "relay", f, "--check", "--watch"]);
    assert!(e.contains("cannot be used with"), "{e}");
    let e = err(&["status", "relay", f, "--min-paths", "2"]);
    assert!(e.contains("--check"), "{e}");
    // Something that answers, but not with metrics.
    let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = other.local_addr().unwrap().to_string();
    let server = std::thread::spawn(move || {
        use std::io::{Read, Write};
        let (mut c, _) = other.accept().unwrap();
        let mut buf = [0u8; 256];
        let _ = c.read(&mut buf).unwrap();
        c.write_all(b"HTTP/1.0 404 Not Found\r\n\r\nnope").unwrap();
    });
    let e = err(&["status", "--metrics", &addr, "--interval", "0"]);
    server.join().unwrap();
    assert!(e.contains("answered HTTP/1.0 404 Not Found"), "{e}");
    let e = err(&["status", "--metrics", &addr, "--watch", "--interval", "0"]);
    assert!(e.contains("--watch needs an --interval above 0"), "{e}");
    let e = err(&["status", "proxy", f]);
    assert!(
        e.contains("relay.toml"),
        "a relay file read as a proxy's: {e}"
    );
}

/// One certificate per train, as an operator issues it, and what `config check` says of it.
#[test]
fn tls_relay_issues_a_named_certificate_that_config_check_reads() {
    let dir = tempfile::tempdir().unwrap();
    let creds = dir.path().join("creds");
    let train = dir.path().join("train-3");
    let run = |args: &[&str]| {
        let out = polycorn(args);
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, _, err) = run(&["tls", "generate", creds.to_str().unwrap()]);
    assert!(ok, "{err}");
    let (ok, out, err) = run(&[
        "tls",
        "relay",
        "--name",
        "train-3",
        "--out",
        train.to_str().unwrap(),
        creds.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("relay `train-3`"), "{out}");
    assert!(train.join("train-3.pem").is_file() && train.join("train-3.key").is_file());
    // A bad name, or a directory without the CA key: refused, saying why.
    let (ok, _, err) = run(&["tls", "relay", "--name", "Train 3", creds.to_str().unwrap()]);
    assert!(!ok);
    assert!(
        err.contains("relay name `Train 3`: only a-z, 0-9 and '-'"),
        "{err}"
    );
    let (ok, _, err) = run(&["tls", "relay", "--name", "train-4", train.to_str().unwrap()]);
    assert!(!ok);
    assert!(err.contains("ca.pem: file not found"), "{err}");
    let relay = dir.path().join("relay.toml");
    std::fs::write(
        &relay,
        "[relay]\nmode = \"polycorn\"\nproxy = \"192.0.2.1:7700\"\n\n\
         [[path]]\nname = \"a\"\ndevice = \"lo\"\nsource = \"127.0.0.1\"\n\n\
         [intercept]\nsocks5 = \"127.0.0.1:1080\"\n\n\
         [tls]\nca = \"creds/ca.pem\"\ncert = \"train-3/train-3.pem\"\nkey = \"train-3/train-3.key\"\n",
    )
    .unwrap();
    let (ok, out, err) = run(&["config", "check", "relay", relay.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(out.contains("relay name (tls.cert): train-3"), "{out}");
    let proxy = dir.path().join("proxy.toml");
    std::fs::write(
        &proxy,
        "[proxy]\nrevoked_relays = [\"train-3\", \"train-9\"]\n\n\
         [tls]\nca = \"creds/ca.pem\"\ncert = \"creds/proxy.pem\"\nkey = \"creds/proxy.key\"\n",
    )
    .unwrap();
    let (ok, out, err) = run(&["config", "check", "proxy", proxy.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(out.contains("revoked relays: train-3, train-9"), "{out}");

    // A renewed proxy certificate from the same CA (`tls proxy`), then files that do not
    // belong together: the check fails naming both, before saying ok.
    let (ok, _, err) = run(&["tls", "proxy", creds.to_str().unwrap()]);
    assert!(!ok && err.contains("proxy.pem: already exists") && err.contains("--force"));
    let (ok, out, err) = run(&[
        "tls",
        "proxy",
        "--valid-days",
        "20",
        "--force",
        creds.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("days left: renew it"), "{out}");
    let (ok, _, err) = run(&["config", "check", "proxy", proxy.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(err.contains("warning: tls.cert"), "{err}");
    std::fs::copy(creds.join("relay.key"), creds.join("proxy.key")).unwrap();
    let (ok, out, err) = run(&["config", "check", "proxy", proxy.to_str().unwrap()]);
    assert!(!ok && !out.contains("ok:"), "{out}");
    assert!(
        err.contains("proxy.key: private key does not match the certificate in")
            && err.contains("proxy.pem"),
        "{err}"
    );

    // `--reload PID` (the units' ExecReload) signals the process only when the file passes.
    // SIGHUP as the default: this test may run under `nohup`, whose "ignore" a child inherits.
    let mut target = std::process::Command::new("env")
        .args(["--default-signal=HUP", "sleep", "30"])
        .spawn()
        .unwrap();
    let pid = target.id().to_string();
    let (ok, _, err) = run(&[
        "config",
        "check",
        "proxy",
        proxy.to_str().unwrap(),
        "--reload",
        &pid,
    ]);
    assert!(!ok, "{err}");
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(
        target.try_wait().unwrap().is_none(),
        "signalled after a failed check"
    );
    let (ok, out, err) = run(&[
        "config",
        "check",
        "relay",
        relay.to_str().unwrap(),
        "--reload",
        &pid,
    ]);
    assert!(ok, "{err}");
    assert!(
        out.contains(&format!("reload: sent to process {pid}")),
        "{out}"
    );
    let status = target.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(1), "SIGHUP expected: {status}");
    let (ok, _, err) = run(&[
        "config",
        "check",
        "relay",
        relay.to_str().unwrap(),
        "--reload",
        "0",
    ]);
    assert!(!ok && err.contains("not a process id"), "{err}");
}

#[test]
fn schedulers_check_accepts_and_refuses_with_the_valid_names() {
    let ok = polycorn(&["schedulers", "--check", "hpr,minrtt,tpr,ori+er(k=2)"]);
    assert!(ok.status.success());
    assert_eq!(
        String::from_utf8_lossy(&ok.stdout).trim(),
        "ok: hpr,minrtt,tpr,ori+er(k=2)"
    );
    let bad = polycorn(&["schedulers", "--check", "hpr,fastest"]);
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.starts_with("error: unknown stage `fastest`") && err.contains("minrtt"),
        "{err}"
    );
    assert!(
        !err.contains("backtrace"),
        "no backtraces for operators: {err}"
    );
}

#[test]
fn trip_generate_writes_files_the_strict_parsers_accept() {
    use polycorn_link::trace::{DelaySeries, DeliveryTrace, Outages};
    let dir = std::env::temp_dir().join(format!("polycorn-tripgen-{}", std::process::id()));
    let out = polycorn(&[
        "trip",
        "generate",
        "--preset",
        "ktx",
        "--route-seed",
        "3",
        "--trip-seed",
        "4",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for carrier in ["KT", "SKT"] {
        for dir_name in ["down", "up"] {
            let name = dir.join(format!("{carrier}.{dir_name}"));
            let text = std::fs::read_to_string(&name).unwrap();
            let t = DeliveryTrace::parse(name.to_str().unwrap(), &text).unwrap();
            assert!(t.opportunity_count() > 1000, "{name:?}");
        }
        let name = dir.join(format!("{carrier}.delay.csv"));
        DelaySeries::parse(
            name.to_str().unwrap(),
            &std::fs::read_to_string(&name).unwrap(),
        )
        .unwrap();
        let name = dir.join(format!("{carrier}.outages.csv"));
        Outages::parse(
            name.to_str().unwrap(),
            &std::fs::read_to_string(&name).unwrap(),
        )
        .unwrap();
    }
    let ctx = std::fs::read_to_string(dir.join("context.csv")).unwrap();
    assert!(ctx.starts_with(
        "t_ms,lat,lon,speed_mps,heading_deg,cell_KT,rsrp_dbm_KT,cell_SKT,rsrp_dbm_SKT\n"
    ));
    assert!(ctx.lines().count() > 60, "1 Hz over a 70 s run");
    let ho = std::fs::read_to_string(dir.join("handovers.csv")).unwrap();
    assert!(ho.lines().count() > 4, "{ho}");
    // Same seeds, same files.
    let again = dir.with_extension("again");
    assert!(polycorn(&[
        "trip",
        "generate",
        "--preset",
        "ktx",
        "--route-seed",
        "3",
        "--trip-seed",
        "4",
        "--out",
        again.to_str().unwrap()
    ])
    .status
    .success());
    assert_eq!(
        std::fs::read(dir.join("KT.down")).unwrap(),
        std::fs::read(again.join("KT.down")).unwrap()
    );
    assert_eq!(
        std::fs::read(dir.join("handovers.csv")).unwrap(),
        std::fs::read(again.join("handovers.csv")).unwrap()
    );
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&again);
}

#[test]
fn a_killed_emulator_and_down_leave_nothing_behind() {
    if !is_root() {
        eprintln!("skipping: needs root");
        return;
    }
    let name = "pct-cli";
    let _ = polycorn(&["testbed", "down", "--name", name]);
    let up = polycorn(&[
        "testbed",
        "up",
        "--name",
        name,
        "--constant-mbit",
        "10",
        "--paths",
        "2",
    ]);
    assert!(
        up.status.success(),
        "{}",
        String::from_utf8_lossy(&up.stderr)
    );
    let state = std::fs::read_to_string(format!("/run/polycorn/testbed-{name}.json")).unwrap();
    let pid: u32 = state
        .split("\"emulator_pid\":")
        .nth(1)
        .and_then(|r| {
            r.trim_start()
                .split(|c: char| !c.is_ascii_digit())
                .next()
                .and_then(|d| d.parse().ok())
        })
        .expect("emulator PID recorded");
    assert!(
        std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "emulator running"
    );
    // The emulator carries traffic: ping proxy from relay over path 1.
    let ping = Command::new("ip")
        .args([
            "netns",
            "exec",
            &format!("{name}-relay"),
            "ping",
            "-c",
            "3",
            "-i",
            "0.2",
            "-I",
            "10.100.1.1",
            "10.100.1.2",
        ])
        .output()
        .unwrap();
    assert!(
        ping.status.success(),
        "{}",
        String::from_utf8_lossy(&ping.stdout)
    );
    // A crash: SIGKILL, no cleanup of its own.
    assert!(Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap()
        .success());
    std::thread::sleep(std::time::Duration::from_millis(200));
    let down = polycorn(&["testbed", "down", "--name", name]);
    assert!(
        down.status.success(),
        "{}",
        String::from_utf8_lossy(&down.stderr)
    );
    let ns = namespaces();
    assert!(!ns.contains(name), "namespaces left: {ns}");
    assert!(!std::path::Path::new(&format!("/run/polycorn/testbed-{name}.json")).exists());
    assert!(
        !std::path::Path::new(&format!("/run/polycorn/emu-{name}.log")).exists(),
        "emulator log left behind"
    );
    // The killed process is reaped by init, not left running (a zombie would still be 'Z').
    let alive =
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "));
    assert!(!alive, "emulator process {pid} still running");
    // No veth or TUN of the testbed left in the root namespace.
    let links = String::from_utf8_lossy(
        &Command::new("ip")
            .args(["-o", "link"])
            .output()
            .unwrap()
            .stdout,
    )
    .to_string();
    assert!(!links.contains("tmp-pc-"), "{links}");
}

#[test]
fn demo_runs_every_scenario() {
    let out = polycorn(&["demo"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for s in ["== tail", "== handover", "== blackout", "== idle"] {
        assert!(text.contains(s), "missing {s}");
    }
}

#[test]
fn testbed_paths_from_recorded_traces() {
    if !is_root() {
        eprintln!("skipping: needs root");
        return;
    }
    let _quiet = machine_to_myself();
    let dir = std::env::temp_dir().join(format!("polycorn-traces-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // 12 Mbit/s: one 1500-byte opportunity per millisecond, 1 s looping.
    let mm = dir.join("flat.down");
    std::fs::write(
        &mm,
        (1..=1000).map(|m| format!("{m}\n")).collect::<String>(),
    )
    .unwrap();
    let csv = dir.join("log.csv");
    // A G-NetTrack log whose pings' smallest RTT is 60 ms (the first second has none).
    let rows: String = (0..5)
        .map(|s| {
            format!(
                "2020.02.13_13.03.{:02},-8.3,51.9,0,B,12,5G,-100,-13,1,13,-103,20000,100,D,{p},{p}\n",
                10 + s,
                p = if s == 0 { "-" } else { "60" }
            )
        })
        .collect();
    std::fs::write(&csv, format!("Timestamp,Longitude,Latitude,Speed,Operatorname,CellID,NetworkMode,RSRP,RSRQ,SNR,CQI,RSSI,DL_bitrate,UL_bitrate,State,PINGAVG,PINGMIN\n{rows}")).unwrap();
    let name = "pct-trace";
    let _ = polycorn(&["testbed", "down", "--name", name]);
    // `count` pings relay -> proxy over path `i`, `interval` s apart, each waited for 1 s.
    let ping = |i: usize, count: &str, interval: &str| {
        Command::new("ip")
            .args([
                "netns",
                "exec",
                &format!("{name}-relay"),
                "ping",
                "-q",
                "-c",
                count,
                "-i",
                interval,
                "-W",
                "1",
                "-I",
                &format!("10.100.{i}.1"),
                &format!("10.100.{i}.2"),
            ])
            .output()
            .unwrap()
    };
    // Idle ping RTT of each path (ms, the smallest of 5: the path's delay, not the
    // scheduling jitter of a busy 2-core machine).
    let rtts = || -> Vec<f64> {
        (0..2)
            .map(|i| {
                let out = ping(i, "5", "0.2");
                let text = String::from_utf8_lossy(&out.stdout).into_owned();
                assert!(out.status.success(), "path {i}: {text}");
                // rtt min/avg/max/mdev = a/b/c/d ms
                let stats = text.rsplit(" = ").next().unwrap();
                stats.split('/').next().unwrap().parse().unwrap()
            })
            .collect()
    };
    // Without --delay-ms: the mahimahi path 20 ms each way, the log's path half its PINGMIN.
    // Then one value per path. Each RTT within 4 ms of twice the delay (opportunities are
    // 1 ms apart here; the log's 20 Mbit/s ones closer).
    for (delay, want) in [(None, [40.0, 60.0]), (Some("10,40"), [20.0, 80.0])] {
        let mut args = vec![
            "testbed",
            "up",
            "--name",
            name,
            "--trace",
            mm.to_str().unwrap(),
            "--trace",
            csv.to_str().unwrap(),
        ];
        if let Some(d) = delay {
            args.extend(["--delay-ms", d]);
        }
        let up = polycorn(&args);
        assert!(
            up.status.success(),
            "{}",
            String::from_utf8_lossy(&up.stderr)
        );
        let got = rtts();
        assert!(polycorn(&["testbed", "down", "--name", name])
            .status
            .success());
        for (g, w) in got.iter().zip(want) {
            assert!(
                *g >= w - 0.5 && *g <= w + 4.0,
                "--delay-ms {delay:?}: RTT {got:?}, want {want:?}"
            );
        }
    }
    // Outages beside a trace loop with it: dark half of every 2 s, so about half the pings
    // (sent 10 per second) get no answer — and the testbed says what it read.
    let dark = dir.join("dark.down");
    std::fs::write(
        &dark,
        (1..=2000).map(|m| format!("{m}\n")).collect::<String>(),
    )
    .unwrap();
    std::fs::write(dir.join("dark.outages.csv"), "start_ms,end_ms\n500,1500\n").unwrap();
    let up = polycorn(&[
        "testbed",
        "up",
        "--name",
        name,
        "--trace",
        dark.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&up.stderr).into_owned();
    assert!(up.status.success(), "{stderr}");
    assert!(
        stderr.contains("dark.outages.csv (1 outages, 1.0 s dark per 2.0 s loop)"),
        "{stderr}"
    );
    let dark_ping = ping(0, "40", "0.1");
    assert!(polycorn(&["testbed", "down", "--name", name])
        .status
        .success());
    let text = String::from_utf8_lossy(&dark_ping.stdout).into_owned();
    let received: u32 = text
        .split(" received")
        .next()
        .and_then(|h| h.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no ping summary: {text}"));
    assert!(
        (10..=30).contains(&received),
        "{received} of 40 answered: {text}"
    );
    // A delay count that fits neither one nor every path is refused before anything is made.
    let out = polycorn(&[
        "testbed",
        "up",
        "--name",
        name,
        "--trace",
        mm.to_str().unwrap(),
        "--delay-ms",
        "10,20,30",
    ]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("3 values for 1 paths"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!namespaces().contains(name));
    // A malformed trace is refused with file:line, and nothing is left behind.
    let bad = dir.join("bad.down");
    std::fs::write(&bad, "1\n2\nx\n").unwrap();
    let out = polycorn(&[
        "testbed",
        "up",
        "--name",
        name,
        "--trace",
        bad.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("bad.down:3: not a non-negative integer"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ns = namespaces();
    assert!(!ns.contains(name), "{ns}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn linkdb_import_is_idempotent_and_validate_prints_the_categories() {
    let dir = std::env::temp_dir().join(format!("polycorn-cli-linkdb-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let db = format!("sqlite:{}", dir.join("l.sqlite").display());
    let trip = dir.join("trip");
    let out = polycorn(&[
        "trip",
        "generate",
        "--preset",
        "ktx",
        "--route-seed",
        "4",
        "--trip-seed",
        "2",
        "--interruptions",
        "builtin",
        "--out",
        trip.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = |o: &std::process::Output| String::from_utf8_lossy(&o.stdout).into_owned();
    let out = polycorn(&[
        "linkdb",
        "import",
        "--db",
        &db,
        "--trip-dir",
        trip.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text(&out).contains("1 trips (1 new, 0 already stored)"),
        "{}",
        text(&out)
    );
    // The same trip generated in process has the same key: nothing new.
    let out = polycorn(&[
        "linkdb",
        "import",
        "--db",
        &db,
        "--simulate",
        "3",
        "--preset",
        "ktx",
        "--route-seed",
        "4",
        "--first-trip-seed",
        "1",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text(&out).contains("3 trips (2 new, 1 already stored)"),
        "{}",
        text(&out)
    );
    let out = polycorn(&["linkdb", "validate", "--db", &db]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t = text(&out);
    for needle in [
        "route ktx/route4: 3 trips in 3 rides",
        "paper",
        "risk",
        "loctable",
        "failures",
        "failures judged at the loss of the source cell",
        "only handovers out of a cell with a failure in the other rides",
    ] {
        assert!(t.contains(needle), "{needle} missing in\n{t}");
    }
    // Both views print a row per predictor and the "all" total.
    assert_eq!(t.matches("\npaper     all").count(), 2, "{t}");
    let out = polycorn(&["linkdb", "validate", "--db", &db, "--truth", "start"]);
    assert!(text(&out).contains("failures judged at their start"));
    let out = polycorn(&["linkdb", "validate", "--db", &db, "--truth", "end"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--truth"));
    let out = polycorn(&["linkdb", "analyze", "--db", &db]);
    assert!(out.status.success());
    assert!(text(&out).contains("Distance to EHP < 200m"));
    let out = polycorn(&["linkdb", "stats", "--db", &db]);
    assert!(text(&out).contains("3 trips"), "{}", text(&out));
    // A broken trip directory names the file.
    std::fs::write(trip.join("handovers.csv"), "carrier,from_cell\nA,1\n").unwrap();
    let out = polycorn(&[
        "linkdb",
        "import",
        "--db",
        &db,
        "--trip-dir",
        trip.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("handovers.csv:1: no `to_cell` column"));
    let out = polycorn(&["linkdb", "stats", "--db", "mysql://nope"]);
    assert!(!out.status.success());
    std::fs::remove_dir_all(dir).unwrap();
}

/// LinkDB from what relays saw: simulated rides stored as their relays would have recorded
/// them (`--as-seen-by-relay`, with how they compare to the truth), validated against the truth
/// (`--train-source relay`); `--ride-log`'s options checked before anything is stored.
#[test]
fn linkdb_learns_from_what_relays_saw() {
    let dir = std::env::temp_dir().join(format!("polycorn-cli-relaylog-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let db = format!("sqlite:{}", dir.join("l.sqlite").display());
    let text = |o: &std::process::Output| String::from_utf8_lossy(&o.stdout).into_owned();
    let err = |o: &std::process::Output| String::from_utf8_lossy(&o.stderr).into_owned();
    let sim = ["--simulate", "3", "--preset", "ktx", "--route-seed", "4"];
    let mut args = vec!["linkdb", "import", "--db", &db];
    args.extend(sim);
    args.push("--as-seen-by-relay");
    let out = polycorn(&args);
    assert!(out.status.success(), "{}", err(&out));
    let t = text(&out);
    assert!(t.contains("3 trips (3 new, 0 already stored)"), "{t}");
    assert!(
        t.contains("as the relay saw them: ") && t.contains("failures found within 2 s"),
        "{t}"
    );
    assert!(
        t.contains("handovers inferred") || t.contains("where the loss was placed"),
        "{t}"
    );
    let mut args = vec!["linkdb", "import", "--db", &db];
    args.extend(sim);
    let out = polycorn(&args);
    assert!(out.status.success(), "{}", err(&out));
    let out = polycorn(&["linkdb", "stats", "--db", &db]);
    let t = text(&out);
    assert!(t.contains("relay ") && t.contains("sim "), "{t}");
    let out = polycorn(&[
        "linkdb",
        "validate",
        "--db",
        &db,
        "--source",
        "sim",
        "--train-source",
        "relay",
        "--models",
        "paper",
    ]);
    assert!(out.status.success(), "{}", err(&out));
    let t = text(&out);
    assert!(
        t.contains("predictors built from the 3 relay trips of the route")
            && t.contains("route ktx/route4: 3 trips in 3 rides"),
        "{t}"
    );
    // `linkdb <cmd> --db … <args>` fails, saying `want`.
    let refused = |cmd: &str, args: Vec<&str>, want: &str| {
        let mut a = vec!["linkdb", cmd, "--db", &db];
        a.extend(args);
        let out = polycorn(&a);
        assert!(
            !out.status.success() && err(&out).contains(want),
            "{want}: {}",
            err(&out)
        );
    };
    for (args, want) in [
        (
            vec![
                "--ride-log",
                "x.csv",
                "--track-origin",
                "1,2",
                "--track-heading",
                "0",
            ],
            "--ride-log needs --route",
        ),
        (
            vec![
                "--ride-log",
                "x.csv",
                "--route",
                "r",
                "--track-heading",
                "0",
            ],
            "--track-origin",
        ),
        (vec!["--route", "r"], "go with --ride-log"),
        (vec!["--past-days"], "go with --ride-log"),
        (
            vec!["--ucc5g", "x", "--as-seen-by-relay"],
            "--as-seen-by-relay applies to",
        ),
    ] {
        refused("import", args, want);
    }
    for (args, want) in [
        (
            vec!["--train-source", "modem"],
            "source `modem` is not one of",
        ),
        (
            vec!["--train-source", "relay", "--risk-thresholds", "0.1"],
            "do not go together",
        ),
    ] {
        refused("validate", args, want);
    }
    // A nightly import of a live record directory leaves today's logs for later.
    let logs = dir.join("record").join("train-1");
    std::fs::create_dir_all(&logs).unwrap();
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let today = polycorn_net::context::record_day(secs * 1000);
    let mut log = String::from("t_ms,lat,lon,speed_mps,heading_deg,cell_A,rsrp_dbm_A\n");
    for k in 0..5 {
        log += &format!(
            "{},{:.7},116.0,80.0,0.0,{},-90.0\n",
            k * 1000,
            39.0 + 0.0007 * k as f64,
            1 + k / 3
        );
    }
    for day in ["20200101", today.as_str()] {
        std::fs::write(logs.join(format!("context-{day}T060000Z.csv")), &log).unwrap();
    }
    let record = dir.join("record");
    let out = polycorn(&[
        "linkdb",
        "import",
        "--db",
        &db,
        "--ride-log",
        record.to_str().unwrap(),
        "--route",
        "north",
        "--track-origin",
        "39.0,116.0",
        "--track-heading",
        "0",
        "--direction",
        "up",
        "--past-days",
    ]);
    assert!(out.status.success(), "{}", err(&out));
    let t = text(&out);
    assert!(
        t.contains("1 trips (1 new") && t.contains("1 files left for later"),
        "{t}"
    );

    // What a proxy recorded, learnt from its own configuration (the nightly unit's command).
    let tls = dir.join("tls");
    let out = polycorn(&["tls", "generate", tls.to_str().unwrap()]);
    assert!(out.status.success(), "{}", err(&out));
    let learnt = dir.join("learnt.sqlite");
    let proxy_rec = dir.join("proxy-record");
    let toml = format!(
        "[tls]\nca = \"tls/ca.pem\"\ncert = \"tls/proxy.pem\"\nkey = \"tls/proxy.key\"\n\n\
         [context]\nrecord = \"proxy-record\"\n\n\
         [linkdb]\ndb = \"sqlite:{}\"\nroute = \"north\"\ncarriers = [\"A\"]\n\
         track_origin = [39.0, 116.0]\ntrack_heading_deg = 0.0\n",
        learnt.display()
    );
    let proxy_toml = dir.join("proxy.toml");
    std::fs::write(&proxy_toml, &toml).unwrap();
    let learn = || {
        polycorn(&[
            "linkdb",
            "import",
            "--proxy-config",
            proxy_toml.to_str().unwrap(),
            "--past-days",
            "--direction",
            "up",
        ])
    };
    // Before the proxy has recorded anything.
    let out = learn();
    assert!(out.status.success(), "{}", err(&out));
    assert!(
        text(&out).contains("nothing recorded yet"),
        "{}",
        text(&out)
    );
    std::fs::create_dir_all(proxy_rec.join("train-1")).unwrap();
    for day in ["20200101", today.as_str()] {
        std::fs::write(
            proxy_rec
                .join("train-1")
                .join(format!("context-{day}T060000Z.csv")),
            &log,
        )
        .unwrap();
    }
    let out = learn();
    assert!(out.status.success(), "{}", err(&out));
    let t = text(&out);
    assert!(
        t.contains(&format!("sqlite:{}", learnt.display()))
            && t.contains("1 trips (1 new")
            && t.contains("1 files left for later"),
        "{t}"
    );
    // The next night: the past day's log is not read again; a new one is.
    let t = text(&learn());
    assert!(
        t.contains("0 trips (0 new, 0 already stored)")
            && t.contains("1 files imported before, not read again"),
        "{t}"
    );
    std::fs::write(
        proxy_rec
            .join("train-1")
            .join("context-20200102T060000Z.csv"),
        &log,
    )
    .unwrap();
    let t = text(&learn());
    assert!(
        t.contains("1 trips (1 new, 0 already stored)")
            && t.contains("1 files imported before, not read again"),
        "{t}"
    );
    // With `[linkdb] keep_days`, the night also deletes the rides of days long past; the
    // ride of yesterday stays.
    let yesterday = polycorn_net::context::record_day(secs * 1000 - 86_400_000);
    std::fs::write(
        proxy_rec
            .join("train-1")
            .join(format!("context-{yesterday}T060000Z.csv")),
        &log,
    )
    .unwrap();
    std::fs::write(
        &proxy_toml,
        toml.replace(
            "track_heading_deg = 0.0\n",
            "track_heading_deg = 0.0\nkeep_days = 30\n",
        ),
    )
    .unwrap();
    let t = text(&learn());
    assert!(
        t.contains("1 trips (1 new, 0 already stored)")
            && t.contains("pruned: deleted 2 rides that began before")
            && t.contains("kept 1 newer and 0 of no known start"),
        "{t}"
    );
    let learnt_db = format!("sqlite:{}", learnt.display());
    let t = text(&polycorn(&["linkdb", "stats", "--db", &learnt_db]));
    let y = format!(
        "{}-{}-{}",
        &yesterday[..4],
        &yesterday[4..6],
        &yesterday[6..]
    );
    assert!(
        t.contains("relay   north")
            && t.contains(&format!(
                "rides began from {y} 06:00:00Z to {y} 06:00:00Z (0 of no known start)"
            )),
        "{t}"
    );
    // The proxy's history moved into another database (a fleet's PostgreSQL in production):
    // the rides with when they began, and the logs already read, so the next night reads none
    // again.
    let moved = dir.join("moved.sqlite");
    let moved_db = format!("sqlite:{}", moved.display());
    let copy = || {
        polycorn(&[
            "linkdb",
            "import",
            "--db",
            &moved_db,
            "--from-db",
            &learnt_db,
        ])
    };
    let out = copy();
    assert!(out.status.success(), "{}", err(&out));
    let t = text(&out);
    assert!(
        t.contains(&format!(
            "from {learnt_db}: 1 trips (1 new, 0 already stored)"
        )) && t.contains("3 context logs marked read"),
        "{t}"
    );
    assert!(text(&copy()).contains("1 trips (0 new, 1 already stored)"));
    let t = text(&polycorn(&["linkdb", "stats", "--db", &moved_db]));
    assert!(
        t.contains(&format!("rides began from {y} 06:00:00Z to {y} 06:00:00Z")),
        "{t}"
    );
    std::fs::write(
        &proxy_toml,
        toml.replace(&learnt.display().to_string(), &moved.display().to_string())
            .replace(
                "track_heading_deg = 0.0\n",
                "track_heading_deg = 0.0\nkeep_days = 30\n",
            ),
    )
    .unwrap();
    let t = text(&learn());
    assert!(
        t.contains("0 trips (0 new, 0 already stored)")
            && t.contains("3 files imported before, not read again"),
        "{t}"
    );
    refused("import", vec!["--from-route", "north"], "--from-db");
    refused(
        "import",
        vec!["--from-db", "mysql://x"],
        "open --from-db mysql://x",
    );
    // By hand: a dry run lists, then the rides go; the simulated ones stay.
    let prune = |extra: &[&str]| {
        let mut a = vec!["linkdb", "prune", "--db", &db, "--older-than-days", "30"];
        a.extend(extra);
        polycorn(&a)
    };
    let out = prune(&["--route", "north", "--dry-run"]);
    assert!(out.status.success(), "{}", err(&out));
    let t = text(&out);
    assert!(
        t.contains("would delete 1 rides")
            && t.contains("north train-1/context-20200101T060000Z-1 2020-01-01 06:00:00Z"),
        "{t}"
    );
    let t = text(&prune(&[]));
    assert!(
        t.contains("deleted 1 rides") && t.contains("kept 0 newer and 6 of no known start"),
        "{t}"
    );
    let t = text(&prune(&[]));
    assert!(t.contains("deleted 0 rides"), "{t}");
    for (args, want) in [
        (vec!["--older-than-days", "0"], "0 is not in 1..=36500"),
        (
            vec!["--older-than-days", "30", "--source", "x"],
            "source `x`",
        ),
        (vec![], "--older-than-days"),
    ] {
        refused("prune", args, want);
    }
    // Nothing to learn without [context] record; --proxy-config takes no --db or --ride-log.
    std::fs::write(
        &proxy_toml,
        toml.replace("[context]\nrecord = \"proxy-record\"\n", ""),
    )
    .unwrap();
    let out = learn();
    assert!(
        !out.status.success() && err(&out).contains("no [context] record"),
        "{}",
        err(&out)
    );
    for extra in [
        ["--db", "sqlite:x.sqlite"],
        ["--ride-log", "x"],
        ["--monitor-lag-ms", "500"],
    ] {
        let mut args = vec!["linkdb", "import", "--proxy-config", "p.toml"];
        args.extend(extra);
        let out = polycorn(&args);
        assert!(
            !out.status.success() && err(&out).contains("cannot be used with"),
            "{}",
            err(&out)
        );
    }
    // A monitor's lag is undone where there are cells to move: ride logs, or the relays' view
    // of simulated rides; a simulated lag only on the latter.
    for (args, want) in [
        (
            vec!["--simulate", "1", "--monitor-lag-ms", "500"],
            "--monitor-lag-ms applies with --ride-log or --as-seen-by-relay",
        ),
        (
            vec!["--simulate", "1", "--simulate-monitor-lag-s", "1"],
            "--simulate-monitor-lag-s applies with --as-seen-by-relay",
        ),
        (
            vec![
                "--simulate",
                "1",
                "--as-seen-by-relay",
                "--monitor-lag-ms",
                "60001",
            ],
            "60001",
        ),
    ] {
        let mut all = vec!["linkdb", "import", "--db", "sqlite:x.sqlite"];
        all.extend(args);
        let out = polycorn(&all);
        assert!(
            !out.status.success() && err(&out).contains(want),
            "{}",
            err(&out)
        );
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// Runs `testbed calibrate` (cubic only, 15 s per run, route 1) in real namespaces under the
/// testbed name `name` with `extra` arguments, asserts it succeeded and left no namespace
/// behind, and returns its stdout and output directory.
fn calibrate_in_namespaces(name: &str, port: &str, extra: &[&str]) -> (String, PathBuf) {
    let dir = std::env::temp_dir().join(format!("polycorn-{name}-{}", std::process::id()));
    let _ = polycorn(&["testbed", "down", "--name", name]);
    let mut args = vec![
        "testbed",
        "calibrate",
        "--preset",
        "hsr",
        "--minutes",
        "0.25",
        "--cc",
        "cubic",
        "--model-trips",
        "2",
        "--name",
        name,
        "--port",
        port,
        "--out",
        dir.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let out = polycorn(&args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ns = namespaces();
    assert!(!ns.contains(name), "{ns}");
    (stdout, dir)
}

fn read_json(p: &Path) -> serde_json::Value {
    serde_json::from_str(
        &std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())),
    )
    .unwrap()
}

/// The 1 s windows behind carrier A's throughput quartiles under cubic in a calibration table.
fn throughput_windows(t: &serde_json::Value) -> u64 {
    t["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["metric"] == "downlink throughput p50 (Mbit/s)" && r["carrier"] == "A")
        .expect("throughput row of A")["measured"]["cubic"]["n"]
        .as_u64()
        .unwrap()
}

/// Each run in `dir/<sub>` has its raw samples and its own table with windows measured, and
/// the pooled table counts exactly the runs' windows together.
fn assert_pooled_over_runs(dir: &Path, pooled: &serde_json::Value, subs: &[&str]) {
    let per_run: Vec<u64> = subs
        .iter()
        .map(|sub| {
            let d = dir.join(sub);
            for f in ["goodput-cubic.csv", "ss-cubic.csv", "table.txt"] {
                assert!(d.join(f).exists(), "{} missing", d.join(f).display());
            }
            throughput_windows(&read_json(&d.join("table.json")))
        })
        .collect();
    assert!(per_run.iter().all(|n| *n >= 5), "{per_run:?}");
    assert_eq!(throughput_windows(pooled), per_run.iter().sum::<u64>());
}

/// `testbed calibrate --trips 2` measures two trips in real namespaces, pools their samples
/// (the pooled table counts every trip's windows), writes each trip's own table, and removes
/// its testbed.
#[test]
fn calibrate_over_two_trips_pools_their_samples_and_leaves_nothing_behind() {
    if !is_root() {
        eprintln!("skipping: needs root");
        return;
    }
    let (stdout, dir) =
        calibrate_in_namespaces("pct-cal", "5900", &["--trip-seed", "3", "--trips", "2"]);
    assert!(stdout.contains("trips 3-4, samples pooled"), "{stdout}");
    let pooled = read_json(&dir.join("table.json"));
    assert_eq!(pooled["trips"].as_array().unwrap().len(), 2, "{pooled}");
    assert_eq!(pooled["complete"], true);
    assert!(
        pooled["polycorn_version"]
            .as_str()
            .is_some_and(|v| v.starts_with(env!("CARGO_PKG_VERSION"))),
        "{pooled}"
    );
    assert_pooled_over_runs(&dir, &pooled, &["trip-3", "trip-4"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--all-stretches` measures both of route 1's stretches above 250 km/h as runs of their own,
/// the second from well after the first (the slow-down between them is not emulated), and
/// pools their samples.
#[test]
fn calibrate_all_stretches_measures_each_stretch_at_speed_and_pools_them() {
    if !is_root() {
        eprintln!("skipping: needs root");
        return;
    }
    let (stdout, dir) =
        calibrate_in_namespaces("pct-cas", "6000", &["--trip-seed", "2", "--all-stretches"]);
    assert!(
        stdout.contains("2 stretches at speed, samples pooled"),
        "{stdout}"
    );
    let pooled = read_json(&dir.join("table.json"));
    assert_eq!(pooled["all_stretches"], true);
    let runs = pooled["trips"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "{pooled}");
    let at = |k: usize, f: &str| runs[k][f].as_u64().unwrap();
    assert_eq!((at(0, "stretch"), at(1, "stretch")), (1, 2));
    assert!(
        at(1, "offset_ms") > at(0, "offset_ms") + 250_000,
        "the second stretch starts after the first one's 250+ s at speed: {pooled}"
    );
    assert_pooled_over_runs(&dir, &pooled, &["trip-2-stretch-1", "trip-2-stretch-2"]);
    // `--model-only` plans the same windows: its trip-model column is the measured run's.
    let model = calibrate_model_only(&["--trip-seed", "2", "--all-stretches", "--minutes", "0.25"]);
    assert_eq!(
        model_column(&model),
        model_column(&pooled),
        "{model}\n{pooled}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `testbed calibrate --model-only` (route 1, 2 model trips) with `extra` arguments and
/// returns its table.json.
fn calibrate_model_only(extra: &[&str]) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec![
        "testbed",
        "calibrate",
        "--preset",
        "hsr",
        "--model-only",
        "--model-trips",
        "2",
        "--out",
        dir.path().to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let out = polycorn(&args);
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    for f in ["table.txt", "table.csv"] {
        assert!(dir.path().join(f).exists(), "{f} missing");
    }
    read_json(&dir.path().join("table.json"))
}

/// `(metric, carrier, trip model value)` of every row with a trip-model value.
fn model_column(t: &serde_json::Value) -> Vec<(String, String, f64)> {
    t["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| {
            Some((
                r["metric"].as_str()?.to_string(),
                r["carrier"].as_str()?.to_string(),
                r["trip_model"].as_f64()?,
            ))
        })
        .collect()
}

/// `--model-only` builds no testbed: the trip model's column over the planned stretches of
/// two trips, with nothing measured.
#[test]
fn calibrate_model_only_reports_the_trip_model_without_a_testbed() {
    // (Other tests build testbeds at the same time, so the namespace list is not compared.)
    let t = calibrate_model_only(&["--trip-seed", "3", "--trips", "2", "--all-stretches"]);
    assert_eq!(t["model_only"], true);
    let runs = t["trips"].as_array().unwrap();
    assert_eq!(runs.len(), 4, "two stretches of two trips: {t}");
    assert!(
        runs.iter()
            .all(|r| r["measured_s"].as_f64().unwrap() > 200.0),
        "{t}"
    );
    let column = model_column(&t);
    let capacity = |q: &str, c: &str| {
        column
            .iter()
            .find(|(m, k, _)| m == &format!("downlink throughput {q} (Mbit/s)") && k == c)
            .unwrap_or_else(|| panic!("no {q} of {c}: {t}"))
            .2
    };
    for c in ["A", "B"] {
        assert!(
            0.0 < capacity("p25", c) && capacity("p25", c) < capacity("p50", c),
            "{t}"
        );
        assert!(capacity("p50", c) < capacity("p75", c), "{t}");
    }
    let rows = t["rows"].as_array().unwrap();
    assert!(
        rows.iter()
            .all(|r| r["measured"].as_object().is_none_or(|m| m.is_empty())),
        "nothing is measured: {t}"
    );
    // Handover statistics are judged from the model as in a measured run.
    assert!(rows.iter().any(|r| r["metric"]
        .as_str()
        .unwrap()
        .starts_with("handover interval")
        && r["trip_model_within_tolerance"].is_boolean()));
}

/// `bench pool` parses as a subcommand beside the bench's own options and names what it
/// cannot read (pooling real rides is tested in the bench's unit tests).
#[test]
fn bench_pool_names_what_it_cannot_read() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nothing-here");
    let out = polycorn(&["bench", "pool", missing.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("error: ") && err.contains("nothing-here: no such directory"),
        "{err}"
    );
    let out = polycorn(&["bench", "pool", dir.path().to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("not a bench output directory"),
        "{err}"
    );
    // `--systems` is checked before any ride is read.
    let out = polycorn(&[
        "bench",
        "pool",
        dir.path().to_str().unwrap(),
        "--systems",
        "hrsch;",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("an empty system name"),
        "{err}"
    );
    // No directory at all is a usage error, not a run of the bench.
    let out = polycorn(&["bench", "pool"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("Usage"));
}

#[test]
fn compare_real_names_a_missing_dataset_and_reads_the_real_one_when_present() {
    let out = polycorn(&[
        "testbed",
        "compare-real",
        "--hsr-mptcp",
        "/nonexistent/hsr-mptcp",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/hsr-mptcp"), "{err}");
    let data =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/hsr-mptcp");
    if !data.is_dir() {
        eprintln!("{} absent: the real-data half skipped", data.display());
        return;
    }
    let out = polycorn(&[
        "testbed",
        "compare-real",
        "--hsr-mptcp",
        data.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t = String::from_utf8_lossy(&out.stdout);
    assert!(t.contains("real HSR MPTCP (hsr-mptcp, 2018)"), "{t}");
    assert!(t.contains("(12/12)"), "{t}");
}

/// A researcher runs the bench on their own recorded paths: two mahimahi traces become two
/// paths, every system replays them, and the results say where they came from. A bad trace is
/// refused before anything is built, naming the file and the line.
#[test]
fn bench_runs_on_recorded_traces_and_names_them() {
    let dir = tempfile::tempdir().unwrap();
    // 12 Mbit/s (one 1500-byte opportunity per ms) and 6 Mbit/s with a 1 s gap every 4 s.
    let fast = dir.path().join("fast.down");
    let slow = dir.path().join("slow.down");
    std::fs::write(
        &fast,
        (1..=1000).map(|m| format!("{m}\n")).collect::<String>(),
    )
    .unwrap();
    std::fs::write(
        &slow,
        (1..=4000)
            .filter(|m| m % 2 == 0 && *m <= 3000)
            .map(|m| format!("{m}\n"))
            .chain(std::iter::once("4000\n".to_string()))
            .collect::<String>(),
    )
    .unwrap();
    let bad = dir.path().join("bad.down");
    std::fs::write(&bad, "1\n2\nsoon\n").unwrap();
    let out = polycorn(&[
        "bench",
        "--trace",
        fast.to_str().unwrap(),
        "--trace",
        bad.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.down:3"), "{err}");
    // A trace and a preset's trip cannot both be the conditions.
    let out = polycorn(&[
        "bench",
        "--trace",
        fast.to_str().unwrap(),
        "--trip-seed",
        "3",
    ]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot be used with"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    if !is_root() {
        eprintln!("skipping the run: needs root");
        return;
    }
    let res = dir.path().join("out");
    let out = polycorn(&[
        "bench",
        "--quick",
        "--trace",
        fast.to_str().unwrap(),
        "--trace",
        slow.to_str().unwrap(),
        "--delay-ms",
        "30,45",
        "--systems",
        "vanilla",
        "--workloads",
        "im",
        "--trips",
        "2",
        "--name",
        "pctrc",
        "--out",
        res.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout
            .matches("outputs complete and consistent (1 systems)")
            .count(),
        2,
        "{stdout}"
    );
    assert!(res.join("pooled.json").exists());
    // Summaries name the traces, not a route or handover settings they do not have.
    assert!(
        stdout.contains("| recorded traces (traces-") && stdout.contains(": fast, slow) ride 2 "),
        "{stdout}"
    );
    assert!(
        stdout.contains("of recorded traces (traces-") && !stdout.contains("route 0"),
        "{stdout}"
    );
    let html = std::fs::read_to_string(res.join("trip-1").join("report.html")).unwrap();
    assert!(
        html.contains("<b>recorded traces</b>")
            && html.contains("no handovers")
            && html.contains("one-way delay fast: 30 ms; slow: 45 ms"),
        "report header"
    );
    assert!(
        stdout.contains("one-way delay: fast: 30 ms; slow: 45 ms"),
        "{stdout}"
    );
    // Ride k replays the k-th window of the traces.
    let mut from = Vec::new();
    for ride in ["trip-1", "trip-2"] {
        let r = read_json(&res.join(ride).join("results.json"));
        assert_eq!(r["meta"]["preset"], "traces", "{}", r["meta"]);
        assert!(r["meta"]["trip_model"]
            .as_str()
            .is_some_and(|m| m.starts_with("traces-")));
        assert_eq!(r["meta"]["carriers"], serde_json::json!(["fast", "slow"]));
        assert!(r["meta"]["handover_prediction"]
            .as_str()
            .is_some_and(|p| p.starts_with("none: recorded traces")));
        assert_eq!(
            r["meta"]["path_delays"],
            serde_json::json!(["fast: 30 ms", "slow: 45 ms"])
        );
        assert_eq!(
            r["meta"]["trace_files"],
            serde_json::json!([fast.to_str().unwrap(), slow.to_str().unwrap()])
        );
        assert_eq!(r["runs"][0]["late_paths"], serde_json::json!([]));
        assert_eq!(r["trip"]["handovers"], serde_json::json!([]));
        from.push(r["meta"]["window_from_s"].as_f64().unwrap());
        // Every answer came back, no faster than the faster path's round trip (2 x 30 ms).
        for run in r["runs"].as_array().unwrap() {
            let im = run["im_messages"].as_array().unwrap();
            assert!(!im.is_empty(), "{run}");
            for m in im {
                // [users, user, message, sent s, delivery s]
                let d = m[4].as_f64().unwrap_or_else(|| panic!("unanswered: {m}"));
                assert!(d >= 0.060, "{m}");
            }
        }
    }
    let window = read_json(&res.join("trip-1").join("results.json"))["meta"]["window_s"]
        .as_f64()
        .unwrap();
    assert_eq!(from[0], 0.0);
    assert!((from[1] - window).abs() < 0.011, "{from:?} window {window}");
    assert!(
        !namespaces().contains("pctrc"),
        "namespaces left: {}",
        namespaces()
    );
}

/// A researcher benches uploads (the relay schedules them) over the emulated HSR trip: every
/// byte is checked at the server, every upload is timed by its arrival there and is never
/// faster than the oracle sending at every uplink's full capacity, the relay's scheduler did
/// the work, and nothing is left behind.
#[test]
fn bench_uploads_cross_the_relay_checked_and_timed_at_the_server() {
    if !is_root() {
        eprintln!("skipping: needs root");
        return;
    }
    let out = polycorn(&["bench", "--workloads", "upload", "--bulk-flows", "0"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--bulk-flows must be at least 1"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = polycorn(&["bench", "--bulk-gap-s", "0"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("--bulk-gap-s 0: seconds between bulk flow starts must be 0.5 to 600"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = tempfile::tempdir().unwrap();
    let res = dir.path().join("out");
    let out = polycorn(&[
        "bench",
        "--quick",
        "--systems",
        "vanilla;mptcp",
        "--workloads",
        "upload",
        "--bulk-flows",
        "3",
        "--name",
        "pcupl",
        "--out",
        res.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("outputs complete and consistent (2 systems)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("bulk uploads:") && stdout.contains("goodput ratio of uploads vs mptcp"),
        "{stdout}"
    );
    assert!(
        !stdout.contains("bulk downloads") && !stdout.contains("instant messaging"),
        "{stdout}"
    );
    let r = read_json(&res.join("results.json"));
    assert_eq!(r["plan"]["uploads"].as_array().unwrap().len(), 3);
    assert!(r["plan"]["bulk"].as_array().unwrap().is_empty());
    let mut completed = 0;
    for run in r["runs"].as_array().unwrap() {
        let sys = run["system"].as_str().unwrap();
        assert!(run["flows"].as_array().unwrap().is_empty(), "{sys}");
        let ups = run["uploads"].as_array().unwrap();
        assert_eq!(ups.len(), 3, "{sys}");
        for (u, plan) in ups.iter().zip(r["plan"]["uploads"].as_array().unwrap()) {
            if u["ok"] != true {
                eprintln!("{sys}: upload {} not complete: {}", u["idx"], u["error"]);
                continue;
            }
            completed += 1;
            let (fct, oracle) = (
                u["fct_s"].as_f64().unwrap(),
                plan["oracle_fct_s"].as_f64().unwrap(),
            );
            // The oracle has no handshake, so TCP's is margin enough; 5 ms more for the
            // client's timer waking after the planned start.
            assert!(
                fct >= oracle - 0.005,
                "{sys}: upload {u} faster than its oracle {oracle}"
            );
            // Timed at the server: its bins hold every byte.
            let bytes: u64 = u["bins_100ms"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| b.as_u64().unwrap())
                .sum();
            assert_eq!(bytes, u["size"].as_u64().unwrap(), "{sys}: {u}");
        }
        assert!(run["path_up_bytes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b.as_u64() > Some(0)));
    }
    // The 256 KB uploads at least get through on both systems.
    assert!(completed >= 2, "{completed} uploads completed");
    // The relay's scheduler placed the uploads.
    let vanilla = &r["runs"][0];
    let relay_decisions: f64 = vanilla["counters"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| k.starts_with("relay:polycorn_stage_decisions_total"))
        .map(|(_, v)| v.as_f64().unwrap())
        .sum();
    assert!(relay_decisions > 0.0, "{}", vanilla["counters"]);
    let csv = std::fs::read_to_string(res.join("uploads.csv")).unwrap();
    assert_eq!(csv.lines().count(), 1 + 2 * 3, "{csv}");
    let html = std::fs::read_to_string(res.join("report.html")).unwrap();
    assert!(html.contains("id=\"upload-ratio-vs-mptcp\""));
    assert!(
        !namespaces().contains("pcupl"),
        "namespaces left: {}",
        namespaces()
    );
}

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

/// `net bench`: relay + proxy (TLS subflows over two veth paths, transparent interception) and
/// kernel MPTCP each carry a bulk download and a bulk upload; every row is measured at its
/// receiver, the ratios are printed and no namespace is left. (What the numbers are is the
/// bench's business, not this test's: it checks the pipeline.)
#[test]
fn net_bench_measures_both_systems_both_ways_and_leaves_nothing_behind() {
    if !is_root() {
        eprintln!("skipping: needs root");
        return;
    }
    let _quiet = machine_to_myself();
    let name = "pcnb-cli";
    let out = polycorn(&["net", "bench", "--secs", "1", "--name", name]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for system in ["polycorn (hrsch, TLS 1.3)", "kernel MPTCP (plain)"] {
        for direction in ["down", "up"] {
            let gbit: f64 = stdout
                .lines()
                .filter_map(|l| l.strip_prefix(system))
                .map(str::split_whitespace)
                .find_map(|mut f| (f.next() == Some(direction)).then(|| f.next()?.parse().ok())?)
                .unwrap_or_else(|| panic!("no {system} {direction} row: {stdout}"));
            assert!(gbit > 0.0, "{system} {direction}: {gbit} Gbit/s\n{stdout}");
        }
    }
    for direction in ["down", "up"] {
        assert!(
            stdout.contains(&format!("polycorn / kernel MPTCP, {direction}: ")),
            "{stdout}"
        );
    }
    assert!(!namespaces().contains(name), "{}", namespaces());
    // A bad duration is refused before anything is built.
    let out = polycorn(&["net", "bench", "--secs", "0", "--name", name]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--secs must be a positive number"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
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

/// Run `polycorn relay --config FILE` handed `sockets` the way systemd hands a socket unit's
/// (file descriptors 3, 4, …, `LISTEN_FDS`, `LISTEN_FDNAMES`, `LISTEN_PID` its own); it is
/// killed after `secs` unless it exits first. Returns its exit status and stderr.
fn relay_with_passed_sockets(
    config: &Path,
    sockets: &[(&dyn std::os::fd::AsRawFd, &str)],
    secs: u64,
) -> (Option<std::process::ExitStatus>, String) {
    daemon_with_passed_sockets("relay", config, sockets, secs, |_| {})
}

/// [`relay_with_passed_sockets`] for `relay` or `proxy`; `meanwhile` runs once the daemon
/// started (before the wait).
fn daemon_with_passed_sockets(
    daemon: &str,
    config: &Path,
    sockets: &[(&dyn std::os::fd::AsRawFd, &str)],
    secs: u64,
    meanwhile: impl FnOnce(&Path),
) -> (Option<std::process::ExitStatus>, String) {
    let fds: Vec<i32> = sockets.iter().map(|(s, _)| s.as_raw_fd()).collect();
    let names: Vec<&str> = sockets.iter().map(|(_, n)| *n).collect();
    let dir = tempfile::tempdir().unwrap();
    let err = dir.path().join("stderr");
    let mut cmd = Command::new("sh");
    cmd.args([
        "-c",
        &format!(
            "export LISTEN_PID=$$ LISTEN_FDS={} LISTEN_FDNAMES={}; exec \"$@\"",
            fds.len(),
            names.join(":")
        ),
        "sh",
    ])
    .arg(env!("CARGO_BIN_EXE_polycorn"))
    .args([daemon, "--config"])
    .arg(config)
    .env("RUST_LOG", "info")
    .stdin(std::process::Stdio::null())
    .stdout(std::process::Stdio::null())
    .stderr(std::fs::File::create(&err).unwrap());
    polycorn_net::activation::pass_sockets(&mut cmd, &fds).unwrap();
    let mut child = cmd.spawn().unwrap();
    let t = std::time::Instant::now();
    meanwhile(&err);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if t.elapsed() >= std::time::Duration::from_secs(secs) {
            child.kill().unwrap();
            child.wait().unwrap();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    (status, std::fs::read_to_string(&err).unwrap())
}

/// A relay started by systemd's socket unit (`config example relay.socket`) takes the
/// listeners it is handed (TCP and UDP) instead of binding them; a socket the configuration has
/// no listener for stops the start with an error naming both.
#[test]
fn a_relay_takes_the_listeners_systemd_passes_and_refuses_ones_it_has_no_use_for() {
    let _quiet = machine_to_myself();
    let socks = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = socks.local_addr().unwrap().port();
    let dns = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let dns_port = dns.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let write = |socks: u16| {
        let file = dir.path().join(format!("relay-{socks}.toml"));
        std::fs::write(
            &file,
            format!(
                "[relay]\nmode = \"single\"\nproxy = \"192.0.2.1:7700\"\n\n\
                 [[path]]\nname = \"a\"\ndevice = \"lo\"\nsource = \"127.0.0.1\"\n\n\
                 [intercept]\nsocks5 = \"127.0.0.1:{socks}\"\n\n\
                 [dns]\nlisten = \"127.0.0.1:{dns_port}\"\nupstream = \"192.0.2.53:53\"\n"
            ),
        )
        .unwrap();
        file
    };
    // The configured addresses are the passed sockets': taken, not bound again (binding them
    // again would fail: the ports are in use).
    let (status, err) =
        relay_with_passed_sockets(&write(port), &[(&socks, "socks"), (&dns, "dns")], 3);
    assert!(status.is_none(), "exited {status:?}: {err}");
    assert!(
        err.contains("listeners passed by systemd (socket activation) sockets=2")
            && err.contains("SOCKS5 listener, passed by systemd")
            && err.contains("DNS relay, socket passed by systemd")
            && err.contains("relay running"),
        "{err}"
    );
    // A passed socket no listener of the configuration uses, named by its LISTEN_FDNAMES name.
    let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let other_port = other.local_addr().unwrap().port();
    let (status, err) =
        relay_with_passed_sockets(&write(other_port), &[(&socks, "socks"), (&dns, "dns")], 10);
    assert!(status.is_some_and(|s| !s.success()), "{status:?}: {err}");
    assert!(
        err.contains(&format!(
            "systemd passed a socket that the configuration does not listen on: TCP \
             127.0.0.1:{port} (fd 3, socks)"
        )) && err.contains(&format!("TCP 127.0.0.1:{other_port} (SOCKS5)")),
        "{err}"
    );
    // A corrupt environment is refused, naming the variable.
    let (status, err) = relay_with_passed_sockets(&write(port), &[(&socks, "a:b")], 10);
    assert!(status.is_some_and(|s| !s.success()), "{status:?}: {err}");
    assert!(
        err.contains("LISTEN_FDNAMES=\"a:b\": 2 names for 1 sockets"),
        "{err}"
    );
}

/// A daemon started by systemd's own socket passing (`systemd-socket-activate`, from the systemd
/// package: the same `sd_listen_fds` environment and descriptors a socket unit gives), killed
/// by PID when dropped (the tool execs the daemon in its own process).
struct SocketActivated {
    child: std::process::Child,
    log: PathBuf,
}

impl SocketActivated {
    fn start(listen: &str, fdname: &str, daemon: &str, config: &Path, log: PathBuf) -> Self {
        let child = Command::new("systemd-socket-activate")
            .args(["-l", listen, &format!("--fdname={fdname}")])
            .arg(env!("CARGO_BIN_EXE_polycorn"))
            .args([daemon, "--config"])
            .arg(config)
            .env("RUST_LOG", "info")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("run systemd-socket-activate");
        SocketActivated { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the log contains `what` (at most 10 s).
    fn wait_for(&self, what: &str) {
        let t = std::time::Instant::now();
        while !self.log().contains(what) {
            assert!(t.elapsed().as_secs() < 10, "no `{what}`:\n{}", self.log());
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

impl Drop for SocketActivated {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Socket activation with systemd's own implementation of the protocol
/// (`systemd-socket-activate` holds each listener and starts the daemon on its first
/// connection, as a socket unit does): a passenger's SOCKS5 connection starts the relay, the
/// relay's first subflow starts the proxy, each takes the socket it is handed, and the
/// passenger's download comes through byte for byte.
#[test]
fn relay_and_proxy_started_by_systemds_socket_activation_carry_a_download() {
    let _quiet = machine_to_myself();
    if !is_root() {
        return;
    }
    if !have_systemd_tool("systemd-socket-activate") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let out = polycorn(&["tls", "generate", d]);
    assert!(out.status.success(), "{out:?}");
    let free = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    };
    let (proxy_port, socks_port) = (free(), free());
    // The server the passenger downloads from.
    let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let server_port = server.local_addr().unwrap().port();
    let body: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let sent = body.clone();
    let serve = std::thread::spawn(move || {
        let (mut c, _) = server.accept().unwrap();
        std::io::Write::write_all(&mut c, &sent).unwrap();
    });
    let proxy_config = dir.path().join("proxy.toml");
    std::fs::write(
        &proxy_config,
        format!(
            "[proxy]\nlisten = \"127.0.0.1:{proxy_port}\"\n\n[policy]\nallow = [\"127.0.0.0/8\"]\n\n\
             [tls]\nca = \"{d}/ca.pem\"\ncert = \"{d}/proxy.pem\"\nkey = \"{d}/proxy.key\"\n"
        ),
    )
    .unwrap();
    let relay_config = dir.path().join("relay.toml");
    std::fs::write(
        &relay_config,
        format!(
            "[relay]\nproxy = \"127.0.0.1:{proxy_port}\"\n\n\
             [[path]]\nname = \"a\"\ndevice = \"lo\"\nsource = \"127.0.0.1\"\n\n\
             [intercept]\nsocks5 = \"127.0.0.1:{socks_port}\"\n\n\
             [tls]\nca = \"{d}/ca.pem\"\ncert = \"{d}/relay.pem\"\nkey = \"{d}/relay.key\"\n"
        ),
    )
    .unwrap();
    let proxy = SocketActivated::start(
        &format!("127.0.0.1:{proxy_port}"),
        "subflows",
        "proxy",
        &proxy_config,
        dir.path().join("proxy.log"),
    );
    let relay = SocketActivated::start(
        &format!("127.0.0.1:{socks_port}"),
        "socks",
        "relay",
        &relay_config,
        dir.path().join("relay.log"),
    );
    proxy.wait_for(&format!("Listening on 127.0.0.1:{proxy_port}"));
    relay.wait_for(&format!("Listening on 127.0.0.1:{socks_port}"));
    // Neither daemon runs before its first connection.
    assert!(!relay.log().contains("relay running"), "{}", relay.log());
    assert!(!proxy.log().contains("proxy running"), "{}", proxy.log());

    // The passenger: SOCKS5 CONNECT to the server, then the download.
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(("127.0.0.1", socks_port)).unwrap();
    c.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    c.write_all(&[5, 1, 0]).unwrap();
    let mut greet = [0u8; 2];
    c.read_exact(&mut greet)
        .unwrap_or_else(|e| panic!("{e}\nrelay:\n{}", relay.log()));
    assert_eq!(greet, [5, 0]);
    let [hi, lo] = server_port.to_be_bytes();
    c.write_all(&[5, 1, 0, 1, 127, 0, 0, 1, hi, lo]).unwrap();
    let mut reply = [0u8; 10];
    c.read_exact(&mut reply)
        .unwrap_or_else(|e| panic!("{e}\nrelay:\n{}\nproxy:\n{}", relay.log(), proxy.log()));
    assert_eq!(reply[..2], [5, 0], "SOCKS5 reply {reply:?}");
    let mut got = Vec::new();
    c.read_to_end(&mut got)
        .unwrap_or_else(|e| panic!("{e}\nrelay:\n{}\nproxy:\n{}", relay.log(), proxy.log()));
    assert!(
        got == body,
        "{} of {} bytes, not the same",
        got.len(),
        body.len()
    );
    serve.join().unwrap();
    let (rlog, plog) = (relay.log(), proxy.log());
    assert!(
        rlog.contains("listeners passed by systemd (socket activation) sockets=1")
            && rlog.contains("SOCKS5 listener, passed by systemd")
            && rlog.contains("subflow up"),
        "{rlog}"
    );
    assert!(
        plog.contains("listeners passed by systemd (socket activation) sockets=1")
            && plog.contains("proxy listening, socket passed by systemd")
            && plog.contains("new relay session"),
        "{plog}"
    );
}

/// A proxy started by `config example proxy.socket`'s unit takes the subflow listener it is
/// handed and accepts relays' connections on it; a socket for the tunnel listener (an MPTCP
/// socket the proxy binds itself) or for no listener at all stops the start, naming it.
#[test]
fn a_proxy_takes_the_subflow_listener_systemd_passes_and_refuses_others() {
    let _quiet = machine_to_myself();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let out = polycorn(&["tls", "generate", d]);
    assert!(out.status.success(), "{out:?}");
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = held.local_addr().unwrap().port();
    let write = |listen: u16, tunnel: Option<u16>| {
        let file = dir.path().join(format!("proxy-{listen}.toml"));
        let tunnel = tunnel.map_or(String::new(), |t| {
            format!("tunnel_listen = \"127.0.0.1:{t}\"\ntunnel_peers = [\"127.0.0.0/8\"]\n")
        });
        std::fs::write(
            &file,
            format!(
                "[proxy]\nlisten = \"127.0.0.1:{listen}\"\n{tunnel}\n[tls]\n\
                 ca = \"{d}/ca.pem\"\ncert = \"{d}/proxy.pem\"\nkey = \"{d}/proxy.key\"\n"
            ),
        )
        .unwrap();
        file
    };
    // Taken, not bound again (the port is in use), and it is the proxy that accepts on it: a
    // connection speaking no TLS is refused in its log.
    let (status, err) = daemon_with_passed_sockets(
        "proxy",
        &write(port, None),
        &[(&held, "subflows")],
        4,
        |log| {
            let t = std::time::Instant::now();
            while !std::fs::read_to_string(log)
                .unwrap_or_default()
                .contains("proxy running")
            {
                assert!(t.elapsed().as_secs() < 3, "the proxy did not start");
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
            std::io::Write::write_all(&mut c, b"GET / HTTP/1.0\r\n\r\n").unwrap();
        },
    );
    assert!(status.is_none(), "exited {status:?}: {err}");
    assert!(
        err.contains("listeners passed by systemd (socket activation) sockets=1")
            && err.contains("proxy listening, socket passed by systemd")
            && err.contains("subflow refused"),
        "{err}"
    );
    // The tunnel listener's address: refused, saying why.
    let tunnel = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let tunnel_port = tunnel.local_addr().unwrap().port();
    let free = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (status, err) = daemon_with_passed_sockets(
        "proxy",
        &write(free, Some(tunnel_port)),
        &[(&tunnel, "tunnel")],
        10,
        |_| {},
    );
    assert!(status.is_some_and(|s| !s.success()), "{status:?}: {err}");
    assert!(
        err.contains(&format!(
            "systemd passed a socket for proxy.tunnel_listen (127.0.0.1:{tunnel_port})"
        )),
        "{err}"
    );
    // A socket no listener uses.
    let (status, err) = daemon_with_passed_sockets(
        "proxy",
        &write(free, None),
        &[(&held, "subflows")],
        10,
        |_| {},
    );
    assert!(status.is_some_and(|s| !s.success()), "{status:?}: {err}");
    assert!(
        err.contains(&format!(
            "systemd passed a socket that the configuration does not listen on: TCP \
             127.0.0.1:{port} (fd 3, subflows); the proxy's listeners are TCP 127.0.0.1:{free} \
             (subflows)"
        )),
        "{err}"
    );
}

/// `relay --remove-interception` (the socket unit's ExecStopPost: a socket-activated relay
/// leaves its rules for the next start) removes the relay's nftables table, fwmark rule and
/// local route, and is idempotent.
#[test]
fn relay_remove_interception_removes_what_a_relay_left_installed() {
    if !is_root() {
        eprintln!("skipping: needs root");
        return;
    }
    let ns = "pcri-test";
    let ip = |args: &[&str]| {
        let out = Command::new("ip").args(args).output().unwrap();
        assert!(out.status.success(), "ip {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let in_ns = |cmd: &[&str]| {
        let mut a = vec!["netns", "exec", ns];
        a.extend_from_slice(cmd);
        ip(&a)
    };
    let _ = Command::new("ip").args(["netns", "del", ns]).output();
    ip(&["netns", "add", ns]);
    in_ns(&["nft", "add", "table", "inet", "polycorn_relay"]);
    in_ns(&["ip", "rule", "add", "fwmark", "0x70c", "lookup", "7070"]);
    in_ns(&["ip", "link", "set", "lo", "up"]);
    in_ns(&[
        "ip",
        "route",
        "add",
        "local",
        "0.0.0.0/0",
        "dev",
        "lo",
        "table",
        "7070",
    ]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("relay.toml");
    std::fs::write(
        &file,
        "[relay]\nmode = \"single\"\nproxy = \"192.0.2.1:7700\"\n\n\
         [[path]]\nname = \"a\"\ndevice = \"lo\"\nsource = \"127.0.0.1\"\n\n\
         [intercept]\ntransparent = \"0.0.0.0:7070\"\ninstall_nft = true\nlan_device = \"lan0\"\n",
    )
    .unwrap();
    let bin = env!("CARGO_BIN_EXE_polycorn");
    let cfg = file.to_str().unwrap();
    for _ in 0..2 {
        let out = in_ns(&[bin, "relay", "--config", cfg, "--remove-interception"]);
        assert!(out.contains("removed the relay's interception"), "{out}");
    }
    let tables = in_ns(&["nft", "list", "tables"]);
    let rules = in_ns(&["ip", "rule"]);
    let routes = in_ns(&["ip", "route", "show", "table", "all"]);
    ip(&["netns", "del", ns]);
    assert!(!tables.contains("polycorn_relay"), "{tables}");
    assert!(!rules.contains("0x70c"), "{rules}");
    assert!(!routes.contains("table 7070"), "{routes}");
}
