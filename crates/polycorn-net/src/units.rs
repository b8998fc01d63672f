//! systemd units of the relay, the proxy and LinkDB's nightly learning, as
//! `polycorn config example` prints them.

use std::path::Path;

use anyhow::{bail, Context, Result};

use crate::config::{ProxyConfig, RelayConfig};

/// A oneshot unit on the proxy's host: LinkDB learns the rides the proxy recorded on past days
/// (`linkdb import --proxy-config … --past-days`), then the proxy rebuilds its predictor (a
/// reload), if it runs.
pub fn linkdb_learn_unit(bin: &Path) -> Result<String> {
    let bin = unit_bin(bin)?;
    Ok(format!(
        r#"# LinkDB learns the rides polycorn-proxy recorded ([context] record in proxy.toml), then the
# proxy rebuilds its predictor from them. Started each night by polycorn-linkdb-learn.timer:
#   polycorn config example linkdb-learn.service > /etc/systemd/system/polycorn-linkdb-learn.service
#   polycorn config example linkdb-learn.timer > /etc/systemd/system/polycorn-linkdb-learn.timer
#   systemctl daemon-reload && systemctl enable --now polycorn-linkdb-learn.timer
# Run it at once with `systemctl start polycorn-linkdb-learn`; its report is in
# `journalctl -u polycorn-linkdb-learn`. Only logs of past UTC days are taken (today's are still
# being written); a file imported before stores nothing again.
[Unit]
Description=polycorn: LinkDB learns the rides the proxy recorded
After=network-online.target polycorn-proxy.service
Wants=network-online.target

[Service]
Type=oneshot
ExecStart={bin} linkdb import --proxy-config /etc/polycorn/proxy.toml --past-days
# The proxy's sessions take the new predictor without a restart; nothing if it is not running.
ExecStartPost=systemctl try-reload-or-restart polycorn-proxy.service
NoNewPrivileges=yes
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
# /var/lib/polycorn stays writable (a LinkDB SQLite file); PostgreSQL is reached over the network.
StateDirectory=polycorn
"#
    ))
}

/// When `linkdb-learn.service` runs: every night, after the UTC day's logs are closed.
pub const LINKDB_LEARN_TIMER: &str = r#"# Starts polycorn-linkdb-learn.service every night, after the UTC day's context logs close
# (see `polycorn config example linkdb-learn.service`). A night missed while the host was down
# is made up at the next boot.
[Unit]
Description=polycorn: LinkDB learns the past day's rides every night

[Timer]
OnCalendar=*-*-* 00:30:00 UTC
RandomizedDelaySec=30min
Persistent=true

[Install]
WantedBy=timers.target
"#;

/// A systemd socket unit holding the relay's passenger listeners (those of `cfg`) across
/// restarts of `polycorn-relay.service` (socket activation; `crate::activation`).
pub fn systemd_socket_unit(cfg: &RelayConfig, bin: &Path) -> Result<String> {
    let bin = unit_bin(bin)?;
    let ic = &cfg.intercept;
    let mut listen = String::new();
    if let Some(a) = ic.transparent {
        listen += &format!("# intercept.transparent\nListenStream={a}\n");
    }
    if let Some(a) = ic.transparent6 {
        listen += &format!("# intercept.transparent6\nListenStream={a}\n");
    }
    if let Some(a) = ic.socks5 {
        listen += &format!("# intercept.socks5\nListenStream={a}\n");
    }
    if let Some(a) = cfg.dns.listen {
        listen += &format!("# dns.listen\nListenDatagram={a}\n");
    }
    if let Some(dev) = &ic.lan_device {
        listen += &format!(
            "# Passengers' connections only, never the carriers' side (intercept.lan_device;\n\
             # the relay binds its transparent listeners to it too).\nBindToDevice={dev}\n"
        );
    }
    Ok(format!(
        r#"# The polycorn relay's passenger listeners, held by systemd across restarts of the relay
# (socket activation). Without it a restarted or crashed relay's listeners are gone until the
# next process binds them, and passengers' new connections wait for their SYN retransmission
# (about 1 s); with it they wait in the listeners' backlog and the next relay takes them. The
# relay then leaves its nftables rules installed when it stops; this unit removes them when
# it stops itself. Install it beside polycorn-relay.service (`config example relay.service`):
#   polycorn config example relay.socket --config /etc/polycorn/relay.toml > /etc/systemd/system/polycorn-relay.socket
#   systemctl daemon-reload && systemctl enable --now polycorn-relay.socket && systemctl restart polycorn-relay
# The addresses must be exactly the relay's listeners; the relay refuses to start otherwise,
# naming both. Print this again after changing them in relay.toml.

[Unit]
Description=polycorn relay: passengers' listeners

[Socket]
{listen}# TPROXY listeners must be transparent (the relay also sets it on the sockets it is given).
Transparent=yes
# IPv6 listeners take IPv6 only, as the relay's own do (an IPv4 one may share the port).
BindIPv6Only=ipv6-only
Backlog=1024
Service=polycorn-relay.service
ExecStopPost={bin} relay --config /etc/polycorn/relay.toml --remove-interception

[Install]
WantedBy=sockets.target
"#
    ))
}

/// A systemd socket unit holding the proxy's subflow listeners (`proxy.listen` of `cfg`)
/// across restarts of `polycorn-proxy.service`. The baselines' tunnel listener (an MPTCP
/// socket) stays the proxy's own.
pub fn systemd_proxy_socket_unit(cfg: &ProxyConfig) -> String {
    let all = &cfg.proxy.listen;
    let mut listen = String::new();
    for a in all {
        listen += &format!("ListenStream={a}\n");
    }
    // As the proxy binds its own: an IPv6 listener is IPv6-only when an IPv4 one shares its
    // port, and otherwise follows the system's default (on Linux it takes both families).
    let shared = all
        .iter()
        .any(|a| a.is_ipv6() && all.iter().any(|b| b.is_ipv4() && b.port() == a.port()));
    let v6only = if shared {
        "# An IPv4 listener shares an IPv6 one's port: IPv6 listeners take IPv6 only.\n\
         BindIPv6Only=ipv6-only\n"
    } else {
        ""
    };
    format!(
        r#"# The polycorn proxy's subflow listeners (proxy.listen), held by systemd across restarts of
# the proxy (socket activation). Without it relays' subflows are refused while no proxy
# listens and each relay tries again on its next attempt (every 250 ms); with it they wait in
# the listeners' backlog and the next proxy takes them. Passengers' open connections are still
# reset by a restart: the proxy's sessions do not survive it. proxy.tunnel_listen (kernel
# MPTCP baselines) is not held: the proxy binds that MPTCP socket itself. Install it beside
# polycorn-proxy.service (`config example proxy.service`):
#   polycorn config example proxy.socket --config /etc/polycorn/proxy.toml > /etc/systemd/system/polycorn-proxy.socket
#   systemctl daemon-reload && systemctl enable --now polycorn-proxy.socket && systemctl restart polycorn-proxy
# The addresses must be exactly the proxy's listen addresses; the proxy refuses to start
# otherwise, naming both. Print this again after changing them in proxy.toml.

[Unit]
Description=polycorn proxy: relays' subflow listeners

[Socket]
# proxy.listen
{listen}{v6only}Backlog=1024
Service=polycorn-proxy.service

[Install]
WantedBy=sockets.target
"#
    )
}

/// This program's path for a unit: UTF-8 without whitespace.
fn unit_bin(bin: &Path) -> Result<&str> {
    bin.to_str()
        .filter(|b| !b.contains(char::is_whitespace))
        .with_context(|| {
            format!(
                "{}: this program's path must be UTF-8 without spaces to go in a unit; \
                 install it elsewhere (e.g. /usr/local/bin/polycorn)",
                bin.display()
            )
        })
}

/// A systemd unit that runs `bin relay|proxy --config /etc/polycorn/ROLE.toml`: checked
/// before every start, restarted whenever it stops, with the network powers the daemon needs
/// and little else.
pub fn systemd_unit(role: &str, bin: &Path) -> Result<String> {
    let (what, after, caps) = match role {
        "relay" => (
            "passengers' TCP over every cellular path to the proxy",
            // Modems may come up later: the relay keeps connecting each path (and warns about a
            // path that stays without a subflow).
            "network-online.target gpsd.service",
            // nftables TPROXY and policy routing, SO_BINDTODEVICE, IP_TRANSPARENT, DNS on :53.
            "CAP_NET_ADMIN CAP_NET_RAW CAP_NET_BIND_SERVICE",
        ),
        "proxy" => (
            "terminates relays' subflows and connects to servers",
            "network-online.target",
            // A listen port below 1024; the sysctl of `slow_start_after_idle` when set.
            "CAP_NET_ADMIN CAP_NET_BIND_SERVICE",
        ),
        other => bail!("no systemd unit for `{other}`: expected `relay` or `proxy`"),
    };
    let bin = unit_bin(bin)?;
    // Both apply some changes on SIGHUP, which `config check --reload` sends once the file
    // passes (no `kill` program needed).
    let applies = if role == "proxy" {
        "proxy.revoked_relays, the TLS files, [policy], [context] and [linkdb] (LinkDB rebuilt from its database)"
    } else {
        "the TLS files (renewed certificates) and [linkdb] (LinkDB rebuilt from its database)"
    };
    let reload = format!(
        "# systemctl reload polycorn-{role}: applies {applies}; other keys need a restart.\n\
         ExecReload={bin} config check {role} /etc/polycorn/{role}.toml --reload $MAINPID\n"
    );
    Ok(format!(
        r#"# polycorn {role} as a systemd service. Install it with:
#   install -m 0755 {bin} /usr/local/bin/polycorn    # if not there already (then print this again)
#   mkdir -p /etc/polycorn && polycorn config example {role} > /etc/polycorn/{role}.toml   # edit it
#   polycorn config example {role}.service > /etc/systemd/system/polycorn-{role}.service
#   systemctl daemon-reload && systemctl enable --now polycorn-{role}
# Logs: journalctl -u polycorn-{role} (set [log] format = "json" for structured logs).
# Relative file names in {role}.toml resolve against /etc/polycorn; keep the TLS key there
# readable by root only.

[Unit]
Description=polycorn {role}: {what}
Wants=network-online.target
After={after}
# Never give up restarting (a train runs for days without anyone to log in).
StartLimitIntervalSec=0

[Service]
Type=exec
ExecStartPre={bin} config check {role} /etc/polycorn/{role}.toml
ExecStart={bin} {role} --config /etc/polycorn/{role}.toml
{reload}Restart=always
RestartSec=2
# On SIGTERM the {role} lets open connections finish for {role}.drain_s (default 0, at most
# 30 s), tells the other end it is leaving (within two seconds), closes its connections and
# removes what it installed (the relay: its nftables table and policy routes, unless
# polycorn-relay.socket holds its listeners); after a harder kill the next start removes
# leftovers.
KillSignal=SIGTERM
TimeoutStopSec=40
# One socket per passenger connection (and, on the proxy, per server connection).
LimitNOFILE=1048576
# Root's network powers and nothing else.
CapabilityBoundingSet={caps}
NoNewPrivileges=yes
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
# /var/lib/polycorn stays writable (e.g. a LinkDB SQLite file, [context] record).
StateDirectory=polycorn
ProtectKernelModules=yes
ProtectControlGroups=yes
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK
RestrictNamespaces=yes
RestrictRealtime=yes
LockPersonality=yes
SystemCallArchitectures=native

[Install]
WantedBy=multi-user.target
"#
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The proxy's socket unit binds its listen addresses as the proxy would: an IPv6 one
    /// IPv6-only only when an IPv4 one shares its port.
    #[test]
    fn the_proxy_socket_unit_lists_every_listener_and_splits_families_on_a_shared_port() {
        let mut cfg = ProxyConfig::example_settings();
        cfg.proxy.listen = vec!["0.0.0.0:7700".parse().unwrap()];
        let unit = systemd_proxy_socket_unit(&cfg);
        assert!(
            unit.lines().any(|l| l == "ListenStream=0.0.0.0:7700"),
            "{unit}"
        );
        assert!(!unit.contains("BindIPv6Only"), "{unit}");
        cfg.proxy.listen = vec!["[::]:7700".parse().unwrap()];
        assert!(!systemd_proxy_socket_unit(&cfg).contains("BindIPv6Only"));
        cfg.proxy.listen = vec![
            "0.0.0.0:7700".parse().unwrap(),
            "[::]:7700".parse().unwrap(),
        ];
        let unit = systemd_proxy_socket_unit(&cfg);
        for line in [
            "ListenStream=0.0.0.0:7700",
            "ListenStream=[::]:7700",
            "BindIPv6Only=ipv6-only",
        ] {
            assert!(unit.lines().any(|l| l == line), "{line} in\n{unit}");
        }
    }
}
