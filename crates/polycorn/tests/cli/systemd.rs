//! The daemons under systemd: the units `config example` prints, listeners passed by socket
//! units and by systemd's own socket activation, and `relay --remove-interception`.

use std::path::{Path, PathBuf};
use std::process::Command;

use polycorn_net::config::{ProxyConfig, RelayMode, TlsFiles};

use crate::support::*;

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
        let mut relay = loopback_relay(RelayMode::Single, "192.0.2.1:7700");
        relay.intercept.socks5 = Some(([127, 0, 0, 1], socks).into());
        relay.dns.listen = Some(([127, 0, 0, 1], dns_port).into());
        relay.dns.upstream = Some("192.0.2.53:53".parse().unwrap());
        std::fs::write(&file, relay.to_toml()).unwrap();
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
    let mut proxy = ProxyConfig::new(TlsFiles::new(
        format!("{d}/ca.pem"),
        format!("{d}/proxy.pem"),
        format!("{d}/proxy.key"),
    ));
    proxy.proxy.listen = vec![([127, 0, 0, 1], proxy_port).into()];
    proxy.policy.allow = vec!["127.0.0.0/8".parse().unwrap()];
    std::fs::write(&proxy_config, proxy.to_toml()).unwrap();
    let relay_config = dir.path().join("relay.toml");
    let mut relay = loopback_relay(RelayMode::Polycorn, &format!("127.0.0.1:{proxy_port}"));
    relay.intercept.socks5 = Some(([127, 0, 0, 1], socks_port).into());
    relay.tls = Some(TlsFiles::new(
        format!("{d}/ca.pem"),
        format!("{d}/relay.pem"),
        format!("{d}/relay.key"),
    ));
    std::fs::write(&relay_config, relay.to_toml()).unwrap();
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
        let mut proxy = ProxyConfig::new(TlsFiles::new(
            format!("{d}/ca.pem"),
            format!("{d}/proxy.pem"),
            format!("{d}/proxy.key"),
        ));
        proxy.proxy.listen = vec![([127, 0, 0, 1], listen).into()];
        if let Some(t) = tunnel {
            proxy.proxy.tunnel_listen = Some(([127, 0, 0, 1], t).into());
            proxy.proxy.tunnel_peers = vec!["127.0.0.0/8".parse().unwrap()];
        }
        std::fs::write(&file, proxy.to_toml()).unwrap();
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
    let mut relay = loopback_relay(RelayMode::Single, "192.0.2.1:7700");
    relay.intercept.transparent = Some("0.0.0.0:7070".parse().unwrap());
    relay.intercept.install_nft = true;
    relay.intercept.lan_device = Some("lan0".into());
    std::fs::write(&file, relay.to_toml()).unwrap();
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
