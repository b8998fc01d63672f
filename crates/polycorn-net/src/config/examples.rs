//! The commented example files (`polycorn config example relay|proxy`).

/// The `[linkdb]` keys, commented out, shared by the relay's and the proxy's example.
macro_rules! linkdb_example_keys {
    () => {
        r#"# db = "sqlite:/var/lib/polycorn/linkdb.sqlite"
# model = "paper"                 # paper | risk | loctable
# route = "hsr-1"                 # only rides of this route
# carriers = ["A", "B"]           # carrier of path 0, path 1, ... as LinkDB names them
# track_origin = [39.86, 116.37]  # [lat, lon] of position 0 of the line (required with db)
# track_heading_deg = 160.0       # heading of increasing position
"#
    };
}

pub(super) const RELAY_EXAMPLE: &str = concat!(
    r#"# polycorn relay configuration (on the train's gateway).
# Relative file names are resolved against this file's directory.

[relay]
# polycorn | mptcp | single
#   polycorn: every passenger flow multiplexed over all paths (needs [tls])
#   mptcp:    baseline, one kernel MPTCP connection per passenger connection
#   single:   baseline, one path per passenger, passengers round robin over the paths
mode = "polycorn"
# Uplink scheduler: a preset (polycorn, hrsch, minrtt, roundrobin, redundant, blest, ecf,
# stms, musher, single, loctable) or a pipeline such as "hpr,minrtt,tpr,ori+er(k=3)". polycorn is the
# paper's HRSCH whose reinjection also fires when a modem reports its cell lost.
scheduler = "polycorn"
# The proxy's subflow address, for every path that does not set its own: IP:port, or
# host:port resolved by the relay (mode "polycorn"; kept while the name still lists it, looked
# up again when a path fails to connect, at most every 10 s). A name with one address per
# proxy host gives failover: when no path has reached the proxy in use for hold_time_s (at
# least 10 s), the relay moves to the name's next address.
proxy = "10.0.2.1:7700"
# Proxy port of the mptcp / single baselines' tunnels.
tunnel_port = 7701
# Passenger connections survive an outage of all paths this long (0..=3600 s).
hold_time_s = 30
# On an orderly stop (systemctl stop/restart), let the passenger connections open at that
# moment finish for up to this long before closing (0..=30 s); no new connection is accepted
# meanwhile (with polycorn-relay.socket they wait for the next relay). 0: close at once.
# drain_s = 0
# With no passenger connection open for idle_probe_after_s (10..=3600), probe each path every
# idle_probe_s seconds instead of every 0.2 s (0..=60; 0: every 0.2 s always): an idle train
# then costs each SIM a few MB a day instead of over a hundred. The first connection after
# such a spell gets its first byte 50-100 ms later (measured on the emulated HSR trip).
# idle_probe_s = 5
# idle_probe_after_s = 120
# The uplink scheduler lets a path hold (in flight and queued) at most window_gain times the
# larger of its recent rate (10 s kept) times its smallest RTT and what it delivered in its
# last RTT, not the subflow's whole congestion window: a window grown in a busy moment would
# otherwise take a new upload in one burst on one path (1.0..=16.0; 0: the kernel's window as
# it is).
# window_gain = 2
# TCP congestion control of the subflows and tunnels. Default: "bbr" where this host can set
# it (otherwise the system's, with a warning at startup); "system" keeps the system's default
# (net.ipv4.tcp_congestion_control). Over the HSR trip model BBR shortened downloads against
# cubic (the manual's "Limits and defaults").
# congestion = "bbr"
# Idle subflows replaced with a fresh connection: "collapsed" (slow-start threshold below 20
# segments after a blackout), "used" (also after carrying 256 KB of downlink data), "off".
# idle_refresh = "collapsed"
# Set net.ipv4.tcp_slow_start_after_idle in the relay's network namespace at startup (affects
# every TCP socket there). false: uplink subflows keep their congestion window across idle
# gaps instead of restarting from 10 segments. Default: leave the system's setting (1).
# slow_start_after_idle = false
# Cap on the uplink subflows' retransmission timeout, ms (TCP_RTO_MAX_MS, 1000..=120000,
# Linux 6.15 or later). After a failed handover's blackout of several seconds a subflow
# otherwise waits out a timer that doubled with every timeout (up to about as long again as
# the blackout) before it sends again. Default: the kernel's (120 s).
# rto_max_ms = 1000

# One [[path]] per cellular interface (1 to 32); names, devices and sources must be unique.
[[path]]
name = "A"
device = "path0"
source = "10.100.0.1"
# proxy = "10.100.0.2:7700"   # optional: overrides relay.proxy for this path
# mtu = 1400                   # optional: for a carrier that drops larger packets silently
# A modem that gets a new address at every attach: leave `source` out (mode polycorn); each
# connection attempt then takes the interface's current address (IPv4 first, IPv6 when the
# proxy has no IPv4 address).

[[path]]
name = "B"
device = "path1"
source = "10.101.0.1"

[intercept]
# TPROXY listeners for passengers' TCP (IPv4 and IPv6); at least one listener is required.
# With lan_device set they take connections arriving on that interface only (SO_BINDTODEVICE),
# never from the carriers' side; a connection aimed at one of the relay's own addresses is
# refused either way (carried, it would loop back to the train through the proxy).
transparent = "0.0.0.0:7070"
# transparent6 = "[::]:7070"
# Explicit SOCKS5 listener, an alternative to transparent interception.
# socks5 = "10.0.1.1:1080"
# true: polycorn installs (and removes on exit) its nftables table and policy routing.
install_nft = true
# The passengers' interface; required with install_nft and a transparent listener, and
# recommended without it: the transparent listeners are bound to it.
lan_device = "lan0"
# block: passengers' UDP except DNS is rejected so QUIC falls back to TCP | allow
udp = "block"

[dns]
# Optional DNS service for passengers; queries go over TCP through the proxy to upstream
# (the proxy's [policy] must allow that address).
# listen = "10.0.1.1:53"
# upstream = "10.0.2.2:53"

[tls]
# CA, certificate and key from `polycorn tls generate` (or `tls relay --name` for this train).
# The CA's private key (ca.key) must stay off the train. Renewed files take effect with
# `systemctl reload polycorn-relay` (SIGHUP), without a restart.
ca = "ca.pem"
cert = "relay.pem"
key = "relay.key"

[context]
# Train context for handover prediction: none | gpsd | replay
source = "none"
gpsd = "127.0.0.1:2947"
# replay = "context.csv"     # required with source = "replay"
# Keep every fix with the modems' serving cells, one CSV per day, for
# `polycorn linkdb import --ride-log` (LinkDB learns this train's handovers):
# record = "/var/lib/polycorn/context"
# Remove the logs of days older than this many finished days (about 6 MB a day); left out,
# every log is kept:
# keep_days = 30

[linkdb]
# Optional handover database (see `polycorn linkdb`), the same one the proxy uses: the uplink
# scheduler's HPR stage stops sending on a path before a predicted handover failure. Needs
# context.source; the paths' order must match `carriers`.
"#,
    linkdb_example_keys!(),
    r#"
[limits]
flow_window_bytes = 4194304     # per-flow receive window / send buffer
user_window_bytes = 16777216    # per-passenger cap (>= flow_window_bytes)
max_flows = 65536
# Most bytes the session holds in its flows' buffers (each open flow sets 320 KiB aside, so
# this also caps the flows open at once: 6553 with 2 GiB).
session_buffer_bytes = 2147483648
# Per passenger address: connections open at once, and new connections per second (sustained,
# after a burst). Past them that passenger's new connections are refused, others carry on.
# 0 turns a limit off.
passenger_max_flows = 512
passenger_flow_rate = 50
passenger_flow_burst = 200

[metrics]
# Prometheus endpoint (GET /metrics), no authentication: keep it on loopback. `polycorn
# status relay relay.toml` reads it; remove the line to serve no endpoint. Alerting rules for
# Prometheus: `polycorn config example alerts`.
listen = "127.0.0.1:9100"

[log]
format = "text"                 # text | json
level = "info"                  # or e.g. "info,polycorn_net::subflow=debug"
"#
);

pub(super) const PROXY_EXAMPLE: &str = concat!(
    r#"# polycorn proxy configuration (in the cloud).
# Relative file names are resolved against this file's directory.

[proxy]
# Subflow (TLS) listener; may also be a list: ["0.0.0.0:7700", "[::]:7700"]
listen = "0.0.0.0:7700"
# Optional: the mptcp / single baselines' per-connection tunnels. They have no TLS, so
# tunnel_peers (the relays' source networks) is required with tunnel_listen.
# tunnel_listen = "0.0.0.0:7701"
# tunnel_peers = ["10.100.0.0/16", "10.101.0.0/16"]
# Downlink scheduler, same syntax as the relay's.
scheduler = "polycorn"
# A relay's flows survive this long while it has no subflow (0..=3600 s).
hold_time_s = 30
# On an orderly stop, let the flows open at that moment finish for up to this long before
# closing every session (0..=30 s); relays hold new passenger connections meanwhile for the
# next proxy. 0: at once.
# drain_s = 0
# With no flow of a relay open for idle_probe_after_s (10..=3600), probe its paths every
# idle_probe_s seconds instead of every 0.2 s (0..=60; 0: every 0.2 s always).
# idle_probe_s = 5
# idle_probe_after_s = 120
# The downlink scheduler lets a path hold at most window_gain times the larger of its recent
# rate times its smallest RTT and what it delivered in its last RTT, not the subflow's whole
# congestion window (which keeps the size of its busiest moment through pauses and would take
# a new download in one burst on one path, past what the carrier's queue holds). 1.0..=16.0;
# 0: the kernel's window.
# window_gain = 2
# When a retransmission timeout (a probe lost in a handover's gap) cut the slow-start
# threshold of an idle downlink subflow, ask the relay for a fresh connection on that path,
# so the next download slow-starts instead of growing its window linearly (relays of
# protocol 4 or later; a relay set to idle_refresh "off" declines).
# ask_refresh = true
# Limit on connecting to a server (1..=300 s).
connect_timeout_s = 10
# TCP congestion control of accepted subflows and tunnels, so of the downlink. Default:
# "bbr" where this host can set it (otherwise the system's, with a warning at startup);
# "system" keeps the system's default. With cubic a long-lived subflow keeps the slow-start
# threshold of cells it has left, and downloads took longer in the bench (the manual's
# "Limits and defaults").
# congestion = "bbr"
# Set net.ipv4.tcp_slow_start_after_idle in the proxy's network namespace at startup (affects
# every TCP socket there). false: downlink subflows keep their congestion window across idle
# gaps instead of restarting from 10 segments. Default: leave the system's setting (1).
# slow_start_after_idle = false
# Cap on the downlink subflows' retransmission timeout, ms (TCP_RTO_MAX_MS, 1000..=120000,
# Linux 6.15 or later; see relay.toml). Default: the kernel's (120 s).
# rto_max_ms = 1000
# Relays refused in the TLS handshake, by the name in their certificate (`polycorn tls
# relay --name train-017` issues one per train): a lost or stolen gateway is shut out without
# redistributing every file. `systemctl reload polycorn-proxy` (SIGHUP) applies a change to this
# list while running: a revoked relay's live subflows are cut at once.
# revoked_relays = ["train-017"]
# Live sessions one relay name may hold at once, besides the one replacing them when it
# restarts (1..=64); one certificate per train keeps this at 1.
# max_sessions_per_relay = 1

[tls]
# Renewed files (`polycorn tls proxy` issues a certificate from the same CA) take effect with
# `systemctl reload polycorn-proxy` (SIGHUP), for relays' new subflows, without a restart.
ca = "ca.pem"
cert = "proxy.pem"
key = "proxy.key"

[policy]
# The proxy is not an open proxy. Loopback, private, CGNAT, link-local, ULA, multicast and
# similar ranges are refused unless an allow entry inside the range opens them.
# Empty allow: every public address. A non-empty allow ALSO restricts public space, so to
# open one private resolver and keep the Internet: ["0.0.0.0/0", "::/0", "10.0.2.2/32"]
allow = []
deny = []
# true opens private, CGNAT, link-local and ULA space (never loopback: list it in allow).
# `systemctl reload polycorn-proxy` applies changes here to later connections.
allow_private = false

[context]
# Keep the train context every relay sends (its GPS fixes with each modem's serving cell and
# RSRP), one CSV per relay and day under record/RELAY-NAME/, for `polycorn linkdb import
# --ride-log` (LinkDB learns every train's handovers without copying files off the trains).
# `systemctl reload polycorn-proxy` applies a change here to the live sessions.
# record = "/var/lib/polycorn/context"
# Remove each relay's logs of days older than this many finished days (about 6 MB per train
# and day); longer than the nightly import's interval. Left out, every log is kept:
# keep_days = 30
# How late the relays' modem monitors report a modem's cell, in ms; the nightly import
# (`linkdb import --proxy-config`) moves the recorded cells back by it. Even 1 s unaccounted
# for places failures about 70 m late at 300 km/h, too late for HPR (docs/src/linkdb/fleet.md):
# monitor_lag_ms = 0

[linkdb]
# Optional handover database (see `polycorn linkdb`): the downlink scheduler's HPR stage uses
# its failure predictions, fed with the train context the relay sends.
"#,
    linkdb_example_keys!(),
    r#"# The nightly import (`linkdb import --proxy-config`) deletes the route's rides that began
# more than this many days ago (each adds about 0.4 MB, and time to every predictor build);
# left out, every ride is kept:
# keep_days = 365

[limits]
flow_window_bytes = 4194304
user_window_bytes = 16777216
max_flows = 65536
# Most bytes one relay's session holds in its flows' buffers; bounds what one relay
# credential can make this proxy hold (times max_sessions_per_relay + 1).
session_buffer_bytes = 2147483648

[metrics]
# Prometheus endpoint, no authentication: keep it on loopback or a management network
# (`polycorn status proxy proxy.toml` reads it; remove the line to serve no endpoint).
# Alerting rules for Prometheus: `polycorn config example alerts`.
listen = "127.0.0.1:9100"

[log]
format = "text"
level = "info"
"#
);
