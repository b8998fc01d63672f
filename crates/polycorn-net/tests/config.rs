//! Configuration: the examples parse, defaults apply, and every kind of error names the file
//! and the key.

use std::net::SocketAddr;
use std::path::Path;

use polycorn_net::config::{
    CellSource, ConfigError, ContextSource, IdleRefresh, LogFormat, ProxyConfig, RelayConfig,
    RelayMode, UdpPolicy,
};

/// A directory holding the files the examples and the minimal configs refer to.
fn files() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for f in [
        "ca.pem",
        "relay.pem",
        "relay.key",
        "proxy.pem",
        "proxy.key",
        "context.csv",
    ] {
        std::fs::write(dir.path().join(f), b"").unwrap();
    }
    dir
}

const RELAY_MIN: &str = r#"
[relay]
proxy = "10.0.2.1:7700"

[[path]]
name = "A"
device = "path0"
source = "10.100.0.1"

[[path]]
name = "B"
device = "path1"
source = "10.101.0.1"

[intercept]
socks5 = "127.0.0.1:1080"

[tls]
ca = "ca.pem"
cert = "relay.pem"
key = "relay.key"
"#;

const PROXY_MIN: &str = r#"
[tls]
ca = "ca.pem"
cert = "proxy.pem"
key = "proxy.key"
"#;

fn relay(text: &str, dir: &Path) -> Result<RelayConfig, ConfigError> {
    RelayConfig::from_str(text, "relay.toml", dir)
}

fn proxy(text: &str, dir: &Path) -> Result<ProxyConfig, ConfigError> {
    ProxyConfig::from_str(text, "proxy.toml", dir)
}

/// Replaces the first occurrence of `from` (which must exist) in `base`.
fn edit(base: &str, from: &str, to: &str) -> String {
    assert!(base.contains(from), "{from:?} not in the base config");
    base.replacen(from, to, 1)
}

#[track_caller]
fn relay_err(text: &str, dir: &Path, key: &str, words: &str) -> String {
    let err = relay(text, dir).expect_err("config must be refused");
    check(err, "relay.toml", key, words)
}

#[track_caller]
fn proxy_err(text: &str, dir: &Path, key: &str, words: &str) -> String {
    let err = proxy(text, dir).expect_err("config must be refused");
    check(err, "proxy.toml", key, words)
}

#[track_caller]
fn check(err: ConfigError, origin: &str, key: &str, words: &str) -> String {
    let msg = err.to_string();
    assert_eq!(err.key(), Some(key), "wrong key in: {msg}");
    assert!(msg.starts_with(origin), "no file name in: {msg}");
    assert!(msg.contains(key), "no key in: {msg}");
    assert!(msg.contains(words), "{msg:?} should contain {words:?}");
    msg
}

#[test]
fn examples_parse() {
    let dir = files();
    let r = relay(RelayConfig::example(), dir.path()).unwrap();
    assert_eq!(r.relay.mode, RelayMode::Polycorn);
    assert_eq!(r.relay.scheduler, "polycorn");
    assert_eq!(r.paths.len(), 2);
    assert_eq!(r.paths[0].name, "A");
    assert_eq!(r.intercept.lan_device.as_deref(), Some("lan0"));
    assert_eq!(r.intercept.udp, UdpPolicy::Block);
    assert_eq!(r.tls.as_ref().unwrap().ca, dir.path().join("ca.pem"));
    assert_eq!(r.limits.flow_window_bytes, 4 << 20);
    // `polycorn status` works out of the box: metrics on loopback.
    assert_eq!(r.metrics.listen, Some("127.0.0.1:9100".parse().unwrap()));

    let p = proxy(ProxyConfig::example(), dir.path()).unwrap();
    assert_eq!(
        p.proxy.listen,
        vec!["0.0.0.0:7700".parse::<SocketAddr>().unwrap()]
    );
    assert_eq!(p.tls.key, dir.path().join("proxy.key"));
    assert!(p.policy.allow.is_empty());
    assert!(p.destination_policy_allows("93.184.216.34"));
    assert!(!p.destination_policy_allows("10.0.0.1"));
    assert_eq!(p.metrics.listen, Some("127.0.0.1:9100".parse().unwrap()));

    // Every commented-out optional key in the examples is valid when uncommented.
    let uncomment = |text: &str| {
        text.lines()
            .map(|l| match l.strip_prefix("# ") {
                Some(rest) if rest.contains(" = ") && !rest.starts_with(' ') => rest,
                _ => l,
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    // (The uplink's [linkdb] needs a context source; the example's is "none".)
    let all = edit(
        &uncomment(RelayConfig::example()),
        "source = \"none\"",
        "source = \"gpsd\"",
    );
    let r = relay(&all, dir.path()).unwrap();
    assert!(r.linkdb.db.is_some());
    assert_eq!(r.paths[0].proxy, Some("10.100.0.2:7700".parse().unwrap()));
    assert_eq!(r.proxy_for(&r.paths[0]), "10.100.0.2:7700".parse().unwrap());
    assert_eq!(r.proxy_for(&r.paths[1]), "10.0.2.1:7700".parse().unwrap());
    assert!(r.intercept.transparent6.is_some() && r.intercept.socks5.is_some());
    assert!(r.dns.listen.is_some() && r.dns.upstream.is_some());
    assert_eq!(r.context.replay, Some(dir.path().join("context.csv")));
    assert_eq!(r.relay.congestion.as_deref(), Some("bbr"));
    let p = proxy(&uncomment(ProxyConfig::example()), dir.path()).unwrap();
    assert!(p.proxy.tunnel_listen.is_some());
    assert_eq!(p.proxy.tunnel_peers.len(), 2);
    assert_eq!(p.proxy.congestion.as_deref(), Some("bbr"));
    assert!(p.linkdb.db.is_some());
    assert!(p.metrics.listen.is_some());
}

trait Allows {
    fn destination_policy_allows(&self, ip: &str) -> bool;
}

impl Allows for ProxyConfig {
    fn destination_policy_allows(&self, ip: &str) -> bool {
        self.policy
            .destination_policy()
            .check(ip.parse().unwrap())
            .is_ok()
    }
}

#[test]
fn defaults_apply() {
    let dir = files();
    let r = relay(RELAY_MIN, dir.path()).unwrap();
    assert_eq!(r.relay.mode, RelayMode::Polycorn);
    assert_eq!(r.relay.scheduler, "polycorn");
    assert_eq!(r.relay.tunnel_port, 7701);
    assert_eq!(r.relay.hold_time().as_secs(), 30);
    assert_eq!(r.relay.idle_refresh, IdleRefresh::Collapsed);
    assert!(!r.intercept.install_nft);
    assert_eq!(r.intercept.udp, UdpPolicy::Block);
    assert_eq!(r.context.source, ContextSource::None);
    assert_eq!(r.context.gpsd, "127.0.0.1:2947".parse().unwrap());
    assert_eq!(r.limits.user_window_bytes, 16 << 20);
    assert_eq!(r.limits.max_flows, 65_536);
    assert_eq!(r.log.format, LogFormat::Text);
    assert_eq!(r.log.level, "info");
    assert!(r.metrics.listen.is_none());

    let p = proxy(PROXY_MIN, dir.path()).unwrap();
    assert_eq!(p.proxy.scheduler, "polycorn");
    assert_eq!(p.proxy.connect_timeout().as_secs(), 10);
    assert_eq!(p.proxy.hold_time().as_secs(), 30);
    assert!(!p.policy.allow_private);
    assert!(p.linkdb.db.is_none());
}

#[test]
fn load_resolves_against_the_file_directory() {
    let dir = files();
    let file = dir.path().join("relay.toml");
    std::fs::write(&file, RELAY_MIN).unwrap();
    let r = RelayConfig::load(&file).unwrap();
    assert_eq!(r.tls.unwrap().cert, dir.path().join("relay.pem"));

    let absolute = edit(
        RELAY_MIN,
        "ca = \"ca.pem\"",
        &format!("ca = \"{}\"", dir.path().join("ca.pem").display()),
    );
    relay(&absolute, Path::new("/nonexistent")).unwrap_err(); // cert, key are relative
    let err = RelayConfig::load(&dir.path().join("missing.toml")).unwrap_err();
    assert!(err.to_string().contains("missing.toml"), "{err}");

    let file = dir.path().join("proxy.toml");
    std::fs::write(&file, PROXY_MIN).unwrap();
    assert_eq!(
        ProxyConfig::load(&file).unwrap().tls.ca,
        dir.path().join("ca.pem")
    );
}

#[test]
fn toml_errors_carry_line_column_and_key() {
    let dir = files();
    let d = dir.path();
    // Type error.
    let msg = relay_err(
        &edit(RELAY_MIN, "[relay]\n", "[relay]\nhold_time_s = \"30\"\n"),
        d,
        "relay.hold_time_s",
        "invalid type",
    );
    assert!(
        msg.starts_with("relay.toml:3:15: relay.hold_time_s: "),
        "{msg}"
    );
    // Unknown key (typo) in a section, in an array of tables, and an unknown section.
    relay_err(
        &edit(RELAY_MIN, "[relay]\n", "[relay]\nshceduler = \"hrsch\"\n"),
        d,
        "relay.shceduler",
        "unknown field `shceduler`",
    );
    relay_err(
        &edit(
            RELAY_MIN,
            "source = \"10.101.0.1\"",
            "source = \"10.101.0.1\"\ndevise = \"x\"",
        ),
        d,
        "path[1].devise",
        "unknown field `devise`",
    );
    relay_err(
        &format!("{RELAY_MIN}\n[metric]\nlisten = \"127.0.0.1:9100\"\n"),
        d,
        "metric",
        "unknown field `metric`",
    );
    // Bad values for enums and addresses name the key.
    relay_err(
        &edit(RELAY_MIN, "[relay]\n", "[relay]\nmode = \"fast\"\n"),
        d,
        "relay.mode",
        "unknown variant `fast`",
    );
    relay_err(
        &edit(
            RELAY_MIN,
            "proxy = \"10.0.2.1:7700\"",
            "proxy = \"10.0.2.1\"",
        ),
        d,
        "relay.proxy",
        "expected IP:port or host:port",
    );
    relay_err(
        &edit(
            RELAY_MIN,
            "source = \"10.101.0.1\"",
            "source = \"10.101.0.300\"",
        ),
        d,
        "path[1].source",
        "invalid IP address syntax",
    );
    relay_err(
        &edit(RELAY_MIN, "[intercept]\n", "[intercept]\nudp = \"drop\"\n"),
        d,
        "intercept.udp",
        "unknown variant `drop`",
    );
    // A missing required key names the table it belongs in.
    relay_err(
        &edit(RELAY_MIN, "device = \"path1\"\n", ""),
        d,
        "path[1].device",
        "missing field `device`",
    );
    relay_err(
        &edit(RELAY_MIN, "proxy = \"10.0.2.1:7700\"\n", ""),
        d,
        "relay.proxy",
        "missing field `proxy`",
    );
    relay_err(
        &edit(RELAY_MIN, "[relay]\nproxy = \"10.0.2.1:7700\"\n", ""),
        d,
        "relay",
        "missing field `relay`",
    );
    // Negative numbers for unsigned keys.
    relay_err(
        &format!("{RELAY_MIN}\n[limits]\nmax_flows = -1\n"),
        d,
        "limits.max_flows",
        "-1",
    );
    // Proxy lists.
    proxy_err(
        &format!("[proxy]\nlisten = [\"0.0.0.0:7700\", \"nope\"]\n{PROXY_MIN}"),
        d,
        "proxy.listen[1]",
        "invalid socket address syntax",
    );
    proxy_err(
        &format!("[policy]\nallow = [\"10.0.0.0/33\"]\n{PROXY_MIN}"),
        d,
        "policy.allow[0]",
        "CIDR",
    );
    // Syntax error: position, no key.
    let err = relay("[relay\nproxy = 1", d).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.starts_with("relay.toml:1:7: invalid table header"),
        "{msg}"
    );
    assert!(!msg.contains('\n'), "one line: {msg}");
    assert_eq!(err.key(), None);
}

#[test]
fn path_errors() {
    let dir = files();
    let d = dir.path();
    relay_err(
        &edit(RELAY_MIN, "device = \"path1\"", "device = \"path0\""),
        d,
        "path[1].device",
        "duplicate device \"path0\"",
    );
    relay_err(
        &edit(RELAY_MIN, "name = \"B\"", "name = \"A\""),
        d,
        "path[1].name",
        "duplicate name \"A\"",
    );
    relay_err(
        &edit(
            RELAY_MIN,
            "source = \"10.101.0.1\"",
            "source = \"10.100.0.1\"",
        ),
        d,
        "path[1].source",
        "duplicate source 10.100.0.1",
    );
    relay_err(
        &edit(RELAY_MIN, "name = \"B\"", "name = \"B side\""),
        d,
        "path[1].name",
        "contains ' '",
    );
    relay_err(
        &edit(
            RELAY_MIN,
            "device = \"path1\"",
            "device = \"a-very-long-ifname\"",
        ),
        d,
        "path[1].device",
        "not an interface name",
    );
    relay_err(
        &edit(RELAY_MIN, "source = \"10.101.0.1\"", "source = \"0.0.0.0\""),
        d,
        "path[1].source",
        "not a unicast address",
    );
    relay_err(
        &edit(
            RELAY_MIN,
            "source = \"10.101.0.1\"",
            "source = \"10.101.0.1\"\nproxy = \"0.0.0.0:7700\"",
        ),
        d,
        "path[1].proxy",
        "not an address to connect to",
    );
    // IPv6 sources are fine.
    relay(
        &edit(
            RELAY_MIN,
            "source = \"10.101.0.1\"",
            "source = \"2001:db8::1\"",
        ),
        d,
    )
    .unwrap();
    // No source: the interface's address of the moment, in polycorn mode only.
    let sourceless = edit(RELAY_MIN, "source = \"10.101.0.1\"\n", "");
    let c = relay(&sourceless, d).unwrap();
    assert_eq!(c.paths[1].source, None);
    relay_err(
        &edit(&sourceless, "[relay]\n", "[relay]\nmode = \"single\"\n"),
        d,
        "path[1].source",
        "required in the baseline modes",
    );
    // A path's mtu: within what the source's family allows.
    let with_mtu = |source: &str, mtu: &str| {
        edit(
            RELAY_MIN,
            "source = \"10.101.0.1\"",
            &format!("source = \"{source}\"\nmtu = {mtu}"),
        )
    };
    let c = relay(&with_mtu("10.101.0.1", "1400"), d).unwrap();
    assert_eq!(c.paths[1].source, Some("10.101.0.1".parse().unwrap()));
    assert_eq!(c.paths[1].mtu, Some(1400));
    assert_eq!(c.paths[0].mtu, None);
    relay(&with_mtu("2001:db8::1", "1280"), d).unwrap();
    relay_err(
        &with_mtu("10.101.0.1", "500"),
        d,
        "path[1].mtu",
        "500: expected 576 to 9000 bytes for an IPv4 path",
    );
    relay_err(
        &with_mtu("2001:db8::1", "1200"),
        d,
        "path[1].mtu",
        "1200: expected 1280 to 9000 bytes for an IPv6 path",
    );
    relay_err(&with_mtu("10.101.0.1", "65536"), d, "path[1].mtu", "");

    let no_paths: String = RELAY_MIN
        .split("[[path]]")
        .next()
        .unwrap()
        .to_owned()
        + "[intercept]\nsocks5 = \"127.0.0.1:1080\"\n[tls]\nca = \"ca.pem\"\ncert = \"relay.pem\"\nkey = \"relay.key\"\n";
    relay_err(&no_paths, d, "path", "at least one path");

    let mut many = RELAY_MIN.to_owned();
    for i in 2..=32 {
        many.push_str(&format!(
            "\n[[path]]\nname = \"p{i}\"\ndevice = \"path{i}\"\nsource = \"10.{i}.0.1\"\n"
        ));
    }
    relay_err(&many, d, "path", "33 paths; at most 32");
}

#[test]
fn relay_section_errors() {
    let dir = files();
    let d = dir.path();
    let msg = relay_err(
        &edit(
            RELAY_MIN,
            "[relay]\n",
            "[relay]\nscheduler = \"hpr,fastest\"\n",
        ),
        d,
        "relay.scheduler",
        "unknown stage `fastest`",
    );
    assert!(msg.starts_with("relay.toml: relay.scheduler: "), "{msg}");
    relay(
        &edit(
            RELAY_MIN,
            "[relay]\n",
            "[relay]\nscheduler = \"minrtt,ecf(beta=0.25)+er(k=2)\"\n",
        ),
        d,
    )
    .unwrap();
    let used = relay(
        &edit(RELAY_MIN, "[relay]\n", "[relay]\nidle_refresh = \"used\"\n"),
        d,
    )
    .unwrap();
    assert_eq!(used.relay.idle_refresh, IdleRefresh::Used);
    relay_err(
        &edit(
            RELAY_MIN,
            "[relay]\n",
            "[relay]\nidle_refresh = \"always\"\n",
        ),
        d,
        "relay.idle_refresh",
        "unknown variant `always`",
    );
    relay_err(
        &edit(RELAY_MIN, "[relay]\n", "[relay]\nhold_time_s = 3601\n"),
        d,
        "relay.hold_time_s",
        "out of range 0..=3600",
    );
    relay(
        &edit(RELAY_MIN, "[relay]\n", "[relay]\nhold_time_s = 0\n"),
        d,
    )
    .unwrap();
    relay_err(
        &edit(RELAY_MIN, "[relay]\n", "[relay]\ndrain_s = 31\n"),
        d,
        "relay.drain_s",
        "out of range 0..=30",
    );
    let r = relay(&edit(RELAY_MIN, "[relay]\n", "[relay]\ndrain_s = 30\n"), d).unwrap();
    assert_eq!(r.relay.drain(), std::time::Duration::from_secs(30));
    relay_err(
        &edit(RELAY_MIN, "[relay]\n", "[relay]\nidle_probe_s = 61\n"),
        d,
        "relay.idle_probe_s",
        "61 is out of range 0..=60 (seconds between probes of an idle path",
    );
    let r = relay(RELAY_MIN, d).unwrap();
    assert_eq!(
        r.relay.idle_probe(),
        Some(std::time::Duration::from_secs(5))
    );
    assert_eq!(
        r.relay.idle_probe_after(),
        std::time::Duration::from_secs(120)
    );
    relay_err(
        &edit(RELAY_MIN, "[relay]\n", "[relay]\nidle_probe_after_s = 5\n"),
        d,
        "relay.idle_probe_after_s",
        "5 is out of range 10..=3600 (seconds without a connection before probes slow down)",
    );
    assert_eq!(relay(RELAY_MIN, d).unwrap().relay.window_gain(), Some(2.0));
    for (v, want) in [("0", None), ("1.5", Some(1.5)), ("16", Some(16.0))] {
        let line = format!("[relay]\nwindow_gain = {v}\n");
        let r = relay(&edit(RELAY_MIN, "[relay]\n", &line), d).unwrap();
        assert_eq!(r.relay.window_gain(), want, "window_gain = {v}");
    }
    for v in ["0.5", "-2", "17", "nan"] {
        relay_err(
            &edit(
                RELAY_MIN,
                "[relay]\n",
                &format!("[relay]\nwindow_gain = {v}\n"),
            ),
            d,
            "relay.window_gain",
            "is out of range 1..=16 (times a path's recent rate and smallest RTT",
        );
    }
    let r = relay(
        &edit(RELAY_MIN, "[relay]\n", "[relay]\nidle_probe_s = 0\n"),
        d,
    )
    .unwrap();
    assert_eq!(r.relay.idle_probe(), None, "0: probes every 0.2 s always");
    relay_err(
        &edit(RELAY_MIN, "[relay]\n", "[relay]\ncongestion = \"BBR v2\"\n"),
        d,
        "relay.congestion",
        "not a congestion control name",
    );
    relay(
        &edit(RELAY_MIN, "[relay]\n", "[relay]\ncongestion = \"bbr\"\n"),
        d,
    )
    .unwrap();
    relay_err(
        &edit(RELAY_MIN, "[relay]\n", "[relay]\nrto_max_ms = 200\n"),
        d,
        "relay.rto_max_ms",
        "out of range 1000..=120000",
    );
    let r = relay(
        &edit(RELAY_MIN, "[relay]\n", "[relay]\nrto_max_ms = 1000\n"),
        d,
    )
    .unwrap();
    assert_eq!(r.relay.rto_max_ms, Some(1000));
    assert_eq!(relay(RELAY_MIN, d).unwrap().relay.rto_max_ms, None);
    relay_err(
        &edit(RELAY_MIN, "[relay]\n", "[relay]\ntunnel_port = 0\n"),
        d,
        "relay.tunnel_port",
        "must not be 0",
    );
    relay_err(
        &edit(
            RELAY_MIN,
            "proxy = \"10.0.2.1:7700\"",
            "proxy = \"10.0.2.1:0\"",
        ),
        d,
        "relay.proxy",
        "port must not be 0",
    );
}

#[test]
fn tls_errors() {
    let dir = files();
    let d = dir.path();
    let msg = relay_err(
        &edit(RELAY_MIN, "cert = \"relay.pem\"", "cert = \"nope.pem\""),
        d,
        "tls.cert",
        "file not found",
    );
    assert!(
        msg.contains(&d.join("nope.pem").display().to_string()),
        "{msg}"
    );
    relay_err(
        &edit(RELAY_MIN, "key = \"relay.key\"", "key = \".\""),
        d,
        "tls.key",
        "not a regular file",
    );
    let no_tls = RELAY_MIN.split("[tls]").next().unwrap().to_owned();
    relay_err(&no_tls, d, "tls", "mode \"polycorn\" needs");
    // The baselines do not need TLS.
    let mptcp = edit(&no_tls, "[relay]\n", "[relay]\nmode = \"mptcp\"\n");
    assert_eq!(relay(&mptcp, d).unwrap().relay.mode, RelayMode::Mptcp);
    let single = edit(&no_tls, "[relay]\n", "[relay]\nmode = \"single\"\n");
    assert!(relay(&single, d).unwrap().tls.is_none());
    // The proxy always needs it.
    proxy_err("", d, "tls", "missing field `tls`");
    proxy_err(
        &edit(PROXY_MIN, "ca = \"ca.pem\"", "ca = \"other/ca.pem\""),
        d,
        "tls.ca",
        "file not found",
    );
}

#[test]
fn intercept_errors() {
    let dir = files();
    let d = dir.path();
    let transparent = edit(
        RELAY_MIN,
        "socks5 = \"127.0.0.1:1080\"",
        "transparent = \"0.0.0.0:7070\"\ninstall_nft = true",
    );
    relay_err(
        &transparent,
        d,
        "intercept.lan_device",
        "required when install_nft",
    );
    let ok = edit(
        &transparent,
        "install_nft = true",
        "install_nft = true\nlan_device = \"lan0\"",
    );
    relay(&ok, d).unwrap();
    // Without install_nft the operator provides the rules; no device needed.
    relay(
        &edit(&transparent, "install_nft = true", "install_nft = false"),
        d,
    )
    .unwrap();
    relay_err(
        &edit(
            &ok,
            "transparent = \"0.0.0.0:7070\"",
            "transparent = \"[::]:7070\"",
        ),
        d,
        "intercept.transparent",
        "is IPv6",
    );
    relay_err(
        &edit(
            &ok,
            "transparent = \"0.0.0.0:7070\"",
            "transparent6 = \"0.0.0.0:7070\"",
        ),
        d,
        "intercept.transparent6",
        "is IPv4",
    );
    relay_err(
        &edit(RELAY_MIN, "socks5 = \"127.0.0.1:1080\"", ""),
        d,
        "intercept",
        "no listener",
    );
    relay_err(
        &edit(
            RELAY_MIN,
            "socks5 = \"127.0.0.1:1080\"",
            "socks5 = \"127.0.0.1:1080\"\nlan_device = \"a/b\"",
        ),
        d,
        "intercept.lan_device",
        "not an interface name",
    );
    relay_err(
        &format!("{RELAY_MIN}\n[metrics]\nlisten = \"127.0.0.1:1080\"\n"),
        d,
        "metrics.listen",
        "already used by intercept.socks5",
    );
    relay_err(
        &format!("{RELAY_MIN}\n[dns]\nlisten = \"10.0.1.1:53\"\n"),
        d,
        "dns.upstream",
        "required when dns.listen",
    );
}

#[test]
fn context_errors() {
    let dir = files();
    let d = dir.path();
    relay_err(
        &format!("{RELAY_MIN}\n[context]\nsource = \"replay\"\n"),
        d,
        "context.replay",
        "required when context.source",
    );
    relay_err(
        &format!("{RELAY_MIN}\n[context]\nsource = \"replay\"\nreplay = \"trip.csv\"\n"),
        d,
        "context.replay",
        "file not found",
    );
    let r = relay(
        &format!("{RELAY_MIN}\n[context]\nsource = \"replay\"\nreplay = \"context.csv\"\n"),
        d,
    )
    .unwrap();
    assert_eq!(r.context.replay, Some(d.join("context.csv")));
    relay_err(
        &format!("{RELAY_MIN}\n[context]\nsource = \"gpsd\"\ngpsd = \"localhost:2947\"\n"),
        d,
        "context.gpsd",
        "host names are not resolved",
    );
}

#[test]
fn modem_context_keys() {
    let dir = files();
    let d = dir.path();
    let mm = "\n[context]\nsource = \"gpsd\"\ncells = \"modemmanager\"\n";
    let text = edit(
        &format!("{RELAY_MIN}{mm}signal_rate_s = 2\ndbus = \"unix:path=/tmp/bus\"\n"),
        "device = \"path1\"",
        "device = \"path1\"\nmodem = \"350000000000002\"",
    );
    let r = relay(&text, d).unwrap();
    assert_eq!(r.context.cells, CellSource::ModemManager);
    assert!(r.context.cells_from_modemmanager());
    assert_eq!(r.context.signal_rate(), std::time::Duration::from_secs(2));
    assert_eq!(r.paths[1].modem.as_deref(), Some("350000000000002"));
    assert_eq!(r.paths[0].modem, None);
    // Written back and read again: the same.
    assert_eq!(relay(&r.to_toml(), d).unwrap(), r);
    // Positions from the modems imply cells from them.
    let r = relay(
        &format!("{RELAY_MIN}\n[context]\nsource = \"modemmanager\"\n"),
        d,
    )
    .unwrap();
    assert!(r.context.cells_from_modemmanager());
    relay_err(
        &format!("{RELAY_MIN}\n[context]\ncells = \"modemmanager\"\n"),
        d,
        "context.cells",
        "positions from context.source",
    );
    relay_err(
        &format!("{RELAY_MIN}{mm}signal_rate_s = 0\n"),
        d,
        "context.signal_rate_s",
        "1 to 60",
    );
    relay_err(
        &format!("{RELAY_MIN}{mm}dbus = \"nonsense\"\n"),
        d,
        "context.dbus",
        "not a D-Bus address",
    );
    relay_err(
        &edit(
            RELAY_MIN,
            "device = \"path1\"",
            "device = \"path1\"\nmodem = \"1\"",
        ),
        d,
        "path[1].modem",
        "context.cells = \"modemmanager\"",
    );
    // AT ports: every path needs one, and only with cells = "at".
    let at = "\n[context]\nsource = \"gpsd\"\ncells = \"at\"\n";
    relay_err(
        &edit(
            &format!("{RELAY_MIN}{at}"),
            "device = \"path0\"",
            "device = \"path0\"\nat_port = \"/dev/ttyUSB2\"",
        ),
        d,
        "path[1].at_port",
        "required with context.cells = \"at\"",
    );
    let both = edit(
        &edit(
            RELAY_MIN,
            "device = \"path0\"",
            "device = \"path0\"\nat_port = \"/dev/ttyUSB2\"",
        ),
        "device = \"path1\"",
        "device = \"path1\"\nat_port = \"/dev/ttyUSB5\"",
    );
    let r = relay(&format!("{both}{at}"), d).unwrap();
    assert_eq!(r.context.cells, CellSource::At);
    assert_eq!(
        r.paths[1].at_port.as_deref(),
        Some(Path::new("/dev/ttyUSB5"))
    );
    relay_err(
        &both,
        d,
        "path[0].at_port",
        "only with context.cells = \"at\"",
    );
}

#[test]
fn relay_linkdb_errors() {
    let dir = files();
    let d = dir.path();
    let gpsd = "\n[context]\nsource = \"gpsd\"\n";
    let db = "\n[linkdb]\ndb = \"sqlite:/tmp/x.sqlite\"\ntrack_origin = [39.86, 116.37]\n";
    let r = relay(&format!("{RELAY_MIN}{gpsd}{db}"), d).unwrap();
    assert_eq!(r.linkdb.db.as_deref(), Some("sqlite:/tmp/x.sqlite"));
    assert_eq!(r.linkdb.model, "paper");
    assert!(relay(RELAY_MIN, d).unwrap().linkdb.db.is_none());
    // The uplink predictor follows the relay's own context.
    relay_err(
        &format!("{RELAY_MIN}{db}"),
        d,
        "linkdb.db",
        "context.source",
    );
    // The same checks as the proxy's section.
    relay_err(
        &format!("{RELAY_MIN}{gpsd}\n[linkdb]\ndb = \"sqlite:/tmp/x.sqlite\"\n"),
        d,
        "linkdb.track_origin",
        "required with linkdb.db",
    );
    relay_err(
        &format!("{RELAY_MIN}{gpsd}{db}model = \"svm\"\n"),
        d,
        "linkdb.model",
        "unknown model",
    );
    // Pruning the history is the proxy's nightly job.
    relay_err(
        &format!("{RELAY_MIN}{gpsd}{db}keep_days = 30\n"),
        d,
        "linkdb.keep_days",
        "the proxy's nightly import prunes",
    );
}

#[test]
fn the_proxys_history_keeps_keep_days() {
    let dir = files();
    let d = dir.path();
    let db = "\n[linkdb]\ndb = \"sqlite:/tmp/x.sqlite\"\ntrack_origin = [39.86, 116.37]\n";
    assert_eq!(
        proxy(&format!("{PROXY_MIN}{db}"), d)
            .unwrap()
            .linkdb
            .keep_days,
        None
    );
    let p = proxy(&format!("{PROXY_MIN}{db}keep_days = 365\n"), d).unwrap();
    assert_eq!(p.linkdb.keep_days, Some(365));
    for bad in ["0", "36501"] {
        proxy_err(
            &format!("{PROXY_MIN}{db}keep_days = {bad}\n"),
            d,
            "linkdb.keep_days",
            &format!("{bad}: 1 to 36500 days"),
        );
    }
    proxy_err(
        &format!("{PROXY_MIN}\n[linkdb]\nkeep_days = 30\n"),
        d,
        "linkdb.keep_days",
        "nothing to prune without linkdb.db",
    );
}

#[test]
fn limits_and_log_errors() {
    let dir = files();
    let d = dir.path();
    for (body, key, words) in [
        (
            "flow_window_bytes = 0",
            "limits.flow_window_bytes",
            "out of range",
        ),
        (
            "user_window_bytes = 0",
            "limits.user_window_bytes",
            "out of range",
        ),
        (
            "flow_window_bytes = 8388608\nuser_window_bytes = 4194304",
            "limits.user_window_bytes",
            "smaller than limits.flow_window_bytes",
        ),
        ("max_flows = 0", "limits.max_flows", "out of range"),
    ] {
        relay_err(&format!("{RELAY_MIN}\n[limits]\n{body}\n"), d, key, words);
        proxy_err(&format!("{PROXY_MIN}\n[limits]\n{body}\n"), d, key, words);
    }
    relay_err(
        &format!("{RELAY_MIN}\n[log]\nlevel = \"verbose\"\n"),
        d,
        "log.level",
        "unknown level \"verbose\"",
    );
    relay_err(
        &format!("{RELAY_MIN}\n[log]\nformat = \"xml\"\n"),
        d,
        "log.format",
        "unknown variant `xml`",
    );
    let r = relay(
        &format!(
            "{RELAY_MIN}\n[log]\nformat = \"json\"\nlevel = \"info,polycorn_net::subflow=debug\"\n"
        ),
        d,
    )
    .unwrap();
    assert_eq!(r.log.format, LogFormat::Json);
}

#[test]
fn proxy_errors() {
    let dir = files();
    let d = dir.path();
    let p = proxy(
        &format!(
            "[proxy]\nlisten = [\"0.0.0.0:7700\", \"[::]:7700\"]\ntunnel_listen = \"0.0.0.0:7701\"\n\
             tunnel_peers = [\"10.100.0.0/16\"]\n{PROXY_MIN}"
        ),
        d,
    )
    .unwrap();
    assert_eq!(p.proxy.listen.len(), 2);
    let p = proxy(
        &format!("[proxy]\nrevoked_relays = [\"train-017\", \"train-9\"]\n{PROXY_MIN}"),
        d,
    )
    .unwrap();
    assert_eq!(p.proxy.revoked_relays, ["train-017", "train-9"]);
    proxy_err(
        &format!("[proxy]\nrevoked_relays = [\"train-1\", \"Train 2\"]\n{PROXY_MIN}"),
        d,
        "proxy.revoked_relays[1]",
        "\"Train 2\": only a-z, 0-9 and '-' are allowed",
    );
    proxy_err(
        &format!("[proxy]\ntunnel_listen = \"0.0.0.0:7701\"\n{PROXY_MIN}"),
        d,
        "proxy.tunnel_peers",
        "required when proxy.tunnel_listen",
    );
    proxy_err(
        &format!("[proxy]\ntunnel_listen = \"0.0.0.0:7701\"\ntunnel_peers = [\"10.100.0.1/16\"]\n{PROXY_MIN}"),
        d,
        "proxy.tunnel_peers[0]",
        "host bits set",
    );
    proxy_err(
        &format!("[proxy]\ntunnel_peers = [\"relay\"]\n{PROXY_MIN}"),
        d,
        "proxy.tunnel_peers[0]",
        "expected a CIDR",
    );
    proxy_err(
        &format!("[proxy]\ncongestion = \"\"\n{PROXY_MIN}"),
        d,
        "proxy.congestion",
        "not a congestion control name",
    );
    proxy_err(
        &format!("[proxy]\nrto_max_ms = 120001\n{PROXY_MIN}"),
        d,
        "proxy.rto_max_ms",
        "out of range 1000..=120000",
    );
    proxy_err(
        &format!("[proxy]\nlisten = []\n{PROXY_MIN}"),
        d,
        "proxy.listen",
        "no address",
    );
    proxy_err(
        &format!("[proxy]\nlisten = [\"0.0.0.0:7700\", \"0.0.0.0:7700\"]\n{PROXY_MIN}"),
        d,
        "proxy.listen[1]",
        "already used by proxy.listen[0]",
    );
    proxy_err(
        &format!("[proxy]\ntunnel_listen = \"0.0.0.0:7700\"\n{PROXY_MIN}"),
        d,
        "proxy.tunnel_listen",
        "already used by proxy.listen[0]",
    );
    proxy_err(
        &format!("[proxy]\nscheduler = \"\"\n{PROXY_MIN}"),
        d,
        "proxy.scheduler",
        "empty scheduler spec",
    );
    proxy_err(
        &format!("[proxy]\nconnect_timeout_s = 0\n{PROXY_MIN}"),
        d,
        "proxy.connect_timeout_s",
        "out of range 1..=300",
    );
    proxy_err(
        &format!("[proxy]\nhold_time_s = 7200\n{PROXY_MIN}"),
        d,
        "proxy.hold_time_s",
        "out of range",
    );
    proxy_err(
        &format!("[proxy]\ndrain_s = 60\n{PROXY_MIN}"),
        d,
        "proxy.drain_s",
        "60 is out of range 0..=30",
    );
    proxy_err(
        &format!("[proxy]\nidle_probe_s = 600\n{PROXY_MIN}"),
        d,
        "proxy.idle_probe_s",
        "600 is out of range 0..=60",
    );
    let p = proxy(
        &format!("[proxy]\nidle_probe_s = 60\nidle_probe_after_s = 3600\n{PROXY_MIN}"),
        d,
    )
    .unwrap();
    assert_eq!(
        p.proxy.idle_probe(),
        Some(std::time::Duration::from_secs(60))
    );
    assert_eq!(
        p.proxy.idle_probe_after(),
        std::time::Duration::from_secs(3600)
    );
    proxy_err(
        &format!("[proxy]\nidle_probe_after_s = 3601\n{PROXY_MIN}"),
        d,
        "proxy.idle_probe_after_s",
        "3601 is out of range 10..=3600",
    );
    assert_eq!(proxy(PROXY_MIN, d).unwrap().proxy.window_gain(), Some(2.0));
    let p = proxy(&format!("[proxy]\nwindow_gain = 0\n{PROXY_MIN}"), d).unwrap();
    assert_eq!(p.proxy.window_gain(), None);
    proxy_err(
        &format!("[proxy]\nwindow_gain = 0.99\n{PROXY_MIN}"),
        d,
        "proxy.window_gain",
        "0.99 is out of range 1..=16",
    );
    let p = proxy(PROXY_MIN, d).unwrap();
    assert_eq!(
        p.proxy.idle_probe(),
        Some(std::time::Duration::from_secs(5))
    );
    proxy_err(
        &format!("{PROXY_MIN}\n[policy]\ndeny = [\"10.0.0.1/8\"]\n"),
        d,
        "policy.deny[0]",
        "host bits set; write \"10.0.0.0/8\"",
    );
    proxy_err(
        &format!("{PROXY_MIN}\n[policy]\nallow_privat = true\n"),
        d,
        "policy.allow_privat",
        "unknown field",
    );
    proxy_err(
        &format!("{PROXY_MIN}\n[linkdb]\ndb = \" \"\n"),
        d,
        "linkdb.db",
        "empty",
    );
    let p = proxy(
        &format!("{PROXY_MIN}\n[policy]\nallow = [\"0.0.0.0/0\", \"::/0\", \"10.0.2.2/32\"]\n"),
        d,
    )
    .unwrap();
    assert!(p.destination_policy_allows("10.0.2.2"));
    assert!(p.destination_policy_allows("2606:2800:220:1::1"));
    assert!(!p.destination_policy_allows("10.0.2.3"));
}

#[test]
fn the_proxy_may_be_a_host_name_in_polycorn_mode() {
    let d = files();
    let d = d.path();
    let named = edit(
        RELAY_MIN,
        "proxy = \"10.0.2.1:7700\"",
        "proxy = \"proxy.polycorn.invalid:7700\"",
    );
    let r = relay(&named, d).unwrap();
    let want = polycorn_net::proxy_addr::ProxyAddr::Name {
        host: "proxy.polycorn.invalid".into(),
        port: 7700,
    };
    assert_eq!(r.proxy_for(&r.paths[0]), want);
    // A path's own proxy may be a name too, and overrides relay.proxy.
    let per_path = edit(
        RELAY_MIN,
        "source = \"10.101.0.1\"",
        "source = \"10.101.0.1\"\nproxy = \"other.polycorn.invalid:7000\"",
    );
    let r = relay(&per_path, d).unwrap();
    assert_eq!(r.proxy_for(&r.paths[0]), "10.0.2.1:7700".parse().unwrap());
    assert_eq!(
        r.proxy_for(&r.paths[1]).to_string(),
        "other.polycorn.invalid:7000"
    );
    // The baselines take addresses only: the key is named.
    relay_err(
        &edit(&named, "[relay]\n", "[relay]\nmode = \"mptcp\"\n"),
        d,
        "relay.proxy",
        "mode \"mptcp\" needs an IP address",
    );
    relay_err(
        &edit(&per_path, "[relay]\n", "[relay]\nmode = \"single\"\n"),
        d,
        "path[1].proxy",
        "mode \"single\" needs an IP address",
    );
    // Bad names are refused where they are written.
    relay_err(
        &edit(
            RELAY_MIN,
            "proxy = \"10.0.2.1:7700\"",
            "proxy = \"proxy..net:7700\"",
        ),
        d,
        "relay.proxy",
        "1 to 63 characters",
    );
    // `config check` warns about a name that does not resolve here (`.invalid` never does),
    // once per name, and accepts the file.
    let both = edit(
        &named,
        "source = \"10.101.0.1\"",
        "source = \"10.101.0.1\"\nproxy = \"proxy.polycorn.invalid:7700\"",
    );
    let warnings = relay(&both, d).unwrap().host_warnings("relay.toml");
    let resolve: Vec<_> = warnings
        .iter()
        .filter(|w| w.contains("does not resolve"))
        .collect();
    assert_eq!(resolve.len(), 1, "{warnings:?}");
    assert!(
        resolve[0]
            .starts_with("relay.toml: relay.proxy: proxy.polycorn.invalid:7700 does not resolve"),
        "{}",
        resolve[0]
    );
}

/// `config check` tells what each proxy name resolves to here and whether the relay can fail
/// over between its addresses (several of one family).
#[test]
fn config_check_tells_a_proxy_names_addresses_and_failover() {
    use polycorn_net::config::describe_proxy_name;
    use std::time::Duration;
    let name: polycorn_net::proxy_addr::ProxyAddr = "proxies.example.net:7700".parse().unwrap();
    let a = |s: &str| s.parse::<SocketAddr>().unwrap();
    let two = describe_proxy_name(
        &name,
        &[a("192.0.2.1:7700"), a("192.0.2.2:7700")],
        Duration::from_secs(30),
    );
    assert_eq!(
        two,
        "proxy proxies.example.net:7700 resolves here to 192.0.2.1, 192.0.2.2 (failover between \
         the 2 IPv4 addresses: the relay moves to the next when no path has reached the one in \
         use for 30 s)"
    );
    let both = describe_proxy_name(
        &name,
        &[
            a("192.0.2.1:7700"),
            a("[2001:db8::1]:7700"),
            a("192.0.2.2:7700"),
            a("[2001:db8::2]:7700"),
        ],
        Duration::from_secs(10),
    );
    assert!(
        both.contains("between the 2 IPv4 addresses and between the 2 IPv6 addresses")
            && both.ends_with("for 10 s)"),
        "{both}"
    );
    let one = describe_proxy_name(&name, &[a("192.0.2.1:7700")], Duration::from_secs(30));
    assert!(one.ends_with("192.0.2.1 (one proxy: no failover)"), "{one}");
    // From a file: localhost resolves everywhere; a name that does not resolve gets no note
    // (host_warnings warns about it); a literal address needs none. The hold time sets the
    // failover time, never below 10 s.
    let d = files();
    let d = d.path();
    let text = edit(
        RELAY_MIN,
        "proxy = \"10.0.2.1:7700\"",
        "proxy = \"localhost:7700\"\nhold_time_s = 3",
    );
    let notes = relay(&text, d).unwrap().proxy_notes();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].starts_with("proxy localhost:7700 resolves here to ")
            && notes[0].contains("127.0.0.1"),
        "{notes:?}"
    );
    let invalid = edit(
        RELAY_MIN,
        "proxy = \"10.0.2.1:7700\"",
        "proxy = \"proxy.polycorn.invalid:7700\"",
    );
    assert!(relay(&invalid, d).unwrap().proxy_notes().is_empty());
    assert!(relay(RELAY_MIN, d).unwrap().proxy_notes().is_empty());
}

#[test]
fn the_proxy_records_its_relays_context_in_a_directory_it_can_make() {
    let dir = files();
    let d = dir.path();
    assert!(proxy(PROXY_MIN, d).unwrap().context.record.is_none());
    let p = proxy(&format!("{PROXY_MIN}\n[context]\nrecord = \"rides\"\n"), d).unwrap();
    assert_eq!(p.context.record, Some(d.join("rides")));
    proxy_err(
        &format!("{PROXY_MIN}\n[context]\nrecord = \"ca.pem/x\"\n"),
        d,
        "context.record",
        "ca.pem: not a directory",
    );
    // How long each relay's logs stay.
    let p = proxy(
        &format!("{PROXY_MIN}\n[context]\nrecord = \"rides\"\nkeep_days = 30\n"),
        d,
    )
    .unwrap();
    assert_eq!(p.context.keep_days, Some(30));
    proxy_err(
        &format!("{PROXY_MIN}\n[context]\nkeep_days = 30\n"),
        d,
        "context.keep_days",
        "nothing to keep without context.record",
    );
    for bad in ["0", "36501"] {
        proxy_err(
            &format!("{PROXY_MIN}\n[context]\nrecord = \"rides\"\nkeep_days = {bad}\n"),
            d,
            "context.keep_days",
            &format!("{bad}: 1 to 36500 finished days"),
        );
    }
    let e = proxy(
        &format!("{PROXY_MIN}\n[context]\nrecord = \"rides\"\nkeep_days = -1\n"),
        d,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("keep_days"), "{e}");
    // How late the relays' modem monitors report (for the nightly import).
    assert_eq!(proxy(PROXY_MIN, d).unwrap().context.monitor_lag_ms, 0);
    let p = proxy(
        &format!("{PROXY_MIN}\n[context]\nrecord = \"rides\"\nmonitor_lag_ms = 800\n"),
        d,
    )
    .unwrap();
    assert_eq!(p.context.monitor_lag_ms, 800);
    proxy_err(
        &format!("{PROXY_MIN}\n[context]\nmonitor_lag_ms = 60001\n"),
        d,
        "context.monitor_lag_ms",
        "at most 60000 ms",
    );
    // The relay's other context keys are not the proxy's.
    let e = proxy(&format!("{PROXY_MIN}\n[context]\nsource = \"gpsd\"\n"), d)
        .unwrap_err()
        .to_string();
    assert!(e.contains("source"), "{e}");
}

#[test]
fn context_record_is_a_directory_the_relay_can_make() {
    let dir = files();
    let d = dir.path();
    let gpsd = "\n[context]\nsource = \"gpsd\"\n";
    // Relative to the file's directory; made at start when only its parent exists.
    let r = relay(&format!("{RELAY_MIN}{gpsd}record = \"ctx\"\n"), d).unwrap();
    assert_eq!(r.context.record, Some(d.join("ctx")));
    assert!(relay(RELAY_MIN, d).unwrap().context.record.is_none());
    relay_err(
        &format!("{RELAY_MIN}\n[context]\nrecord = \"ctx\"\n"),
        d,
        "context.record",
        "nothing to record without context.source",
    );
    relay_err(
        &format!("{RELAY_MIN}{gpsd}record = \"ca.pem\"\n"),
        d,
        "context.record",
        "not a directory",
    );
    relay_err(
        &format!("{RELAY_MIN}{gpsd}record = \"ca.pem/ctx/day\"\n"),
        d,
        "context.record",
        "ca.pem: not a directory",
    );
    // Directories that do not exist yet are made at start.
    let r = relay(&format!("{RELAY_MIN}{gpsd}record = \"a/b/c\"\n"), d).unwrap();
    assert_eq!(r.context.record, Some(d.join("a/b/c")));
    assert_eq!(r.context.keep_days, None);
    let r = relay(
        &format!("{RELAY_MIN}{gpsd}record = \"ctx\"\nkeep_days = 14\n"),
        d,
    )
    .unwrap();
    assert_eq!(r.context.keep_days, Some(14));
    relay_err(
        &format!("{RELAY_MIN}{gpsd}keep_days = 14\n"),
        d,
        "context.keep_days",
        "nothing to keep without context.record",
    );
    relay_err(
        &format!("{RELAY_MIN}{gpsd}record = \"ctx\"\nkeep_days = 0\n"),
        d,
        "context.keep_days",
        "0: 1 to 36500 finished days",
    );
}
