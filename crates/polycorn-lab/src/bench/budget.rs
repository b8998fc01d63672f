//! The time budget of an emulated download, from what relay, proxy, emulator and client
//! recorded.
//!
//! The parts are the simulator's ([`polycorn_sim::budget`]) on the same critical path of the
//! flow's last byte; only the marks come from elsewhere:
//!
//! | mark | emulated ride |
//! | --- | --- |
//! | `start` | the client began connecting |
//! | `request` | the proxy first wrote the flow's bytes (its request) into the server's socket |
//! | transit | the emulator's record of the last packet that path's downlink delivered before the relay read the frame (the path whose copy of the frame reached the relay first) |
//! | `first_sent` | when the emulator was first offered that packet's last byte (earlier than the transit's start if the packet is a retransmission), but not before the proxy's engine took the frame ending at the flow's last byte for that path |
//! | `framed` | the relay's engine read that frame from its subflow |
//! | `done` | the client had read the last byte |
//!
//! Relay and proxy write their marks only when their log filter enables
//! [`polycorn_net::engine::marks::TARGET`] (the bench's daemons do); the emulator reads the
//! TCP sequence numbers of what it carries to know when a retransmitted byte first left
//! ([`polycorn_emu::seqtrack`]). Two differences from the simulator follow from what the
//! kernel shows: the relay's kernel hands over in-order bytes only, so the packet found is the
//! one that completed them (a retransmission that filled a hole, if one did); and whether a
//! retransmission followed a timeout is not known, so its wait is counted in `rest`, never in
//! `stalls` (the RTO flags stay unset: the stalls are the outages the packet was held in).

use std::collections::HashMap;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use polycorn_emu::forward::Delivered;
use polycorn_link::trip::Trip;
use polycorn_sim::budget::{Budget, LastByte};

use super::analysis::{oracle_split, FlowResult};

/// One `flow marks` line of a relay or proxy log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MarksLine {
    /// Flow id in the session.
    pub flow: u64,
    /// The local socket's peer's port (the passenger's at the relay).
    pub peer_port: Option<u16>,
    /// When the pump first wrote into the local socket, µs since the Unix epoch.
    pub first_write_us: Option<u64>,
    /// Highest flow offset sent.
    pub sent_end: u64,
    /// (path, µs) per copy of the frame ending at `sent_end`.
    pub sent: Vec<(usize, u64)>,
    /// Highest flow offset read from a subflow.
    pub recv_end: u64,
    /// Path and µs of the frame that first brought `recv_end`.
    pub recv: Option<(usize, u64)>,
}

/// The `flow marks` lines of a daemon's log (text format), in order; lines that do not parse
/// are skipped.
pub fn parse_marks(log: &str) -> Vec<MarksLine> {
    log.lines()
        .filter(|l| l.contains("flow marks"))
        .filter_map(parse_line)
        .collect()
}

fn parse_line(line: &str) -> Option<MarksLine> {
    let fields: HashMap<&str, &str> = line
        .split_whitespace()
        .filter_map(|w| w.split_once('='))
        .collect();
    let num = |k: &str| fields.get(k).and_then(|v| v.parse::<u64>().ok());
    let sent = match fields.get("sent") {
        None | Some(&"-") => Vec::new(),
        Some(v) => v
            .split(',')
            .map(|c| {
                let (p, us) = c.split_once(':')?;
                Some((p.parse().ok()?, us.parse().ok()?))
            })
            .collect::<Option<Vec<_>>>()?,
    };
    let recv = match (
        fields.get("recv_path").and_then(|v| v.parse().ok()),
        num("recv_us"),
    ) {
        (Some(p), Some(us)) => Some((p, us)),
        _ => None,
    };
    Some(MarksLine {
        flow: num("flow")?,
        peer_port: fields
            .get("peer")
            .and_then(|v| v.parse::<std::net::SocketAddr>().ok())
            .map(|a| a.port()),
        first_write_us: num("first_write_us"),
        sent_end: num("sent_end")?,
        sent,
        recv_end: num("recv_end")?,
        recv,
    })
}

/// The clocks of one emulated ride: the client's (`Instant`s) and the daemons' (wall clock),
/// both turned into µs since the emulator's time 0.
#[derive(Debug, Clone, Copy)]
pub struct RideClock {
    /// The emulator's time 0 as an `Instant` (the player's `t0`).
    pub t0: Instant,
    /// The emulator's time 0 on the wall clock.
    pub started_at: SystemTime,
}

impl RideClock {
    fn of_instant(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.t0).as_micros() as u64
    }

    fn of_wall_us(&self, us: u64) -> u64 {
        let zero = self
            .started_at
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        us.saturating_sub(zero)
    }
}

/// Why a completed download got no budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Missing {
    /// The client did not learn its connection's port.
    NoPort,
    /// No relay marks line for the passenger's port.
    NoRelayMarks,
    /// The relay's line had no received frame, or no proxy line of the same flow sent the
    /// frame the relay read last.
    NoProxyMarks,
    /// The emulator delivered nothing on the path by the time the relay read the frame.
    NoTransit,
    /// No oracle (the trip had no capacity for the flow).
    NoOracle,
}

/// What one emulated ride recorded for its downloads' budgets.
#[derive(Debug, Clone, Copy)]
pub struct RideMarks<'a> {
    /// The client's (plan index, local port, start) per download.
    pub ports: &'a [(usize, Option<u16>, Instant)],
    /// The relay's marks lines.
    pub relay: &'a [MarksLine],
    /// The proxy's marks lines.
    pub proxy: &'a [MarksLine],
    /// Per path, the packets its downlink delivered.
    pub transits: &'a [Vec<Delivered>],
    /// The trip played (for the oracle).
    pub trip: &'a Trip,
    /// The ride's clocks.
    pub clock: RideClock,
}

/// Set the budget of every completed download in `flows` that the marks follow all the way;
/// returns how many got one and, per reason, how many did not.
pub fn set_budgets(
    flows: &mut [FlowResult],
    marks: &RideMarks<'_>,
) -> (usize, HashMap<Missing, usize>) {
    let mut missing: HashMap<Missing, usize> = HashMap::new();
    let mut set = 0;
    for f in flows.iter_mut().filter(|f| f.ok) {
        match marks.budget_of(f) {
            Ok(b) => {
                f.budget = Some(b);
                set += 1;
            }
            Err(why) => *missing.entry(why).or_default() += 1,
        }
    }
    (set, missing)
}

impl RideMarks<'_> {
    fn budget_of(&self, f: &FlowResult) -> Result<Budget, Missing> {
        let RideMarks {
            ports,
            relay,
            proxy,
            transits,
            trip,
            clock,
        } = *self;
        let &(_, port, started) = ports.iter().find(|p| p.0 == f.idx).ok_or(Missing::NoPort)?;
        let port = port.ok_or(Missing::NoPort)?;
        let start_us = clock.of_instant(started);
        let done_us = start_us + (f.fct_s * 1e6).round() as u64;
        // The relay's line of this passenger connection whose last frame came in during the flow
        // (a port may be reused over a long ride).
        let within = |us: u64| (start_us..=done_us + 1_000_000).contains(&clock.of_wall_us(us));
        let r = relay
            .iter()
            .filter(|l| l.peer_port == Some(port) && l.recv_end == f.size)
            .find(|l| l.recv.is_some_and(|(_, us)| within(us)))
            .ok_or(Missing::NoRelayMarks)?;
        let (path, framed) = r.recv.ok_or(Missing::NoProxyMarks)?;
        let framed_us = clock.of_wall_us(framed);
        let p = proxy
            .iter()
            .filter(|l| l.flow == r.flow && l.sent_end == r.recv_end)
            .find(|l| l.first_write_us.is_some_and(within))
            .ok_or(Missing::NoProxyMarks)?;
        let request_us = clock.of_wall_us(p.first_write_us.ok_or(Missing::NoProxyMarks)?);
        let taken_us = p
            .sent
            .iter()
            .find(|(q, _)| *q == path)
            .map(|&(_, us)| clock.of_wall_us(us))
            .ok_or(Missing::NoProxyMarks)?;
        let on_path = transits.get(path).ok_or(Missing::NoTransit)?;
        let i = on_path.partition_point(|d| d.transit.at_us <= framed_us);
        let d = *on_path[..i].last().ok_or(Missing::NoTransit)?;
        let transit = d.transit;
        // A packet first offered before the engine took the frame carries earlier bytes (it filled
        // a hole): the last byte itself left between the take and this packet.
        let first_sent_us = d
            .first_offered_us
            .max(taken_us)
            .min(transit.sent_us.max(taken_us));
        let lb = LastByte {
            path,
            start_us,
            request_us,
            first_sent_us,
            transit,
            framed_us,
            done_us,
            rto_before_sent: false,
            rto_before_framed: false,
        };
        let o = oracle_split(trip, f.start_s, f.size).ok_or(Missing::NoOracle)?;
        Ok(Budget::of(&lb, &o))
    }
}

impl Missing {
    /// What it means, for the bench's note.
    pub fn describe(self) -> &'static str {
        match self {
            Missing::NoPort => "no client port",
            Missing::NoRelayMarks => "no relay marks",
            Missing::NoProxyMarks => "no matching proxy marks",
            Missing::NoTransit => "no emulator transit",
            Missing::NoOracle => "no oracle",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_lines_parse_as_the_engine_writes_them() {
        let log = "2026-12-03T07:00:00.000001Z DEBUG polycorn::marks: flow marks flow=7 \
                   peer=10.0.1.2:40000 first_write_us=- sent_end=16 sent=- recv_end=1048576 \
                   recv_path=1 recv_us=1700000000123456\n\
                   2026-12-03T07:00:00.000002Z  INFO polycorn::paths: something else\n\
                   2026-12-03T07:00:00.000003Z DEBUG polycorn::marks: flow marks flow=7 \
                   peer=10.0.2.2:5201 first_write_us=1700000000000100 sent_end=1048576 \
                   sent=0:1700000000100000,1:1700000000100500 recv_end=16 recv_path=0 \
                   recv_us=1700000000000050\n";
        let m = parse_marks(log);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].peer_port, Some(40000));
        assert_eq!(m[0].recv, Some((1, 1_700_000_000_123_456)));
        assert_eq!(m[0].first_write_us, None);
        assert!(m[0].sent.is_empty());
        assert_eq!(
            m[1].sent,
            vec![(0, 1_700_000_000_100_000), (1, 1_700_000_000_100_500)]
        );
        assert_eq!(m[1].first_write_us, Some(1_700_000_000_000_100));
    }
}
