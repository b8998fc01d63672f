//! Relay and proxy sessions joined by simulated subflows (in-order byte pipes with delay):
//! byte-exact delivery in both directions across reordering between paths, subflow loss,
//! reinjection, redundancy and every scheduler preset.

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use polycorn_proto::frame::decode;
use polycorn_proto::session::{
    INITIAL_CREDIT, MAX_UNANNOUNCED_BYTES, MIN_SEND_BUFFER, UNANNOUNCED_WAIT,
};
use polycorn_proto::{
    CloseReason, Destination, Event, FlowTotals, Frame, HelloOutcome, OpenStatus, ProtoError,
    ReadOutcome, ResetReason, Role, Session, SessionConfig, Unopened,
};
use polycorn_sched::path::TcpInfoSample;
use polycorn_sched::predict::NoPrediction;
use polycorn_sched::time::{Bandwidth, Duration, Instant};
use proptest::prelude::*;

/// One direction of one subflow: bytes become visible `delay` ms after they were written.
#[derive(Default)]
struct Pipe {
    inflight: VecDeque<(u64, Vec<u8>)>,
    rx: Vec<u8>,
}

struct Net {
    relay: Session,
    proxy: Session,
    /// [path] -> (relay→proxy, proxy→relay)
    pipes: Vec<(Pipe, Pipe)>,
    delay_ms: Vec<u64>,
    up: Vec<bool>,
    now_ms: u64,
    relay_events: Vec<Event>,
    proxy_events: Vec<Event>,
    /// The relay's application stops reading (its receive window fills up).
    relay_reads_paused: bool,
    /// Congestion window every subflow reports (64 KiB unless a test sets it).
    cwnd_bytes: u64,
    /// The relay's OpenFlow frames are dropped before they reach a subflow (as if every path
    /// that carried them were slow), so its data reaches the proxy first.
    hold_opens: bool,
}

fn t(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

/// A proxy session of incarnation `epoch` (the shell picks it at random).
fn proxy_session(spec: &str, epoch: u64) -> Session {
    let mut cfg = SessionConfig::new(Role::Proxy, 7, spec);
    cfg.epoch = epoch;
    Session::new(cfg).unwrap()
}

/// A new subflow's Hellos, both ways, as the shells exchange and check them (the relay
/// connects again when the proxy's answer renews its epoch). Returns how many connections it
/// took.
fn hello_exchange(relay: &mut Session, proxy: &mut Session, now: Instant, path: u8) -> usize {
    for tries in 1..=3 {
        let to_proxy = Session::check_hello(Role::Proxy, &relay.hello(path)).unwrap();
        let to_relay = Session::check_hello(Role::Relay, &proxy.hello(path)).unwrap();
        assert_eq!((to_proxy.path, to_relay.path), (path, path));
        let answer = proxy.on_peer_hello(now, proxy.epoch(), to_proxy.epoch);
        assert!(
            matches!(answer, HelloOutcome::Attach | HelloOutcome::PeerRestarted),
            "{answer:?}"
        );
        match relay.on_peer_hello(now, to_proxy.epoch, to_relay.epoch) {
            HelloOutcome::Attach | HelloOutcome::PeerRestarted => return tries,
            HelloOutcome::Renewed => continue,
            HelloOutcome::Stale => panic!("the relay's Hello was built just now"),
            HelloOutcome::Elsewhere => panic!("another path still works with another proxy"),
        }
    }
    panic!("no subflow after three connections")
}

fn info(unacked: u64, cwnd_bytes: u64) -> TcpInfoSample {
    TcpInfoSample {
        srtt: Duration::from_millis(20),
        rttvar: Duration::from_millis(5),
        min_rtt: None,
        cwnd_bytes,
        mss_bytes: 1448,
        unacked_bytes: unacked,
        notsent_bytes: 0,
        delivery_rate: Bandwidth::from_mbit_per_sec(20),
        rto_backoff: 0,
        bytes_acked: 0,
        unacked_age: Duration::ZERO,
    }
}

impl Net {
    fn new(spec: &str, paths: usize, delays: &[u64]) -> Net {
        Net::with_config(spec, paths, delays, |_| {})
    }

    /// As [`Net::new`], with both ends' configuration changed by `tune`.
    fn with_config(
        spec: &str,
        paths: usize,
        delays: &[u64],
        tune: impl Fn(&mut SessionConfig),
    ) -> Net {
        let mut rc = SessionConfig::new(Role::Relay, 7, spec);
        tune(&mut rc);
        let mut relay = Session::new(rc).unwrap();
        let mut pc = SessionConfig::new(Role::Proxy, 7, spec);
        pc.epoch = 1;
        tune(&mut pc);
        let mut proxy = Session::new(pc).unwrap();
        for p in 0..paths as u8 {
            hello_exchange(&mut relay, &mut proxy, t(0), p);
            relay.attach_path(t(0), p).unwrap();
            proxy.attach_path(t(0), p).unwrap();
        }
        Net {
            relay,
            proxy,
            pipes: (0..paths)
                .map(|_| (Pipe::default(), Pipe::default()))
                .collect(),
            delay_ms: delays.to_vec(),
            up: vec![true; paths],
            now_ms: 0,
            relay_events: Vec::new(),
            proxy_events: Vec::new(),
            relay_reads_paused: false,
            cwnd_bytes: 64 * 1024,
            hold_opens: false,
        }
    }

    /// Kill path `p`'s subflow: bytes in flight are lost; both ends detach.
    fn kill(&mut self, p: usize) {
        self.up[p] = false;
        self.pipes[p] = (Pipe::default(), Pipe::default());
        let now = t(self.now_ms);
        self.relay.detach_path(now, p as u8).unwrap();
        self.proxy.detach_path(now, p as u8).unwrap();
    }

    fn kill_all(&mut self) {
        (0..self.up.len()).for_each(|p| self.kill(p));
    }

    fn revive_all(&mut self) {
        (0..self.up.len()).for_each(|p| self.revive(p));
    }

    fn revive(&mut self, p: usize) {
        self.up[p] = true;
        let now = t(self.now_ms);
        hello_exchange(&mut self.relay, &mut self.proxy, now, p as u8);
        self.relay.attach_path(now, p as u8).unwrap();
        self.proxy.attach_path(now, p as u8).unwrap();
    }

    fn step(&mut self) {
        self.now_ms += 1;
        let now = t(self.now_ms);
        let mut buf = Vec::new();
        self.relay.poll_transmit(now, &NoPrediction);
        self.proxy.poll_transmit(now, &NoPrediction);
        for p in 0..self.pipes.len() {
            if !self.up[p] {
                continue;
            }
            let d = self.delay_ms[p];
            let unacked_r: u64 = self.pipes[p]
                .0
                .inflight
                .iter()
                .map(|x| x.1.len() as u64)
                .sum();
            let unacked_p: u64 = self.pipes[p]
                .1
                .inflight
                .iter()
                .map(|x| x.1.len() as u64)
                .sum();
            self.relay
                .on_tcp_info(now, p as u8, &info(unacked_r, self.cwnd_bytes))
                .unwrap();
            self.proxy
                .on_tcp_info(now, p as u8, &info(unacked_p, self.cwnd_bytes))
                .unwrap();
            self.relay.poll_transmit(now, &NoPrediction);
            self.proxy.poll_transmit(now, &NoPrediction);
            self.relay.take_output(p as u8, &mut buf);
            if self.hold_opens {
                buf = without_opens(&buf);
            }
            if !buf.is_empty() {
                self.pipes[p]
                    .0
                    .inflight
                    .push_back((self.now_ms + d, buf.clone()));
            }
            self.proxy.take_output(p as u8, &mut buf);
            if !buf.is_empty() {
                self.pipes[p]
                    .1
                    .inflight
                    .push_back((self.now_ms + d, buf.clone()));
            }
            // Deliver what is due, in order.
            for dir in 0..2 {
                let pipe = if dir == 0 {
                    &mut self.pipes[p].0
                } else {
                    &mut self.pipes[p].1
                };
                while pipe.inflight.front().is_some_and(|x| x.0 <= self.now_ms) {
                    let (_, b) = pipe.inflight.pop_front().unwrap();
                    pipe.rx.extend_from_slice(&b);
                }
                let mut used = 0;
                let rx = std::mem::take(&mut pipe.rx);
                while let Some((frame, n)) = decode(&rx[used..]).unwrap() {
                    let s = if dir == 0 {
                        &mut self.proxy
                    } else {
                        &mut self.relay
                    };
                    s.on_frame(now, p as u8, frame).unwrap();
                    used += n;
                }
                let pipe = if dir == 0 {
                    &mut self.pipes[p].0
                } else {
                    &mut self.pipes[p].1
                };
                pipe.rx = rx[used..].to_vec();
            }
        }
        while let Some(e) = self.relay.poll_event() {
            self.relay_events.push(e);
        }
        while let Some(e) = self.proxy.poll_event() {
            self.proxy_events.push(e);
        }
        for s in [&self.relay, &self.proxy] {
            assert!(
                s.buffered_bytes() <= s.config().session_buffer,
                "{:?} holds {} bytes, more than its buffer of {}",
                s.config().role,
                s.buffered_bytes(),
                s.config().session_buffer
            );
        }
    }
}

/// `bytes` (whole frames) without its OpenFlow frames.
fn without_opens(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut used = 0;
    while let Some((frame, n)) = decode(&bytes[used..]).unwrap() {
        if !matches!(frame, Frame::OpenFlow { .. }) {
            frame.encode(&mut out);
        }
        used += n;
    }
    assert_eq!(used, bytes.len(), "whole frames");
    out
}

/// Something done to the network at a given millisecond.
type Action<'a> = (u64, &'a dyn Fn(&mut Net));

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A request/response exchange: `up` bytes relay→proxy, `down` bytes proxy→relay, both with
/// FIN; `events` runs at given steps. Returns what each side received.
fn exchange(
    spec: &str,
    delays: &[u64],
    up: usize,
    down: usize,
    actions: &[Action<'_>],
) -> (Vec<u8>, Vec<u8>, Net) {
    let mut net = Net::new(spec, delays.len(), delays);
    let user = IpAddr::V4(Ipv4Addr::new(10, 0, 1, 2));
    let dst = Destination::Addr(SocketAddr::from(([198, 51, 100, 7], 80)));
    let flow = net.relay.open_flow(t(0), user, dst.clone()).unwrap();
    let up_data = pattern(1, up);
    let down_data = pattern(2, down);
    let (mut up_sent, mut down_sent) = (0, 0);
    let (mut got_up, mut got_down) = (Vec::new(), Vec::new());
    let mut proxy_flow = None;
    let mut buf = vec![0u8; 16 * 1024];
    let (mut closed_r, mut closed_p) = (false, false);
    for _ in 0..200_000 {
        for (at, act) in actions {
            if *at == net.now_ms {
                act(&mut net);
            }
        }
        let now = t(net.now_ms);
        // Relay writes its request.
        if up_sent < up_data.len() {
            let n = net.relay.send(now, flow, &up_data[up_sent..]).unwrap();
            up_sent += n;
            if up_sent == up_data.len() {
                net.relay.send_fin(now, flow).unwrap();
            }
        } else if up == 0 && up_sent == 0 {
            net.relay.send_fin(now, flow).unwrap();
            up_sent = usize::MAX / 2;
        }
        if let Some(pf) = proxy_flow {
            if down_sent < down_data.len() {
                let n = net.proxy.send(now, pf, &down_data[down_sent..]).unwrap();
                down_sent += n;
                if down_sent == down_data.len() {
                    net.proxy.send_fin(now, pf).unwrap();
                }
            } else if down == 0 && down_sent == 0 {
                net.proxy.send_fin(now, pf).unwrap();
                down_sent = usize::MAX / 2;
            }
            while let ReadOutcome::Data(n) = net.proxy.read(now, pf, &mut buf) {
                got_up.extend_from_slice(&buf[..n]);
            }
        }
        while !net.relay_reads_paused {
            let ReadOutcome::Data(n) = net.relay.read(now, flow, &mut buf) else {
                break;
            };
            got_down.extend_from_slice(&buf[..n]);
        }
        net.step();
        for e in net.proxy_events.drain(..) {
            match e {
                Event::FlowRequested {
                    flow: f,
                    user: u,
                    dst: d,
                } => {
                    assert_eq!((u, &d), (user, &dst));
                    net.proxy.accept_flow(t(net.now_ms), f).unwrap();
                    proxy_flow = Some(f);
                }
                Event::FlowClosed(_) => closed_p = true,
                Event::FlowReset { .. } | Event::SessionLost => panic!("proxy: unexpected {e:?}"),
                _ => {}
            }
        }
        for e in net.relay_events.drain(..) {
            match e {
                Event::FlowOpened { status, .. } => assert_eq!(status, OpenStatus::Ok),
                Event::FlowClosed(_) => closed_r = true,
                Event::FlowReset { .. } | Event::SessionLost => panic!("relay: unexpected {e:?}"),
                _ => {}
            }
        }
        if closed_r && closed_p {
            break;
        }
    }
    assert!(
        closed_r && closed_p,
        "flow did not close (relay {closed_r}, proxy {closed_p}) by {} ms",
        net.now_ms
    );
    assert_eq!(got_up.len(), up, "uplink length");
    assert!(got_up == up_data, "uplink bytes differ");
    assert_eq!(got_down.len(), down, "downlink length");
    assert!(got_down == down_data, "downlink bytes differ");
    (got_up, got_down, net)
}

#[test]
fn byte_exact_over_two_paths_with_every_preset() {
    for (name, _) in polycorn_sched::PRESETS {
        exchange(name, &[10, 35], 50_000, 3_000_000, &[]);
    }
}

#[test]
fn empty_flows_close() {
    let (_, _, net) = exchange("hrsch", &[10, 35], 0, 0, &[]);
    // One flow opened at each end, closed by FINs: none reset.
    let once = FlowTotals {
        opened: 1,
        reset: 0,
    };
    assert_eq!(net.relay.flow_totals(), once);
    assert_eq!(net.proxy.flow_totals(), once);
}

#[test]
fn survives_a_dead_subflow_and_reattaches() {
    let kill: &dyn Fn(&mut Net) = &|n| n.kill(0);
    let revive: &dyn Fn(&mut Net) = &|n| n.revive(0);
    let (_, _, net) = exchange(
        "minrtt",
        &[10, 35],
        200_000,
        2_000_000,
        &[(40, kill), (900, revive)],
    );
    let c = net.relay.path_counters(0).unwrap();
    assert_eq!(c.attaches, 2);
}

#[test]
fn survives_all_paths_dead_within_hold_time() {
    let kill: &dyn Fn(&mut Net) = &|n| n.kill_all();
    let revive: &dyn Fn(&mut Net) = &|n| n.revive_all();
    exchange(
        "hrsch",
        &[10, 35],
        300_000,
        1_000_000,
        &[(50, kill), (20_050, revive)],
    );
}

/// Regression (CI, all paths blackholed for 20 s): the credit the receiver grants after it
/// drains a full window is lost with the dead subflows. The sender, with nothing unacknowledged
/// and no credit left, must not wait forever: the credit is granted again when paths come back.
#[test]
fn credit_lost_with_dead_subflows_is_granted_again() {
    let pause: &dyn Fn(&mut Net) = &|n| n.relay_reads_paused = true;
    let resume: &dyn Fn(&mut Net) = &|n| n.relay_reads_paused = false;
    let kill: &dyn Fn(&mut Net) = &|n| n.kill_all();
    let revive: &dyn Fn(&mut Net) = &|n| n.revive_all();
    // The reader stalls at once, so the sender uses up its 4 MiB window; at 3000 ms the
    // reader drains everything and credit goes out, and one millisecond later every subflow
    // dies with it in flight.
    exchange(
        "hrsch",
        &[10, 35],
        1_000,
        12 << 20,
        &[(0, pause), (3_000, resume), (3_001, kill), (5_000, revive)],
    );
}

/// The same loss, but the paths never die: the credit frame alone vanishes (a subflow that is
/// replaced while it still held unsent bytes). The sender's probe recovers it.
#[test]
fn credit_lost_on_a_live_path_is_recovered_by_probes() {
    let pause: &dyn Fn(&mut Net) = &|n| n.relay_reads_paused = true;
    let resume: &dyn Fn(&mut Net) = &|n| n.relay_reads_paused = false;
    let drop_inflight: &dyn Fn(&mut Net) = &|n| {
        for p in n.pipes.iter_mut() {
            p.0 = Pipe::default();
        }
    };
    exchange(
        "minrtt",
        &[10, 35],
        1_000,
        12 << 20,
        &[(0, pause), (3_000, resume), (3_001, drop_inflight)],
    );
}

#[test]
fn hold_time_exceeded_resets_flows() {
    let mut net = Net::new("minrtt", 1, &[10]);
    let user = IpAddr::V4(Ipv4Addr::new(10, 0, 1, 2));
    let flow = net
        .relay
        .open_flow(t(0), user, Destination::Name("example.org".into(), 443))
        .unwrap();
    net.relay.send(t(0), flow, b"hello").unwrap();
    for _ in 0..50 {
        net.step();
    }
    net.kill(0);
    for _ in 0..31_000 {
        net.step();
    }
    assert!(net
        .relay_events
        .iter()
        .any(|e| matches!(e, Event::FlowReset { flow: f, .. } if *f == flow)));
    assert!(net.relay_events.contains(&Event::SessionLost));
    assert_eq!(net.relay.open_flows(), 0);
    assert_eq!(
        net.relay.flow_totals(),
        FlowTotals {
            opened: 1,
            reset: 1
        }
    );
}

/// A relay that crashed (or lost power) and started again opens a new session; the proxy ends
/// the old one at once if none of its paths is usable — subflows gone, or silent for the stall
/// time — (`end_if_all_paths_down`), instead of holding its flows for the hold time. One with a
/// path still working is left alone.
#[test]
fn a_session_with_every_path_down_can_be_ended_before_its_hold_time() {
    let mut net = Net::new("minrtt", 2, &[10, 10]);
    open_ping(&mut net);
    let mut proxy_flow = None;
    for _ in 0..50 {
        net.step();
        for e in std::mem::take(&mut net.proxy_events) {
            if let Event::FlowRequested { flow: f, .. } = e {
                net.proxy.accept_flow(t(net.now_ms), f).unwrap();
                proxy_flow = Some(f);
            }
        }
    }
    let pf = proxy_flow.expect("the proxy saw the flow");
    assert_eq!(net.proxy.open_flows(), 1);
    net.kill(0);
    assert!(
        !net.proxy.end_if_all_paths_down(t(net.now_ms)),
        "path 1 still works"
    );
    net.step();
    assert!(net.proxy_events.is_empty(), "{:?}", net.proxy_events);
    // Path 1 falls silent (a gateway without power), still attached: after the stall time
    // (1.5 s) it no longer counts.
    net.up[1] = false;
    for _ in 0..500 {
        net.step();
    }
    assert!(
        !net.proxy.end_if_all_paths_down(t(net.now_ms)),
        "path 1 silent for 0.5 s only"
    );
    for _ in 0..1_500 {
        net.step();
    }
    assert!(net.proxy_events.is_empty(), "{:?}", net.proxy_events);
    assert!(net.proxy.end_if_all_paths_down(t(net.now_ms)));
    assert_eq!(net.proxy.open_flows(), 0);
    let events = std::mem::take(&mut net.proxy_events);
    let mut more = Vec::new();
    while let Some(e) = net.proxy.poll_event() {
        more.push(e);
    }
    let all: Vec<_> = events.into_iter().chain(more).collect();
    assert!(
        all.iter()
            .any(|e| matches!(e, Event::FlowReset { flow: f, reason: ResetReason::SessionLost } if *f == pf)),
        "{all:?}"
    );
    assert_eq!(all.last(), Some(&Event::SessionLost), "{all:?}");
}

/// On the proxy a session whose paths have all been down longer than the hold time is over even
/// when no flow was open (the relay restarted, or left with every passenger's connection
/// closed): the proxy must learn it to free the session. The relay keeps quiet without flows.
#[test]
fn an_idle_session_is_lost_on_the_proxy_only() {
    let mut net = Net::new("minrtt", 1, &[10]);
    for _ in 0..50 {
        net.step();
    }
    net.kill(0);
    for _ in 0..29_000 {
        net.step();
    }
    assert!(
        !net.proxy_events.contains(&Event::SessionLost),
        "lost before the hold time"
    );
    for _ in 0..2_000 {
        net.step();
    }
    assert_eq!(
        net.proxy_events
            .iter()
            .filter(|e| **e == Event::SessionLost)
            .count(),
        1,
        "the proxy reports the idle session lost once"
    );
    assert!(
        !net.relay_events.contains(&Event::SessionLost),
        "a relay without flows has nothing to report"
    );
}

/// One passenger exchange on an established `net`: the relay opens a flow and sends "ping", the
/// proxy answers "pong"; both FIN. Panics on a reset; returns whether the relay saw the flow
/// close cleanly within `steps` ms.
fn ping_pong(net: &mut Net, steps: u64) -> bool {
    net.relay_events.clear();
    net.proxy_events.clear();
    let flow = open_ping(net);
    carry_ping(net, flow, steps)
}

/// The relay opens a flow to `PING_DST` and sends "ping" and its FIN.
fn open_ping(net: &mut Net) -> u64 {
    let user = IpAddr::V4(Ipv4Addr::new(10, 0, 1, 2));
    let now = t(net.now_ms);
    let flow = net.relay.open_flow(now, user, ping_dst()).unwrap();
    net.relay.send(now, flow, b"ping").unwrap();
    net.relay.send_fin(now, flow).unwrap();
    flow
}

fn ping_dst() -> Destination {
    Destination::Addr(SocketAddr::from(([198, 51, 100, 7], 80)))
}

/// Runs `flow` (opened by [`open_ping`]) to its end: the proxy accepts it and answers "pong";
/// whether both ends saw exactly that and the flow closed within `steps`.
fn carry_ping(net: &mut Net, flow: u64, steps: u64) -> bool {
    let dst = ping_dst();
    let (mut up, mut down) = (Vec::new(), Vec::new());
    let mut pf = None;
    let mut buf = [0u8; 64];
    for _ in 0..steps {
        net.step();
        let now = t(net.now_ms);
        for e in std::mem::take(&mut net.proxy_events) {
            match e {
                Event::FlowRequested {
                    flow: f, dst: d, ..
                } => {
                    assert_eq!(d, dst);
                    net.proxy.accept_flow(now, f).unwrap();
                    net.proxy.send(now, f, b"pong").unwrap();
                    net.proxy.send_fin(now, f).unwrap();
                    pf = Some(f);
                }
                Event::FlowReset { .. } | Event::SessionLost => panic!("proxy: {e:?}"),
                _ => {}
            }
        }
        if let Some(f) = pf {
            while let ReadOutcome::Data(n) = net.proxy.read(now, f, &mut buf) {
                up.extend_from_slice(&buf[..n]);
            }
        }
        while let ReadOutcome::Data(n) = net.relay.read(now, flow, &mut buf) {
            down.extend_from_slice(&buf[..n]);
        }
        for e in &net.relay_events {
            if let Event::FlowReset { .. } | Event::SessionLost = e {
                panic!("relay: {e:?}");
            }
        }
        if net.relay_events.contains(&Event::FlowClosed(flow)) {
            assert_eq!(up, b"ping");
            assert_eq!(down, b"pong");
            return true;
        }
    }
    false
}

/// After the proxy dropped a lost session, the relay's next subflows meet a fresh proxy session
/// under the same id: new flows must work across it.
#[test]
fn a_relay_carries_on_with_a_fresh_proxy_session_after_the_old_one_was_lost() {
    let mut net = Net::new("hrsch", 2, &[10, 30]);
    for _ in 0..3 {
        assert!(ping_pong(&mut net, 2_000), "before the outage");
    }
    let user = IpAddr::V4(Ipv4Addr::new(10, 0, 1, 2));
    let dst = Destination::Addr(SocketAddr::from(([198, 51, 100, 7], 80)));
    let old = net.relay.open_flow(t(net.now_ms), user, dst).unwrap();
    net.relay.send(t(net.now_ms), old, b"before").unwrap();
    for _ in 0..100 {
        net.step();
    }
    net.kill_all();
    for _ in 0..31_000 {
        net.step();
    }
    assert!(net.relay_events.contains(&Event::SessionLost));
    assert!(net.proxy_events.contains(&Event::SessionLost));
    // The proxy forgets the session; the relay's subflows come back to a new one.
    net.proxy = proxy_session("hrsch", 2);
    net.revive_all();
    for i in 0..3 {
        assert!(ping_pong(&mut net, 5_000), "flow {i} after the new session");
    }
}

/// A relay that shuts down closes the session: the proxy resets its side of every flow at once
/// (not after the hold time), reports the close once although it came on both paths, and
/// ignores an OpenFlow that arrives after it. The closed relay opens no more flows.
#[test]
fn a_relay_that_closes_the_session_has_the_proxy_reset_its_flows_at_once() {
    let mut net = Net::new("hrsch", 2, &[10, 30]);
    assert!(ping_pong(&mut net, 2_000), "before the close");
    let user = IpAddr::V4(Ipv4Addr::new(10, 0, 1, 2));
    let dst = Destination::Addr(SocketAddr::from(([198, 51, 100, 7], 80)));
    let flow = net
        .relay
        .open_flow(t(net.now_ms), user, dst.clone())
        .unwrap();
    net.relay
        .send(t(net.now_ms), flow, b"half a request")
        .unwrap();
    for _ in 0..100 {
        net.step();
    }
    let requested = net
        .proxy_events
        .iter()
        .find_map(|e| match e {
            Event::FlowRequested { flow: f, .. } => Some(*f),
            _ => None,
        })
        .expect("the proxy saw the flow");
    net.proxy.accept_flow(t(net.now_ms), requested).unwrap();
    assert_eq!(net.proxy.open_flows(), 1);
    net.relay_events.clear();
    net.proxy_events.clear();
    net.relay
        .close(t(net.now_ms), CloseReason::Shutdown, "relay shutting down");
    assert!(net.relay.closed_here());
    // The frame a subflow connecting after the close is to carry: the same Close.
    let frame = net.relay.close_frame().expect("closed").to_vec();
    let (decoded, used) = decode(&frame).unwrap().unwrap();
    assert_eq!(used, frame.len());
    assert!(
        matches!(decoded, Frame::Close { reason: CloseReason::Shutdown, ref message } if message == "relay shutting down"),
        "{decoded:?}"
    );
    assert!(net.proxy.close_frame().is_none());
    assert_eq!(net.relay.open_flows(), 0);
    assert!(matches!(
        net.relay.open_flow(t(net.now_ms), user, dst),
        Err(ProtoError::Closed)
    ));
    // Both paths carry the Close; the slower one arrives 30 ms in.
    for _ in 0..40 {
        net.step();
    }
    assert!(net.relay_events.contains(&Event::FlowReset {
        flow,
        reason: ResetReason::Shutdown
    }));
    let closes: Vec<&Event> = net
        .proxy_events
        .iter()
        .filter(|e| matches!(e, Event::PeerClosed { .. }))
        .collect();
    assert_eq!(
        closes,
        [&Event::PeerClosed {
            reason: CloseReason::Shutdown,
            message: "relay shutting down".into(),
            flows_reset: 1,
        }]
    );
    assert!(net.proxy_events.contains(&Event::FlowReset {
        flow: requested,
        reason: ResetReason::Shutdown
    }));
    assert!(net.proxy.peer_closed());
    assert_eq!(net.proxy.open_flows(), 0);
    assert_eq!(net.proxy.flow_totals().reset, 1);
    // A late OpenFlow (written on another path before the Close) opens nothing.
    let late = polycorn_proto::Frame::OpenFlow {
        cseq: 1_000,
        flow: 999,
        user,
        dst: Destination::Addr(SocketAddr::from(([198, 51, 100, 7], 81))),
    };
    net.proxy.on_frame(t(net.now_ms), 0, late).unwrap();
    assert_eq!(net.proxy.open_flows(), 0);
    assert!(!std::iter::from_fn(|| net.proxy.poll_event())
        .any(|e| matches!(e, Event::FlowRequested { .. })));
}

/// A relay that closes a session with no flow open says so to the proxy: nothing was reset
/// (the proxy logs it that way, not as passengers' connections cut).
#[test]
fn closing_an_idle_session_resets_no_flow() {
    let mut net = Net::new("hrsch", 2, &[10, 30]);
    for _ in 0..100 {
        net.step();
    }
    net.relay
        .close(t(net.now_ms), CloseReason::Shutdown, "relay shutting down");
    for _ in 0..40 {
        net.step();
    }
    assert!(net.proxy_events.contains(&Event::PeerClosed {
        reason: CloseReason::Shutdown,
        message: "relay shutting down".into(),
        flows_reset: 0,
    }));
    assert!(net.proxy.peer_closed());
    assert_eq!(net.proxy.flow_totals().reset, 0);
}

/// A proxy that shuts down closes the session: the relay resets its passengers' flows at once
/// and, when a new proxy answers (a new epoch), carries on with it.
#[test]
fn a_proxy_that_closes_the_session_has_the_relay_reset_and_carry_on_with_the_next() {
    let mut net = Net::new("hrsch", 2, &[10, 30]);
    let user = IpAddr::V4(Ipv4Addr::new(10, 0, 1, 2));
    let dst = Destination::Addr(SocketAddr::from(([198, 51, 100, 7], 80)));
    let flow = net.relay.open_flow(t(net.now_ms), user, dst).unwrap();
    net.relay.send(t(net.now_ms), flow, b"waiting").unwrap();
    for _ in 0..100 {
        net.step();
    }
    net.relay_events.clear();
    net.proxy
        .close(t(net.now_ms), CloseReason::Shutdown, "proxy shutting down");
    for _ in 0..40 {
        net.step();
    }
    assert!(net.relay_events.contains(&Event::FlowReset {
        flow,
        reason: ResetReason::Shutdown
    }));
    assert!(net.relay_events.contains(&Event::PeerClosed {
        reason: CloseReason::Shutdown,
        message: "proxy shutting down".into(),
        flows_reset: 1,
    }));
    assert!(net.relay.peer_closed());
    assert_eq!(net.relay.open_flows(), 0);
    // A passenger connects while no proxy answers; then the proxy comes back (a new process,
    // a new epoch) and the relay's subflows reach it: that flow is carried, not reset.
    net.kill_all();
    net.relay_events.clear();
    net.proxy_events.clear();
    let waiting = open_ping(&mut net);
    for _ in 0..500 {
        net.step();
    }
    net.proxy = proxy_session("hrsch", 2);
    net.revive_all();
    assert!(!net.relay.peer_closed(), "a new epoch is a new peer");
    assert!(
        carry_ping(&mut net, waiting, 5_000),
        "the flow opened between the proxies"
    );
    for i in 0..3 {
        assert!(ping_pong(&mut net, 5_000), "flow {i} with the new proxy");
    }
}

/// A proxy that drains before it stops announces it (a session-wide path status): the relay
/// reports it once although it came on both paths, flows already open carry on to their end,
/// and the announcement holds until the proxy's Close, after which flows go to the next proxy.
/// Only a proxy can announce a drain; a relay's session-wide status is ignored.
#[test]
fn a_draining_proxy_tells_the_relay_until_it_closes() {
    let mut net = Net::new("hrsch", 2, &[10, 30]);
    let open = open_ping(&mut net);
    for _ in 0..5 {
        net.step();
    }
    assert!(!net.relay.peer_draining());
    net.proxy.announce_draining(t(net.now_ms)).unwrap();
    assert!(matches!(
        net.relay.announce_draining(t(net.now_ms)),
        Err(ProtoError::WrongDirection(_))
    ));
    assert!(
        carry_ping(&mut net, open, 5_000),
        "a flow open at the announcement finishes"
    );
    assert!(net.relay.peer_draining());
    assert_eq!(
        net.relay_events
            .iter()
            .filter(|e| **e == Event::PeerDraining)
            .count(),
        1,
        "{:?}",
        net.relay_events
    );
    // A flow the relay opens anyway (an old relay would) is still carried.
    assert!(ping_pong(&mut net, 5_000), "a flow opened during the drain");
    assert!(net.relay.peer_draining());
    // The relay's own session-wide status means nothing to the proxy.
    net.relay
        .send_path_status(t(net.now_ms), polycorn_proto::SESSION_PATH, false);
    for _ in 0..100 {
        net.step();
    }
    assert!(!net.proxy.peer_draining());
    assert!(!net
        .proxy_events
        .iter()
        .any(|e| matches!(e, Event::PeerPathStatus { .. } | Event::PeerDraining)));
    // The proxy closes: the drain is over, and the next proxy gets the flows.
    net.proxy
        .close(t(net.now_ms), CloseReason::Shutdown, "proxy shutting down");
    for _ in 0..40 {
        net.step();
    }
    assert!(net.relay.peer_closed());
    assert!(!net.relay.peer_draining());
    net.kill_all();
    let waiting = open_ping(&mut net);
    net.proxy = proxy_session("hrsch", 2);
    net.revive_all();
    assert!(!net.relay.peer_draining());
    assert!(
        carry_ping(&mut net, waiting, 5_000),
        "the flow held for the next proxy"
    );
}

/// The proxy restarts (an upgrade) and the relay's subflows reconnect within the hold time:
/// the new proxy knows nothing of the session. Flows the old proxy carried cannot continue and
/// are reset on the relay at once (not left hanging); new flows work.
#[test]
fn a_proxy_restart_resets_the_old_flows_and_new_ones_work() {
    let mut net = Net::new("hrsch", 2, &[10, 30]);
    for _ in 0..3 {
        assert!(ping_pong(&mut net, 2_000), "before the restart");
    }
    let user = IpAddr::V4(Ipv4Addr::new(10, 0, 1, 2));
    let dst = Destination::Addr(SocketAddr::from(([198, 51, 100, 7], 80)));
    let old = net.relay.open_flow(t(net.now_ms), user, dst).unwrap();
    net.relay.send(t(net.now_ms), old, b"in flight").unwrap();
    for _ in 0..100 {
        net.step();
    }
    net.kill_all();
    for _ in 0..1_000 {
        net.step();
    }
    net.proxy = proxy_session("hrsch", 2);
    net.revive_all();
    for _ in 0..100 {
        net.step();
    }
    assert!(
        net.relay_events
            .iter()
            .any(|e| matches!(e, Event::FlowReset { flow, .. } if *flow == old)),
        "the flow the old proxy carried is reset on the relay"
    );
    assert_eq!(net.relay.open_flows(), 0);
    for i in 0..3 {
        assert!(ping_pong(&mut net, 5_000), "flow {i} after the restart");
    }
    // Totals survive the restart: 3 + 1 + 3 flows opened, the one in flight reset.
    assert_eq!(
        net.relay.flow_totals(),
        FlowTotals {
            opened: 7,
            reset: 1
        }
    );
    assert_eq!(net.proxy.flow_totals().opened, 3, "the new proxy's flows");
}

#[test]
fn refused_flow_reaches_the_relay() {
    let mut net = Net::new("hrsch", 2, &[10, 20]);
    let user = IpAddr::V4(Ipv4Addr::new(10, 0, 1, 2));
    let flow = net
        .relay
        .open_flow(
            t(0),
            user,
            Destination::Addr(SocketAddr::from(([10, 9, 9, 9], 22))),
        )
        .unwrap();
    net.relay.send(t(0), flow, b"early data").unwrap();
    for _ in 0..100 {
        net.step();
        for e in std::mem::take(&mut net.proxy_events) {
            if let Event::FlowRequested { flow: f, .. } = e {
                net.proxy
                    .refuse_flow(t(net.now_ms), f, OpenStatus::Denied)
                    .unwrap();
            }
        }
    }
    assert!(net.relay_events.contains(&Event::FlowOpened {
        flow,
        status: OpenStatus::Denied
    }));
    assert_eq!(net.relay.open_flows(), 0);
    assert_eq!(net.proxy.open_flows(), 0);
    // Refused by the destination: opened and reset at both ends.
    let refused = FlowTotals {
        opened: 1,
        reset: 1,
    };
    assert_eq!(net.relay.flow_totals(), refused);
    assert_eq!(net.proxy.flow_totals(), refused);
}

#[test]
fn data_beyond_credit_is_a_protocol_error() {
    let mut proxy = Session::new(SessionConfig::new(Role::Proxy, 1, "minrtt")).unwrap();
    proxy.attach_path(t(0), 0).unwrap();
    let big = vec![0u8; 1000];
    let f = polycorn_proto::Frame::Data {
        flow: 1,
        offset: INITIAL_CREDIT,
        fin: false,
        data: &big,
    };
    let e = proxy.on_frame(t(1), 0, f).unwrap_err();
    assert!(
        matches!(e, polycorn_proto::ProtoError::FlowControl { .. }),
        "{e}"
    );
}

/// A flow exactly as long as the initial credit: its FIN goes with the last byte the credit
/// allows, before any credit update can arrive. The FIN takes no buffer space, so the credit
/// bounds data only (a receiver counting the FIN against the credit would tear the subflow
/// down on about one connection in a thousand under `polycorn net soak`).
#[test]
fn a_flow_exactly_as_long_as_the_credit_closes() {
    // Windows large enough for the whole flow to leave in the first round trip.
    let wide: &dyn Fn(&mut Net) = &|n| n.cwnd_bytes = 4 << 20;
    for spec in ["minrtt", "polycorn"] {
        let credit = INITIAL_CREDIT as usize;
        exchange(spec, &[10, 35], credit, credit, &[(0, wide)]);
    }
    let mut proxy = Session::new(SessionConfig::new(Role::Proxy, 1, "minrtt")).unwrap();
    proxy.attach_path(t(0), 0).unwrap();
    let last = vec![7u8; 1000];
    let at_limit = polycorn_proto::Frame::Data {
        flow: 1,
        offset: INITIAL_CREDIT - 1000,
        fin: true,
        data: &last,
    };
    proxy.on_frame(t(1), 0, at_limit).unwrap();
    // One data byte beyond it is still refused.
    let mut proxy = Session::new(SessionConfig::new(Role::Proxy, 1, "minrtt")).unwrap();
    proxy.attach_path(t(0), 0).unwrap();
    let beyond = polycorn_proto::Frame::Data {
        flow: 1,
        offset: INITIAL_CREDIT - 999,
        fin: true,
        data: &last,
    };
    let e = proxy.on_frame(t(1), 0, beyond).unwrap_err();
    assert!(
        matches!(e, polycorn_proto::ProtoError::FlowControl { end, .. } if end == INITIAL_CREDIT + 1),
        "{e}"
    );
}

#[test]
fn many_flows_many_users_byte_exact() {
    let mut net = Net::new("hrsch", 2, &[8, 30]);
    let mut flows = Vec::new();
    for u in 0..20u8 {
        for k in 0..5u64 {
            let user = IpAddr::V4(Ipv4Addr::new(10, 0, 1, 10 + u));
            let f = net
                .relay
                .open_flow(
                    t(0),
                    user,
                    Destination::Addr(SocketAddr::from(([198, 51, 100, 1], 80))),
                )
                .unwrap();
            let data = pattern(u64::from(u) * 100 + k, 20_000 + (k as usize) * 7_000);
            let n = net.relay.send(t(0), f, &data).unwrap();
            assert_eq!(n, data.len());
            net.relay.send_fin(t(0), f).unwrap();
            flows.push((f, data));
        }
    }
    let mut got: std::collections::HashMap<u64, Vec<u8>> = Default::default();
    let mut eof = std::collections::HashSet::new();
    let mut buf = vec![0u8; 8192];
    let mut relay_eof = std::collections::HashSet::new();
    for _ in 0..20_000 {
        net.step();
        let now = t(net.now_ms);
        for (f, _) in &flows {
            while let ReadOutcome::Data(_) = net.relay.read(now, *f, &mut buf) {}
            if net.relay.read(now, *f, &mut buf) == ReadOutcome::Eof {
                relay_eof.insert(*f);
            }
        }
        for e in std::mem::take(&mut net.proxy_events) {
            if let Event::FlowRequested { flow, .. } = e {
                net.proxy.accept_flow(now, flow).unwrap();
                got.insert(flow, Vec::new());
            }
        }
        let ids: Vec<u64> = got.keys().copied().collect();
        for f in ids {
            loop {
                match net.proxy.read(now, f, &mut buf) {
                    ReadOutcome::Data(n) => got.get_mut(&f).unwrap().extend_from_slice(&buf[..n]),
                    ReadOutcome::Eof => {
                        if eof.insert(f) {
                            net.proxy.send_fin(now, f).unwrap();
                        }
                        break;
                    }
                    ReadOutcome::WouldBlock => break,
                }
            }
        }
        if eof.len() == flows.len() && net.relay.open_flows() == 0 && net.proxy.open_flows() == 0 {
            break;
        }
    }
    for (f, data) in &flows {
        assert!(got[f] == *data, "flow {f} differs");
    }
    assert_eq!(net.relay.open_flows(), 0, "relay flows left");
    assert_eq!(net.proxy.open_flows(), 0, "proxy flows left");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, .. ProptestConfig::default() })]
    #[test]
    fn byte_exact_under_random_paths_and_failures(
        d0 in 1u64..60, d1 in 1u64..200,
        up in prop_oneof![0usize..200_000, Just(INITIAL_CREDIT as usize)],
        down in prop_oneof![0usize..600_000, Just(INITIAL_CREDIT as usize)],
        cwnd in prop_oneof![Just(64u64 << 10), (16u64 << 10)..(8u64 << 20)],
        kill_at in 5u64..400, down_for in 1u64..3000, which in 0usize..2,
        spec in prop::sample::select(vec![
            "hrsch", "minrtt", "redundant", "roundrobin", "blest", "ecf", "stms", "musher",
        ]),
    ) {
        let window = move |n: &mut Net| n.cwnd_bytes = cwnd;
        let kill = move |n: &mut Net| n.kill(which);
        let revive = move |n: &mut Net| n.revive(which);
        exchange(
            spec,
            &[d0, d1],
            up,
            down,
            &[(0, &window), (kill_at, &kill), (kill_at + down_for, &revive)],
        );
    }
}

/// STMS sends the slow path's chunks ahead of the flow's lowest unsent byte, leaving the bytes
/// in between for the fast path; MuSher splits by throughput ratio. Both arrive byte-exact over
/// a fast and a slow path, in both directions.
#[test]
fn stms_and_musher_are_byte_exact_over_unequal_paths() {
    let (_, _, net) = exchange("stms", &[10, 150], 300_000, 2_000_000, &[]);
    let ahead = net.proxy.scheduler().stats().ahead_chunks;
    assert!(ahead > 0, "the download placed no chunk ahead");
    exchange("musher", &[10, 150], 300_000, 2_000_000, &[]);
}

/// Round robin over a 10 ms and a 35 ms path reorders: the receiver times every segment that
/// waited for a gap, and the waits are about the delay difference, never more than a few RTTs.
#[test]
fn reorder_waits_are_measured() {
    let (_, _, mut net) = exchange("roundrobin", &[10, 35], 1_000, 1_000_000, &[]);
    let st = net.relay.reorder_stats();
    assert!(st.segments > 10, "{st:?}");
    let mean_ms = st.wait_sum.as_micros() as f64 / 1e3 / st.segments as f64;
    assert!((1.0..=100.0).contains(&mean_ms), "mean wait {mean_ms} ms");
    assert!(st.wait_max <= Duration::from_millis(200), "{st:?}");
    let mut waits = Vec::new();
    net.relay.take_reorder_waits(&mut waits);
    assert_eq!(waits.len() as u64, st.segments);
    net.relay.take_reorder_waits(&mut waits);
    assert_eq!(waits.len() as u64, st.segments, "taken once");
    // One path only: nothing is ever out of order.
    let (_, _, net) = exchange("minrtt", &[10], 1_000, 1_000_000, &[]);
    assert_eq!(net.relay.reorder_stats().segments, 0);
}

/// The relay came back to a proxy that held the session's earlier state: that proxy ends what
/// it still held of the relay's earlier flows (resets of the lost session only), and flows
/// then work with it.
fn back_at_the_first_proxy(net: &mut Net) {
    for _ in 0..10 {
        net.step();
    }
    assert!(
        net.proxy_events.iter().all(|e| matches!(
            e,
            Event::FlowReset {
                reason: ResetReason::SessionLost,
                ..
            }
        )),
        "{:?}",
        net.proxy_events
    );
    for i in 0..3 {
        assert!(ping_pong(net, 5_000), "flow {i} back with the first proxy");
    }
}

/// A relay subflow opened just before the relay renewed its epoch can reach the proxy after a
/// subflow of the new epoch: the proxy turns it away instead of taking it for a restarted
/// relay (which would reset the flows just opened and start its side's numbering again under
/// the relay's feet).
#[test]
fn a_relay_hello_from_before_its_renewal_is_turned_away_by_the_proxy() {
    let mut net = Net::new("hrsch", 2, &[10, 30]);
    assert!(ping_pong(&mut net, 2_000));
    let old = net.relay.epoch();
    net.kill_all();
    net.relay.renew_epoch(t(net.now_ms));
    net.revive_all();
    // The proxy ends what it still held of the relay's earlier flows.
    for _ in 0..10 {
        net.step();
    }
    net.proxy_events.clear();
    assert!(ping_pong(&mut net, 5_000), "after the renewal");
    let open = open_ping(&mut net);
    for _ in 0..5 {
        net.step();
    }
    net.proxy_events.clear();
    let now = t(net.now_ms);
    let proxy_epoch = net.proxy.epoch();
    assert_eq!(
        net.proxy.on_peer_hello(now, proxy_epoch, old),
        HelloOutcome::Stale
    );
    assert!(
        std::iter::from_fn(|| net.proxy.poll_event())
            .all(|e| !matches!(e, Event::FlowReset { .. })),
        "nothing reset"
    );
    assert!(carry_ping(&mut net, open, 5_000), "the open flow goes on");
    assert!(ping_pong(&mut net, 5_000));
    // A relay epoch that is not behind is a relay that started afresh.
    assert_eq!(
        net.proxy
            .on_peer_hello(t(net.now_ms), proxy_epoch, old.wrapping_add(7)),
        HelloOutcome::PeerRestarted
    );
}

/// One path reaches another proxy (the name moved, or its IPv4 and IPv6 addresses lead to
/// different hosts) while the other still works with the session's proxy: nothing is reset and
/// the session stays; once no path works with the session's proxy, the relay starts afresh
/// with the other one.
#[test]
fn a_path_that_reaches_another_proxy_waits_while_the_sessions_proxy_works() {
    let mut net = Net::new("hrsch", 2, &[10, 30]);
    assert!(ping_pong(&mut net, 2_000));
    let epoch = net.relay.epoch();
    net.kill(0);
    let open = open_ping(&mut net);
    let other = Session::check_hello(Role::Relay, &proxy_session("hrsch", 2).hello(0)).unwrap();
    let now = t(net.now_ms);
    assert_eq!(
        net.relay.hello_outcome(epoch, other.epoch),
        HelloOutcome::Elsewhere
    );
    assert_eq!(
        net.relay.on_peer_hello(now, epoch, other.epoch),
        HelloOutcome::Elsewhere
    );
    assert_eq!(net.relay.epoch(), epoch);
    let events: Vec<Event> = std::iter::from_fn(|| net.relay.poll_event()).collect();
    assert!(
        !events.iter().any(|e| matches!(e, Event::FlowReset { .. })),
        "{events:?}"
    );
    // The flow opened meanwhile is carried by the session's proxy over path 1.
    assert!(carry_ping(&mut net, open, 5_000));
    net.revive(0);
    assert!(ping_pong(&mut net, 5_000));
    // A stalled path does not hold the session either.
    net.kill(0);
    net.up[1] = false;
    for _ in 0..20_000 {
        net.step();
        if !net.relay.path_usable(1) {
            break;
        }
    }
    assert!(!net.relay.path_usable(1), "path 1 should stall");
    assert_eq!(
        net.relay.on_peer_hello(t(net.now_ms), epoch, other.epoch),
        HelloOutcome::Renewed
    );
    assert_ne!(net.relay.epoch(), epoch);
}

/// The proxy host name moves to another proxy and back (DNS, no failover): the relay learns it
/// from the other proxy's epoch, renews its own and connects again; back at the first proxy,
/// which still holds the session's earlier state, the same happens, and the first proxy, seeing
/// a new relay epoch, starts afresh instead of taking the relay's control frames for repeats.
#[test]
fn a_relay_whose_proxy_name_moves_away_and_back_starts_afresh_with_each() {
    let mut net = Net::new("hrsch", 2, &[10, 30]);
    for _ in 0..3 {
        assert!(ping_pong(&mut net, 2_000), "with the first proxy");
    }
    let first_epoch = net.relay.epoch();
    net.kill_all();
    let open = open_ping(&mut net);
    let first = std::mem::replace(&mut net.proxy, proxy_session("hrsch", 2));
    let now = t(net.now_ms);
    // Path 0 meets the other proxy first.
    let old_hello = Session::check_hello(Role::Proxy, &net.relay.hello(1)).unwrap();
    assert_eq!(hello_exchange(&mut net.relay, &mut net.proxy, now, 0), 2);
    assert_ne!(net.relay.epoch(), first_epoch);
    let events: Vec<Event> = std::iter::from_fn(|| net.relay.poll_event()).collect();
    assert!(
        events.contains(&Event::FlowReset {
            flow: open,
            reason: ResetReason::SessionLost
        }),
        "{events:?}"
    );
    // Path 1's connection sent its Hello before the renewal: turned away.
    assert_eq!(
        net.relay.on_peer_hello(now, old_hello.epoch, 2),
        HelloOutcome::Stale
    );
    net.relay.attach_path(now, 0).unwrap();
    net.proxy.attach_path(now, 0).unwrap();
    net.up[0] = true;
    net.revive(1);
    for _ in 0..3 {
        assert!(ping_pong(&mut net, 5_000), "with the second proxy");
    }
    // And back to the first, which kept its state.
    net.kill_all();
    net.proxy = first;
    let second_epoch = net.relay.epoch();
    net.proxy_events.clear();
    net.revive_all();
    assert_ne!(net.relay.epoch(), second_epoch);
    back_at_the_first_proxy(&mut net);
    // The same proxy answering again (a subflow replaced) changes nothing.
    let epoch = net.relay.epoch();
    net.kill(0);
    net.revive(0);
    assert_eq!(net.relay.epoch(), epoch);
    assert!(ping_pong(&mut net, 5_000), "after a subflow was replaced");
}

/// A relay fails over to another proxy and later back to the first, which still holds the
/// session's earlier state (its hold time has not run out). The relay renews its epoch at each
/// move, so the first proxy recognises a restarted peer and starts afresh with it, and flows
/// work with each proxy in turn.
#[test]
fn a_relay_that_moves_to_another_proxy_and_back_starts_afresh_with_each() {
    let mut net = Net::new("hrsch", 2, &[10, 30]);
    for _ in 0..3 {
        assert!(ping_pong(&mut net, 2_000), "with the first proxy");
    }
    let first_epoch = net.relay.hello(0);
    // Every path lost; the relay moves to the second proxy.
    net.kill_all();
    let open = open_ping(&mut net);
    let first = std::mem::replace(&mut net.proxy, proxy_session("hrsch", 2));
    net.relay_events.clear();
    let epoch = net.relay.renew_epoch(t(net.now_ms));
    assert!(net.relay_events.is_empty());
    let events: Vec<Event> = std::iter::from_fn(|| net.relay.poll_event()).collect();
    assert!(
        events.contains(&Event::FlowReset {
            flow: open,
            reason: ResetReason::SessionLost
        }),
        "{events:?}"
    );
    assert_ne!(net.relay.hello(0), first_epoch);
    assert!(matches!(net.relay.hello(1), Frame::Hello { epoch: e, .. } if e == epoch));
    net.revive_all();
    for _ in 0..3 {
        assert!(ping_pong(&mut net, 5_000), "with the second proxy");
    }
    // And back to the first, which kept its state.
    net.kill_all();
    net.proxy = first;
    net.relay.renew_epoch(t(net.now_ms));
    net.proxy_events.clear();
    net.revive_all();
    back_at_the_first_proxy(&mut net);
}

/// Frames each end received on `path` so far (an idle session's are its probes and answers).
fn rx_frames(net: &Net, path: u8) -> (u64, u64) {
    let n = |s: &Session| s.path_counters(path).unwrap().rx_frames;
    (n(&net.relay), n(&net.proxy))
}

/// Runs `ms` steps and returns whether every path that is up stayed usable at both ends at
/// every step.
fn run_checking_usable(net: &mut Net, ms: u64) -> bool {
    let mut usable = true;
    for _ in 0..ms {
        net.step();
        for p in 0..net.up.len() as u8 {
            if net.up[usize::from(p)] {
                usable &= net.relay.path_usable(p) && net.proxy.path_usable(p);
            }
        }
    }
    usable
}

/// [`Net::new`] with sessions that go idle after 30 s without a flow (default 120 s).
fn idle_after_30s(paths: usize, delays: &[u64]) -> Net {
    Net::with_config("hrsch", paths, delays, |c| {
        c.idle_after = Duration::from_secs(30)
    })
}

/// With no flow open for `idle_after`, both ends probe every path every 5 s instead of every
/// 200 ms: the probes are an idle train's only traffic on its SIMs.
#[test]
fn an_idle_session_probes_its_paths_every_few_seconds() {
    let c = SessionConfig::new(Role::Relay, 1, "hrsch");
    assert_eq!(
        (c.idle_after, c.idle_ping_interval),
        (Duration::from_secs(120), Some(Duration::from_secs(5)))
    );
    let mut net = idle_after_30s(2, &[20, 60]);
    assert!(ping_pong(&mut net, 2_000));
    let busy = Duration::from_millis(200);
    assert_eq!(net.relay.probe_interval(), busy);
    // The first 30 s without a flow: probes as before.
    let before = rx_frames(&net, 1);
    assert!(run_checking_usable(&mut net, 20_000));
    let after = rx_frames(&net, 1);
    // Each end: its own probes' answers and the peer's probes, 10 frames a second.
    for (a, b) in [(before.0, after.0), (before.1, after.1)] {
        assert!((190..=210).contains(&(b - a)), "{} frames in 20 s", b - a);
    }
    assert!(run_checking_usable(&mut net, 11_000));
    let slow = Duration::from_secs(5);
    assert_eq!(
        (net.relay.probe_interval(), net.proxy.probe_interval()),
        (slow, slow)
    );
    // Idle: two frames every 5 s at each end, on both paths; no path looks stalled although
    // nothing arrives for seconds.
    let before = [rx_frames(&net, 0), rx_frames(&net, 1)];
    assert!(run_checking_usable(&mut net, 60_000));
    for (p, b) in before.iter().enumerate() {
        let a = rx_frames(&net, p as u8);
        for n in [a.0 - b.0, a.1 - b.1] {
            assert!((22..=26).contains(&n), "path {p}: {n} frames in 60 s");
        }
    }
}

/// The first flow after an idle spell probes every path at once (the last answers are seconds
/// old) and is carried; a path's silence before that probe does not make it look stalled.
#[test]
fn the_first_flow_after_an_idle_spell_probes_every_path_at_once() {
    // Round trips of 0.8 and 1.2 s: an idle path hears something only every few seconds.
    let mut net = idle_after_30s(2, &[400, 600]);
    assert!(run_checking_usable(&mut net, 45_000));
    let before = rx_frames(&net, 0);
    let flow = open_ping(&mut net);
    assert_eq!(net.relay.probe_interval(), Duration::from_secs(5));
    // The relay's wake probes reach the proxy after one delay, before any idle probe is due.
    for _ in 0..401 {
        net.step();
    }
    assert_eq!(net.relay.probe_interval(), Duration::from_millis(200));
    assert!(rx_frames(&net, 0).1 > before.1, "path 0 probed at once");
    assert!(
        net.relay.path_usable(0) && net.relay.path_usable(1),
        "no path stalled"
    );
    assert!(carry_ping(&mut net, flow, 5_000));
}

/// A path that goes silent during an idle spell (a blackout: nothing arrives, the subflow is
/// not closed) is still noticed, within one idle probe interval and the stall time.
#[test]
fn a_blackout_during_an_idle_spell_is_noticed() {
    let mut net = idle_after_30s(2, &[20, 60]);
    assert!(run_checking_usable(&mut net, 40_000));
    net.up[1] = false;
    let mut noticed = None;
    for ms in 0..8_000 {
        net.step();
        if noticed.is_none() && !net.relay.path_usable(1) && !net.proxy.path_usable(1) {
            noticed = Some(ms);
        }
        assert!(net.relay.path_usable(0) && net.proxy.path_usable(0));
    }
    let ms = noticed.expect("the silent path is noticed");
    assert!(ms <= 5_000 + 1_500 + 60, "noticed after {ms} ms");
    // Back from the blackout, a flow is carried on both paths again.
    net.up[1] = true;
    assert!(ping_pong(&mut net, 5_000));
}

/// Without an idle probe interval, an idle session keeps probing every 200 ms.
#[test]
fn an_idle_probe_interval_of_none_keeps_probing_as_often() {
    let mut net = Net::with_config("hrsch", 1, &[20], |c| c.idle_ping_interval = None);
    assert!(run_checking_usable(&mut net, 40_000));
    let before = rx_frames(&net, 0);
    assert!(run_checking_usable(&mut net, 10_000));
    let after = rx_frames(&net, 0);
    assert!((95..=105).contains(&(after.0 - before.0)));
    assert_eq!(net.relay.probe_interval(), Duration::from_millis(200));
}

/// Every subflow of this harness reports an RTT of 20 ms whatever its delay, so here minRTT's
/// order (by RTT: a tie, path 0 first) and TPR's (by the probes' one-way delays: path 1, 20 ms,
/// before path 0, 60 ms) disagree, as they do on a carrier whose delays differ between the
/// directions. A short answer with its FIN is a tail chunk: TPR turns path 0 away and the answer
/// goes on path 1 at once, one round trip of 40 ms after the request (not 200 ms later, when
/// the next probe would change the estimates).
#[test]
fn a_short_answer_is_not_held_where_rtt_and_one_way_delay_order_paths_differently() {
    for spec in ["hrsch", "polycorn"] {
        let mut net = Net::new(spec, 2, &[60, 20]);
        assert!(ping_pong(&mut net, 2_000));
        for _ in 0..3 {
            let t0 = net.now_ms;
            net.relay_events.clear();
            net.proxy_events.clear();
            let flow = open_ping(&mut net);
            let mut answered = None;
            let mut buf = [0u8; 64];
            for _ in 0..2_000 {
                net.step();
                let now = t(net.now_ms);
                for e in std::mem::take(&mut net.proxy_events) {
                    if let Event::FlowRequested { flow: f, .. } = e {
                        net.proxy.accept_flow(now, f).unwrap();
                        net.proxy.send(now, f, b"pong").unwrap();
                        net.proxy.send_fin(now, f).unwrap();
                    }
                }
                if let ReadOutcome::Data(n) = net.relay.read(now, flow, &mut buf) {
                    assert_eq!(&buf[..n], b"pong");
                    answered = Some(net.now_ms - t0);
                    break;
                }
            }
            let ms = answered.expect("answered");
            assert!(ms <= 45, "{spec}: the answer came after {ms} ms");
            for _ in 0..1_000 {
                net.step();
            }
        }
    }
}

// ----- a relay that breaks the rules, and the session's memory bound ------------------------

/// A proxy session of epoch 1 with path 0 attached at 0 ms; `tune` changes its configuration.
fn lone_proxy(tune: impl Fn(&mut SessionConfig)) -> Session {
    let mut cfg = SessionConfig::new(Role::Proxy, 7, "minrtt");
    cfg.epoch = 1;
    tune(&mut cfg);
    let mut proxy = Session::new(cfg).unwrap();
    proxy.attach_path(t(0), 0).unwrap();
    proxy
}

fn data_frame(flow: u64, offset: u64, data: &[u8]) -> Frame<'_> {
    Frame::Data {
        flow,
        offset,
        fin: false,
        data,
    }
}

fn open_frame(cseq: u64, flow: u64) -> Frame<'static> {
    Frame::OpenFlow {
        cseq,
        flow,
        user: IpAddr::V4(Ipv4Addr::new(10, 0, 1, 2)),
        dst: ping_dst(),
    }
}

/// The relay's probes keep `proxy`'s path 0 usable from `from` to `to` ms (exclusive), every
/// 100 ms, with the timers run; the session must not fail meanwhile.
fn keep_alive(proxy: &mut Session, from: u64, to: u64) {
    for ms in (from..to).step_by(100) {
        let ping = Frame::Ping {
            id: ms as u32,
            sent_us: ms * 1000,
        };
        proxy.on_frame(t(ms), 0, ping).unwrap();
        proxy.poll_transmit(t(ms), &NoPrediction);
        assert_eq!(proxy.failure(), None, "at {ms} ms");
    }
}

/// What `proxy` tells the relay from now on: its Close frame, as a subflow that connects gets it.
fn close_of(proxy: &Session) -> (CloseReason, String) {
    let bytes = proxy.close_frame().expect("the session is closed");
    match decode(bytes).unwrap().unwrap().0 {
        Frame::Close { reason, message } => (reason, message),
        other => panic!("{other:?}"),
    }
}

/// Data for a flow whose OpenFlow never comes: the proxy holds it only for UNANNOUNCED_WAIT,
/// then the session fails as a whole: its flows are reset, the relay is told why, nothing stays
/// buffered, and every later frame is refused with the error (the shell ends each subflow).
#[test]
fn data_for_a_flow_never_opened_fails_the_session_after_the_wait() {
    assert_eq!(UNANNOUNCED_WAIT, Duration::from_secs(10));
    let mut proxy = lone_proxy(|_| {});
    proxy.on_frame(t(0), 0, open_frame(0, 1)).unwrap();
    let bytes = pattern(3, 50_000);
    proxy.on_frame(t(0), 0, data_frame(1, 0, &bytes)).unwrap();
    proxy.on_frame(t(0), 0, data_frame(3, 0, &bytes)).unwrap();
    assert!(matches!(
        proxy.poll_event(),
        Some(Event::FlowRequested { flow: 1, .. })
    ));
    proxy.accept_flow(t(0), 1).unwrap();
    assert_eq!(proxy.buffered_bytes(), 100_000);
    keep_alive(&mut proxy, 100, 10_000);
    assert!(
        proxy.poll_timeout().is_some_and(|at| at <= t(10_000)),
        "the timer wakes for the wait's end: {:?}",
        proxy.poll_timeout()
    );
    proxy.poll_transmit(t(10_000), &NoPrediction);
    let err = ProtoError::UnopenedFlow {
        flow: 3,
        why: Unopened::NotInTime,
    };
    assert_eq!(proxy.failure(), Some(&err));
    assert!(
        err.to_string()
            .starts_with("data for flow 3 that was never opened"),
        "{err}"
    );
    assert!(proxy.closed_here());
    assert_eq!(close_of(&proxy), (CloseReason::Protocol, err.to_string()));
    assert_eq!(proxy.open_flows(), 0);
    assert_eq!(proxy.buffered_bytes(), 0);
    let events: Vec<Event> = std::iter::from_fn(|| proxy.poll_event()).collect();
    assert!(
        events.contains(&Event::FlowReset {
            flow: 1,
            reason: ResetReason::Protocol
        }),
        "{events:?}"
    );
    let ping = Frame::Ping { id: 9, sent_us: 0 };
    assert_eq!(proxy.on_frame(t(10_001), 0, ping), Err(err.clone()));
    assert_eq!(
        proxy.on_frame(t(10_002), 0, open_frame(1, 4)),
        Err(err),
        "a failed session opens nothing"
    );
}

/// While no path is usable the OpenFlow cannot come either: the wait stands still through an
/// outage of every path, and an OpenFlow that comes after it (more than UNANNOUNCED_WAIT after
/// the data, less of it with a usable path) opens the flow with the data intact.
#[test]
fn the_wait_for_an_open_stands_still_while_no_path_is_usable() {
    let mut proxy = lone_proxy(|_| {});
    let bytes = pattern(4, 200_000);
    for (i, chunk) in bytes.chunks(50_000).enumerate() {
        let offset = (i * 50_000) as u64;
        proxy
            .on_frame(t(0), 0, data_frame(1, offset, chunk))
            .unwrap();
    }
    keep_alive(&mut proxy, 100, 4_000);
    proxy.detach_path(t(4_000), 0).unwrap();
    for ms in (4_000..24_000).step_by(100) {
        proxy.poll_transmit(t(ms), &NoPrediction);
    }
    assert_eq!(proxy.failure(), None, "the outage does not count");
    proxy.attach_path(t(24_000), 0).unwrap();
    keep_alive(&mut proxy, 24_000, 29_900);
    proxy.on_frame(t(29_900), 0, open_frame(0, 1)).unwrap();
    let events: Vec<Event> = std::iter::from_fn(|| proxy.poll_event()).collect();
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::FlowRequested { flow: 1, .. })),
        "the late OpenFlow opens the flow: {events:?}"
    );
    proxy.accept_flow(t(29_900), 1).unwrap();
    let mut got = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    while let ReadOutcome::Data(n) = proxy.read(t(29_900), 1, &mut buf) {
        got.extend_from_slice(&buf[..n]);
    }
    assert!(got == bytes, "the data held for it");
    keep_alive(&mut proxy, 30_000, 60_000);
}

/// The relay numbers its flows in the order of their OpenFlows' control sequence numbers. Once
/// every control frame up to the OpenFlow of flow 8 has come, data for flow 5 (neither open
/// nor closed) belongs to a flow that will never be opened: the session fails at once. Data for
/// flow 7, whose OpenFlow (cseq 0) is still on its way behind that of flow 8 (cseq 1), waits.
#[test]
fn data_for_an_id_the_relay_passed_over_fails_the_session_at_once() {
    let mut proxy = lone_proxy(|_| {});
    proxy.on_frame(t(1), 0, open_frame(1, 8)).unwrap();
    proxy.on_frame(t(2), 0, data_frame(7, 0, b"early")).unwrap();
    proxy.on_frame(t(3), 0, open_frame(0, 7)).unwrap();
    let opened: Vec<u64> = std::iter::from_fn(|| proxy.poll_event())
        .filter_map(|e| match e {
            Event::FlowRequested { flow, .. } => Some(flow),
            _ => None,
        })
        .collect();
    assert_eq!(opened, [8, 7]);
    assert_eq!(proxy.failure(), None);
    let err = proxy
        .on_frame(t(4), 0, data_frame(5, 0, b"never opened"))
        .unwrap_err();
    assert_eq!(
        err,
        ProtoError::UnopenedFlow {
            flow: 5,
            why: Unopened::PassedOver { opened_through: 8 }
        }
    );
    assert_eq!(proxy.failure(), Some(&err));
    assert_eq!(close_of(&proxy).0, CloseReason::Protocol);
    assert_eq!(proxy.open_flows(), 0);
    assert_eq!(proxy.buffered_bytes(), 0);
}

/// Flows whose OpenFlow has not come may hold MAX_UNANNOUNCED_BYTES together (32 flows' initial
/// credit); a relay that sends more before opening them fails the session.
#[test]
fn unopened_flows_holding_more_than_their_bound_fail_the_session() {
    assert_eq!(MAX_UNANNOUNCED_BYTES, 32 * INITIAL_CREDIT);
    let mut proxy = lone_proxy(|_| {});
    let chunk = vec![7u8; 64 * 1024];
    let fill = |proxy: &mut Session, flow: u64| {
        for k in 0..INITIAL_CREDIT / 65_536 {
            proxy.on_frame(t(1), 0, data_frame(flow, k * 65_536, &chunk))?;
        }
        Ok::<(), ProtoError>(())
    };
    for flow in 1..=32 {
        fill(&mut proxy, flow).unwrap();
    }
    assert_eq!(proxy.buffered_bytes(), MAX_UNANNOUNCED_BYTES);
    let err = fill(&mut proxy, 33).unwrap_err();
    assert_eq!(
        err,
        ProtoError::UnopenedFlow {
            flow: 33,
            why: Unopened::TooMuchData {
                bytes: MAX_UNANNOUNCED_BYTES + 65_536
            }
        }
    );
    assert_eq!(close_of(&proxy).0, CloseReason::Limit);
    assert_eq!(proxy.buffered_bytes(), 0);
}

/// Data ahead of its OpenFlow (held back here for 3 s, as on a slow path while the data took a
/// fast one) is held with the initial credit only, and once the OpenFlow comes the flow is
/// carried byte-exact in both directions.
#[test]
fn data_before_its_open_within_the_wait_is_carried_byte_exact() {
    let mut net = Net::new("minrtt", 2, &[10, 30]);
    net.hold_opens = true;
    let user = IpAddr::V4(Ipv4Addr::new(10, 0, 1, 2));
    let flow = net.relay.open_flow(t(0), user, ping_dst()).unwrap();
    let up = pattern(5, 1_000_000);
    let down = pattern(6, 300_000);
    let (mut up_sent, mut down_sent) = (0, 0);
    let (mut got_up, mut got_down) = (Vec::new(), Vec::new());
    let mut buf = vec![0u8; 16 * 1024];
    let mut pf = None;
    let mut held_before_open = 0;
    let mut closed = (false, false);
    while !(closed.0 && closed.1) {
        assert!(net.now_ms < 30_000, "not done by {} ms", net.now_ms);
        if net.now_ms == 3_000 {
            net.hold_opens = false;
        }
        let now = t(net.now_ms);
        if up_sent < up.len() {
            up_sent += net.relay.send(now, flow, &up[up_sent..]).unwrap();
            if up_sent == up.len() {
                net.relay.send_fin(now, flow).unwrap();
            }
        }
        if let Some(f) = pf {
            if down_sent < down.len() {
                down_sent += net.proxy.send(now, f, &down[down_sent..]).unwrap();
                if down_sent == down.len() {
                    net.proxy.send_fin(now, f).unwrap();
                }
            }
            while let ReadOutcome::Data(n) = net.proxy.read(now, f, &mut buf) {
                got_up.extend_from_slice(&buf[..n]);
            }
        }
        while let ReadOutcome::Data(n) = net.relay.read(now, flow, &mut buf) {
            got_down.extend_from_slice(&buf[..n]);
        }
        net.step();
        if pf.is_none() {
            held_before_open = held_before_open.max(net.proxy.buffered_bytes());
        }
        for e in std::mem::take(&mut net.proxy_events) {
            match e {
                Event::FlowRequested { flow: f, .. } => {
                    assert!(net.now_ms > 3_000, "opened at {} ms", net.now_ms);
                    net.proxy.accept_flow(t(net.now_ms), f).unwrap();
                    pf = Some(f);
                }
                Event::FlowClosed(_) => closed.1 = true,
                Event::FlowReset { .. } | Event::SessionLost => panic!("proxy: {e:?}"),
                _ => {}
            }
        }
        for e in std::mem::take(&mut net.relay_events) {
            match e {
                Event::FlowClosed(_) => closed.0 = true,
                Event::FlowReset { .. } | Event::SessionLost | Event::PeerClosed { .. } => {
                    panic!("relay: {e:?}")
                }
                _ => {}
            }
        }
    }
    assert_eq!(
        held_before_open, INITIAL_CREDIT,
        "the proxy held the initial credit's worth before the OpenFlow, and no more"
    );
    assert_eq!(net.proxy.failure(), None);
    assert!(
        got_up == up,
        "uplink bytes differ ({} of {})",
        got_up.len(),
        up.len()
    );
    assert!(got_down == down, "downlink bytes differ");
}

/// The frames a lone proxy session sends its relay, as a relay reads them.
fn proxy_output(proxy: &mut Session, now: Instant) -> Vec<Frame<'static>> {
    proxy.poll_transmit(now, &NoPrediction);
    let mut bytes = Vec::new();
    proxy.take_output(0, &mut bytes);
    let mut frames = Vec::new();
    let mut used = 0;
    while let Some((frame, n)) = decode(&bytes[used..]).unwrap() {
        used += n;
        // Only the frames the tests read, owned.
        match frame {
            Frame::Credit { flow, limit } => frames.push(Frame::Credit { flow, limit }),
            Frame::OpenResult { cseq, flow, status } => {
                frames.push(Frame::OpenResult { cseq, flow, status })
            }
            _ => {}
        }
    }
    frames
}

/// A relay that opens flow after flow and sends everything the proxy's credit allows on each,
/// to servers that read nothing and send all they can (acknowledged by nobody): the proxy
/// never holds more than its session buffer. It refuses the flows that would not fit, grants
/// no credit beyond the initial credit once the buffer is spoken for, and lets the servers
/// send only what fits.
#[test]
fn a_relay_filling_many_flows_cannot_push_the_proxy_past_its_buffer() {
    const BUDGET: u64 = 16 << 20;
    let mut proxy = lone_proxy(|c| c.session_buffer = BUDGET);
    let mut credit: std::collections::BTreeMap<u64, u64> = Default::default();
    let mut sent: std::collections::BTreeMap<u64, u64> = Default::default();
    let mut accepted = Vec::new();
    let mut refused = Vec::new();
    let mut most = 0;
    let chunk = vec![0x5au8; 64 * 1024];
    let download = vec![0xa5u8; 64 * 1024];
    let mut next_flow = 1;
    for ms in 1..=400 {
        let now = t(ms);
        // Ten new flows a millisecond for the first ten, each for another passenger.
        if ms <= 10 {
            for _ in 0..10 {
                let flow = next_flow;
                next_flow += 1;
                let open = Frame::OpenFlow {
                    cseq: flow - 1,
                    flow,
                    user: IpAddr::V4(Ipv4Addr::new(10, 1, (flow / 256) as u8, flow as u8)),
                    dst: ping_dst(),
                };
                proxy.on_frame(now, 0, open).unwrap();
                credit.insert(flow, INITIAL_CREDIT);
                sent.insert(flow, 0);
            }
        }
        // Everything the credit allows, on every flow not refused.
        for (&flow, &limit) in &credit {
            let at = sent.get_mut(&flow).unwrap();
            while *at < limit {
                let n = (limit - *at).min(chunk.len() as u64);
                proxy
                    .on_frame(now, 0, data_frame(flow, *at, &chunk[..n as usize]))
                    .unwrap();
                *at += n;
                most = most.max(proxy.buffered_bytes());
                assert!(proxy.buffered_bytes() <= BUDGET);
            }
        }
        while let Some(e) = proxy.poll_event() {
            if let Event::FlowRequested { flow, .. } = e {
                proxy.accept_flow(now, flow).unwrap();
                accepted.push(flow);
            }
        }
        for &flow in &accepted {
            loop {
                let cap = proxy.send_capacity(flow);
                if cap == 0 {
                    break;
                }
                let n = cap.min(download.len());
                assert_eq!(proxy.send(now, flow, &download[..n]).unwrap(), n);
            }
        }
        most = most.max(proxy.buffered_bytes());
        assert!(proxy.buffered_bytes() <= BUDGET);
        let ping = Frame::Ping {
            id: ms as u32,
            sent_us: ms * 1000,
        };
        proxy.on_frame(now, 0, ping).unwrap();
        for frame in proxy_output(&mut proxy, now) {
            match frame {
                Frame::Credit { flow, limit } => {
                    if let Some(c) = credit.get_mut(&flow) {
                        *c = (*c).max(limit);
                    }
                }
                Frame::OpenResult {
                    flow,
                    status: OpenStatus::Ok,
                    ..
                } => assert!(accepted.contains(&flow)),
                Frame::OpenResult { flow, status, .. } => {
                    assert_eq!(status, OpenStatus::Failed);
                    refused.push(flow);
                    credit.remove(&flow);
                }
                _ => {}
            }
        }
    }
    assert_eq!(proxy.failure(), None, "the relay kept to its credit");
    let admitted = (BUDGET / (INITIAL_CREDIT + MIN_SEND_BUFFER)) as usize;
    assert!(
        accepted.len() <= admitted && !refused.is_empty(),
        "{} accepted, {} refused",
        accepted.len(),
        refused.len()
    );
    assert_eq!(accepted.len() + refused.len(), 100);
    assert_eq!(proxy.open_flows(), accepted.len());
    assert!(
        most > BUDGET - BUDGET / 4,
        "the relay and the servers used the buffer: at most {most} of {BUDGET}"
    );
    let granted: u64 = accepted.iter().map(|f| credit[f]).sum();
    assert!(
        granted <= BUDGET,
        "credit granted beyond the buffer: {granted}"
    );
}

/// A relay never opens a flow that would not fit in its session buffer (each sets aside its
/// initial credit and MIN_SEND_BUFFER).
#[test]
fn the_relay_opens_no_flow_beyond_its_buffer() {
    let mut cfg = SessionConfig::new(Role::Relay, 7, "minrtt");
    cfg.session_buffer = 1 << 20;
    let mut relay = Session::new(cfg).unwrap();
    let user = IpAddr::V4(Ipv4Addr::new(10, 0, 1, 2));
    for _ in 0..3 {
        relay.open_flow(t(0), user, ping_dst()).unwrap();
    }
    assert_eq!(
        relay.open_flow(t(0), user, ping_dst()),
        Err(ProtoError::TooManyFlows(3))
    );
}

/// Servers send faster than the relay's passengers read (they pause): the proxy's send buffers
/// stop at its session buffer (every flow's capacity falls to 0) and its servers are held
/// back. Once the passengers read again, acknowledgements free the room, each flow is woken
/// ([`Event::Writable`]: the servers write only after one) and everything arrives byte-exact.
#[test]
fn the_send_side_stops_at_the_session_buffer_and_resumes_after_acks() {
    const BUDGET: u64 = 8 << 20;
    let tune = |c: &mut SessionConfig| c.session_buffer = BUDGET;
    let mut net = Net::with_config("minrtt", 2, &[10, 30], tune);
    net.cwnd_bytes = 1 << 20;
    net.relay_reads_paused = true;
    let user = IpAddr::V4(Ipv4Addr::new(10, 0, 1, 2));
    let mut flows = Vec::new();
    for k in 0..6u64 {
        let flow = net.relay.open_flow(t(0), user, ping_dst()).unwrap();
        net.relay.send_fin(t(0), flow).unwrap();
        flows.push((flow, pattern(20 + k, 3 << 20)));
    }
    // Proxy side: flow -> (server data, bytes taken, may write now).
    let mut servers: std::collections::BTreeMap<u64, (Vec<u8>, usize, bool)> = Default::default();
    let mut got: std::collections::BTreeMap<u64, Vec<u8>> = Default::default();
    let mut buf = vec![0u8; 64 * 1024];
    let mut stopped_at = None;
    while net.now_ms < 60_000 {
        let now = t(net.now_ms);
        let mut data = 0;
        for (&f, (bytes, taken, ready)) in servers.iter_mut() {
            // The passenger's request: its end only.
            assert!(!matches!(
                net.proxy.read(now, f, &mut buf),
                ReadOutcome::Data(_)
            ));
            // As the shell does: read what the capacity allows (it is kept for this flow),
            // and at 0 wait until woken.
            while *ready && *taken < bytes.len() {
                let cap = net.proxy.send_capacity(f);
                if cap == 0 {
                    assert_eq!(net.proxy.send(now, f, &[]).unwrap(), 0);
                    *ready = false;
                    break;
                }
                let n = cap.min(bytes.len() - *taken);
                assert_eq!(
                    net.proxy.send(now, f, &bytes[*taken..*taken + n]).unwrap(),
                    n
                );
                *taken += n;
                if *taken == bytes.len() {
                    net.proxy.send_fin(now, f).unwrap();
                }
            }
            data += *taken;
        }
        if !net.relay_reads_paused {
            for (f, _) in &flows {
                while let ReadOutcome::Data(n) = net.relay.read(now, *f, &mut buf) {
                    got.entry(*f).or_default().extend_from_slice(&buf[..n]);
                }
            }
        }
        let held = net.proxy.buffered_bytes();
        if net.relay_reads_paused
            && servers.len() == flows.len()
            && servers.values().all(|s| !s.2 || s.1 == s.0.len())
        {
            // Stopped: every flow was refused a byte more (none holds its 4 MiB window),
            // although the servers have more to send.
            assert!(data < 6 * (3 << 20));
            assert!(
                held > BUDGET / 2 && held <= BUDGET,
                "the proxy holds {held} of {BUDGET}"
            );
            stopped_at.get_or_insert(net.now_ms);
            if net.now_ms >= stopped_at.unwrap() + 1_000 {
                // It stays stopped while nobody reads; now the passengers read again.
                net.relay_reads_paused = false;
            }
        }
        net.step();
        for e in std::mem::take(&mut net.proxy_events) {
            match e {
                Event::FlowRequested { flow, .. } => {
                    net.proxy.accept_flow(t(net.now_ms), flow).unwrap();
                    let k = flows.iter().position(|(f, _)| *f == flow).unwrap();
                    servers.insert(flow, (flows[k].1.clone(), 0, true));
                }
                Event::Writable(flow) => servers.get_mut(&flow).unwrap().2 = true,
                Event::FlowReset { .. } | Event::SessionLost => panic!("proxy: {e:?}"),
                _ => {}
            }
        }
        if net.relay.open_flows() == 0 && net.proxy.open_flows() == 0 {
            break;
        }
    }
    assert!(
        stopped_at.is_some(),
        "the proxy's send side never filled up"
    );
    for (f, bytes) in &flows {
        let g = got.get(f).map_or(&[][..], |g| &g[..]);
        assert!(
            g == &bytes[..],
            "flow {f} differs: {} of {} bytes by {} ms, first difference at {:?}, stopped at {stopped_at:?}",
            g.len(),
            bytes.len(),
            net.now_ms,
            g.iter().zip(bytes).position(|(x, y)| x != y)
        );
    }
    assert_eq!(net.proxy.open_flows(), 0, "not done by {} ms", net.now_ms);
}

/// The shell reads from a socket as much as [`Session::send_capacity`] allowed and passes it to
/// [`Session::send`] afterwards: in between, other flows may take what is left of the session
/// buffer, and the bytes it read must still be taken.
#[test]
fn a_send_capacity_is_kept_while_other_flows_fill_the_buffer() {
    let mut cfg = SessionConfig::new(Role::Relay, 7, "minrtt");
    cfg.session_buffer = 2 << 20;
    let mut relay = Session::new(cfg).unwrap();
    let user = IpAddr::V4(Ipv4Addr::new(10, 0, 1, 2));
    let a = relay.open_flow(t(0), user, ping_dst()).unwrap();
    let b = relay.open_flow(t(0), user, ping_dst()).unwrap();
    let chunk = vec![1u8; MIN_SEND_BUFFER as usize];
    assert_eq!(relay.send(t(0), a, &chunk).unwrap(), chunk.len());
    // Flow a has its own part of the buffer full: more comes from what the flows share.
    let promised = relay.send_capacity(a);
    assert_eq!(promised, chunk.len());
    let mut b_took = 0;
    loop {
        let cap = relay.send_capacity(b);
        if cap == 0 {
            break;
        }
        assert_eq!(relay.send(t(0), b, &chunk[..cap]).unwrap(), cap);
        b_took += cap;
    }
    assert!(b_took > 2 * chunk.len(), "b took {b_took}");
    assert_eq!(relay.send(t(0), a, &chunk[..promised]).unwrap(), promised);
    assert_eq!(relay.send_capacity(a), 0, "the buffer is spoken for");
    assert!(relay.buffered_bytes() <= 2 << 20);
}

/// A relay that renewed its epoch (it met another proxy, then came back) keeps counting its
/// flow ids. What its earlier subflows still deliver for the flows of before (reset at both
/// ends by the new epoch) is dropped: it fails nothing and waits for no OpenFlow.
#[test]
fn data_of_the_relays_earlier_epoch_is_dropped() {
    let mut proxy = Session::new({
        let mut cfg = SessionConfig::new(Role::Proxy, 7, "minrtt");
        cfg.epoch = 1;
        cfg
    })
    .unwrap();
    let ours = proxy.epoch();
    assert_eq!(proxy.on_peer_hello(t(0), ours, 50), HelloOutcome::Attach);
    proxy.attach_path(t(0), 0).unwrap();
    proxy.on_frame(t(1), 0, open_frame(0, 1)).unwrap();
    proxy.on_frame(t(1), 0, open_frame(1, 2)).unwrap();
    assert_eq!(
        proxy.on_peer_hello(t(2), ours, 51),
        HelloOutcome::PeerRestarted
    );
    proxy.attach_path(t(2), 1).unwrap();
    proxy.on_frame(t(3), 1, open_frame(0, 3)).unwrap();
    assert_eq!(proxy.open_flows(), 1);
    // Late data of flow 2 from the subflow of the earlier epoch.
    proxy
        .on_frame(t(4), 0, data_frame(2, 0, b"from before"))
        .unwrap();
    assert_eq!(proxy.open_flows(), 1);
    assert_eq!(proxy.buffered_bytes(), 0);
    keep_alive(&mut proxy, 100, 12_000);
}

/// Found by fuzzing: a peer's Pong with a clock reading of 2^63 µs or more overflowed the
/// one-way delay's arithmetic (a panic where overflow is checked); it is taken as no OWD sample.
#[test]
fn a_pong_with_a_huge_clock_reading_is_survived() {
    let mut proxy = Session::new(SessionConfig::new(Role::Proxy, 1, "minrtt")).unwrap();
    proxy.attach_path(t(0), 0).unwrap();
    let pong = polycorn_proto::Frame::Pong {
        id: 0,
        ping_sent_us: 1_000,
        received_us: 1 << 63,
    };
    proxy.on_frame(t(1_000), 0, pong).unwrap();
}

/// Found by fuzzing: Resets for the 16,385 highest flow ids walked the proxy's floor of closed
/// ids up to `u64::MAX` and past it (a panic where overflow is checked, a wrap elsewhere).
#[test]
fn resets_for_the_highest_flow_ids_are_survived() {
    let mut proxy = Session::new(SessionConfig::new(Role::Proxy, 1, "minrtt")).unwrap();
    proxy.attach_path(t(0), 0).unwrap();
    for (cseq, flow) in (u64::MAX - 16_384..=u64::MAX).enumerate() {
        let reset = polycorn_proto::Frame::Reset {
            cseq: cseq as u64,
            flow,
            reason: polycorn_proto::ResetReason::PeerReset,
        };
        let _ = proxy.on_frame(t(1), 0, reset);
    }
}
