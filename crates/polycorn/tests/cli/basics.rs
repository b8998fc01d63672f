//! The binary's everyday commands: version, output, configuration checks and examples, status,
//! certificates, scheduler names.

use std::process::Command;

use polycorn_net::config::{ProxyConfig, RelayMode, TlsFiles};

use crate::support::*;

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
    let mut proxy = ProxyConfig::new(TlsFiles::new(
        format!("{d}/ca.pem"),
        format!("{d}/proxy.pem"),
        format!("{d}/proxy.key"),
    ));
    proxy.proxy.listen = vec!["127.0.0.1:17700".parse().unwrap()];
    proxy.proxy.congestion = Some("nosuchcc".into());
    std::fs::write(&cfg, proxy.to_toml()).unwrap();
    let out = polycorn(&["proxy", "--config", cfg.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("proxy.congestion = \"nosuchcc\"") && err.contains("available"),
        "names the key and what the kernel has: {err}"
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
/// running relay and proxy: `relay_proxy::transfer::hundred_passengers_five_flows_each`.)
#[test]
fn status_names_what_keeps_it_from_reading_a_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("relay.toml");
    let mut relay = loopback_relay(RelayMode::Single, "192.0.2.1:7700");
    relay.intercept.socks5 = Some("127.0.0.1:1080".parse().unwrap());
    std::fs::write(&file, relay.to_toml()).unwrap();
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
    relay.metrics.listen = Some(([0, 0, 0, 0], port).into());
    std::fs::write(&file, relay.to_toml()).unwrap();
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
