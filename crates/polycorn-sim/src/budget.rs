//! The time budget of a download: where its flow completion time (FCT) beyond the oracle's
//! went, split into named parts that add up to it.
//!
//! ## The critical path of the last byte
//! A download completes when its passenger has read every byte. The ride follows the flow's
//! last data byte backwards from there — the copy of it that reached the relay's session
//! first — and times each leg of its way:
//!
//! | mark | moment |
//! | --- | --- |
//! | `start` | the passenger opens the flow |
//! | `request` | the request reached the server (the proxy's session handed it its first bytes) |
//! | `first_sent` | the proxy's subflow first put the segment carrying that copy on its path |
//! | `sent` | the transmission that arrived left the proxy's subflow |
//! | `arrived` | that packet reached the relay's subflow |
//! | `framed` | the relay's session got the frame (the subflow had every earlier byte) |
//! | `done` | the passenger had read the flow's every byte and its end |
//!
//! so that `FCT = (request − start) + (first_sent − request) + (sent − first_sent) +
//! (arrived − sent) + (framed − arrived) + (done − framed)`, each leg non-negative. The
//! oracle's FCT splits the same way into its request's one-way delay, its sending time (full
//! capacity of every path until the last byte is on its way) and the last byte's one-way
//! delay ([`OracleSplit`]).
//!
//! ## The parts (each interval of the last byte's way is in exactly one)
//! - **set-up**: `request − start` beyond the oracle's request delay.
//! - **window-bound**: `first_sent − request` (the byte waited at the sender — in the proxy's
//!   session while no path had window for it, then in its subflow's send buffer for
//!   congestion window or pacing) beyond the oracle's sending time.
//! - **queueing**: the arriving packet's time in its link's buffer (`arrived − sent` less the
//!   propagation delay and any outage), less whatever of the oracle's sending time the sender
//!   wait did not cover (a sender that fills a buffer quickly moves the serialisation of the
//!   bytes ahead into the queue).
//! - **reordering**: `done − framed`, the last byte waiting at the relay for earlier bytes
//!   (of this or another path) and the flow's end.
//! - **stalls**: the time the packet was held in an outage (blackout or handover
//!   interruption); `sent − first_sent` if the path's sender had a retransmission timeout
//!   (RTO) in between; `framed − arrived` (waiting for earlier bytes of the same subflow) if
//!   it had one in between.
//! - **rest**: the propagation delay beyond the oracle's last one-way delay (a slower path
//!   carried the last byte); loss recovery without an RTO (fast retransmission and the
//!   subflow's own head-of-line wait); and the negative remainders of queueing (when the
//!   oracle's sending time exceeds sender wait and queueing together — the flow beat the
//!   oracle's pace there).
//!
//! The six parts add up to FCT − oracle exactly (up to rounding), by construction; the rest is
//! made only of the named leftovers above.

pub use polycorn_link::link::Transit;

use crate::transport::Packet;

/// The marks of a download's last byte on its critical path, µs of ride time (see the module
/// docs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LastByte {
    /// The path whose copy reached the relay's session first.
    pub path: usize,
    /// The passenger opened the flow.
    pub start_us: u64,
    /// The request reached the server.
    pub request_us: u64,
    /// First transmission of the copy.
    pub first_sent_us: u64,
    /// The transmission that arrived, and its way over the link.
    pub transit: Transit,
    /// The relay's session got the frame.
    pub framed_us: u64,
    /// The passenger had the whole flow.
    pub done_us: u64,
    /// The path's sender had an RTO between the first and the arriving transmission.
    pub rto_before_sent: bool,
    /// The path's sender had an RTO between the arrival and the frame.
    pub rto_before_framed: bool,
}

/// The oracle's FCT in three legs, seconds: request one-way delay, sending at full capacity,
/// the last byte's one-way delay.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct OracleSplit {
    /// The request's one-way delay.
    pub request_s: f64,
    /// From the request's arrival until the last byte leaves.
    pub send_s: f64,
    /// The last byte's one-way delay.
    pub owd_s: f64,
}

impl OracleSplit {
    /// The oracle's FCT.
    pub fn fct_s(&self) -> f64 {
        self.request_s + self.send_s + self.owd_s
    }
}

/// A flow's FCT beyond the oracle's, in named parts, ms (see the module docs).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Budget {
    /// FCT − oracle FCT.
    pub excess_ms: f64,
    /// Request set-up beyond the oracle's one-way delay.
    pub setup_ms: f64,
    /// Waiting at the sender for window beyond the oracle's sending time.
    pub window_ms: f64,
    /// Queued in the carriers' buffers.
    pub queueing_ms: f64,
    /// Waiting at the relay for earlier bytes.
    pub reorder_ms: f64,
    /// Outages and retransmission timeouts.
    pub stalls_ms: f64,
    /// Everything else.
    pub rest_ms: f64,
}

/// Names of the parts, in [`Budget::parts`] order.
pub const PARTS: [&str; 6] = ["setup", "window", "queueing", "reorder", "stalls", "rest"];

impl Budget {
    /// The parts in [`PARTS`] order.
    pub fn parts(&self) -> [f64; 6] {
        [
            self.setup_ms,
            self.window_ms,
            self.queueing_ms,
            self.reorder_ms,
            self.stalls_ms,
            self.rest_ms,
        ]
    }

    /// Sum of the parts.
    pub fn sum_ms(&self) -> f64 {
        self.parts().iter().sum()
    }

    /// Whether the parts add up to the excess within `share` of it (or 1 ms, for tiny ones).
    pub fn adds_up(&self, share: f64) -> bool {
        (self.sum_ms() - self.excess_ms).abs() <= (share * self.excess_ms.abs()).max(1.0)
    }

    /// The budget of the last byte's marks `lb` against the oracle's `o`.
    pub fn of(lb: &LastByte, o: &OracleSplit) -> Budget {
        let ms = |us: u64| us as f64 / 1000.0;
        let t = &lb.transit;
        let fct = ms(lb.done_us - lb.start_us);
        // The request can beat the oracle's one-way delay, which is read at the flow's start,
        // when a path's delay falls while it travels: that gain is no set-up, it goes to rest.
        let setup_raw = ms(lb.request_us.saturating_sub(lb.start_us)) - o.request_s * 1e3;
        let setup = setup_raw.max(0.0);
        let sender = ms(lb.first_sent_us.saturating_sub(lb.request_us));
        let oracle_send = o.send_s * 1e3;
        let window = (sender - oracle_send).max(0.0);
        let uncovered = (oracle_send - sender).max(0.0);
        let queued = ms(t.queueing_us()) - uncovered;
        let queueing = queued.max(0.0);
        let resent = ms(t.sent_us.saturating_sub(lb.first_sent_us));
        let hol = ms(lb.framed_us.saturating_sub(t.at_us));
        let dark = ms(t.dark_us);
        let mut stalls = dark;
        let mut rest = ms(t.propagation_us) - o.owd_s * 1e3 + queued.min(0.0) + setup_raw.min(0.0);
        if lb.rto_before_sent {
            stalls += resent;
        } else {
            rest += resent;
        }
        if lb.rto_before_framed {
            stalls += hol;
        } else {
            rest += hol;
        }
        Budget {
            excess_ms: fct - o.fct_s() * 1e3,
            setup_ms: setup,
            window_ms: window,
            queueing_ms: queueing,
            reorder_ms: ms(lb.done_us.saturating_sub(lb.framed_us)),
            stalls_ms: stalls,
            rest_ms: rest,
        }
    }
}

/// One copy of a download's last byte on a path's subflow.
#[derive(Debug, Clone, Copy)]
struct Copy {
    download: usize,
    /// The proxy's connection on the path that carries it (a fresh connection after a
    /// replacement restarts its stream offsets, and packets of the old one may still arrive).
    gen: u32,
    /// Subflow stream offset of the frame's last byte.
    stream: u64,
    first_sent_us: Option<u64>,
    /// The first transmission that arrived.
    arrived: Option<Transit>,
}

/// What the ride records for the budgets of its downloads.
#[derive(Debug, Default)]
pub(crate) struct Tracker {
    /// Per download: when its request reached the server.
    request_us: Vec<Option<u64>>,
    /// Per download: its last byte's marks once its frame reached the relay's session.
    framed: Vec<Option<(usize, u64, Copy)>>,
    /// Per download: its size (the flow offset one past its last byte).
    size: Vec<u64>,
    /// Per path: copies of last bytes in the proxy's subflow.
    copies: Vec<Vec<Copy>>,
    /// Per path: RTOs of the proxy's subflow, µs.
    rtos: Vec<Vec<u64>>,
}

impl Tracker {
    pub(crate) fn new(sizes: Vec<u64>, paths: usize) -> Tracker {
        Tracker {
            request_us: vec![None; sizes.len()],
            framed: vec![None; sizes.len()],
            size: sizes,
            copies: vec![Vec::new(); paths],
            rtos: vec![Vec::new(); paths],
        }
    }

    /// The request of `download` reached the server at `now_us`.
    pub(crate) fn request(&mut self, download: usize, now_us: u64) {
        self.request_us[download].get_or_insert(now_us);
    }

    /// The proxy's session wrote a data frame of `download` ending at flow offset `end` into
    /// path `p`'s subflow (connection `gen`), its last byte at stream offset `stream`.
    pub(crate) fn frame_sent(
        &mut self,
        download: usize,
        p: usize,
        gen: u32,
        end: u64,
        stream: u64,
    ) {
        if end == self.size[download] && self.framed[download].is_none() {
            self.copies[p].push(Copy {
                download,
                gen,
                stream,
                first_sent_us: None,
                arrived: None,
            });
        }
    }

    /// The proxy's subflow on path `p` (connection `gen`) put `pkt` on the wire at `now_us`.
    pub(crate) fn transmitted(&mut self, p: usize, gen: u32, pkt: &Packet, now_us: u64) {
        let Packet::Data(s) = pkt else { return };
        for c in &mut self.copies[p] {
            if c.gen == gen && s.seq <= c.stream && c.stream < s.end() {
                c.first_sent_us.get_or_insert(now_us);
            }
        }
    }

    /// `pkt`, sent on path `p` by the proxy's connection `gen`, reached the relay.
    pub(crate) fn arrived(&mut self, p: usize, gen: u32, pkt: &Packet, t: Transit) {
        let Packet::Data(s) = pkt else { return };
        for c in &mut self.copies[p] {
            if c.gen == gen && c.arrived.is_none() && s.seq <= c.stream && c.stream < s.end() {
                c.arrived = Some(t);
            }
        }
    }

    /// The proxy's subflow on path `p` had an RTO at `now_us`.
    pub(crate) fn rto(&mut self, p: usize, now_us: u64) {
        self.rtos[p].push(now_us);
    }

    /// The relay's session got a data frame of `download` on path `p` ending at flow offset
    /// `end` at `now_us`.
    pub(crate) fn frame_received(&mut self, download: usize, p: usize, end: u64, now_us: u64) {
        if end != self.size[download] || self.framed[download].is_some() {
            return;
        }
        let Some(i) = self.copies[p]
            .iter()
            .rposition(|c| c.download == download && c.arrived.is_some())
        else {
            return;
        };
        let c = self.copies[p].remove(i);
        self.framed[download] = Some((p, now_us, c));
        self.copies
            .iter_mut()
            .for_each(|v| v.retain(|c| c.download != download));
    }

    /// The marks of `download`, started at `start_us` and done at `done_us`, if its last byte
    /// was followed all the way.
    pub(crate) fn last_byte(
        &self,
        download: usize,
        start_us: u64,
        done_us: u64,
    ) -> Option<LastByte> {
        let (path, framed_us, c) = self.framed[download]?;
        let transit = c.arrived?;
        let first_sent_us = c.first_sent_us?;
        let rto_in = |a: u64, b: u64| self.rtos[path].iter().any(|&t| a < t && t <= b);
        Some(LastByte {
            path,
            start_us,
            request_us: self.request_us[download]?,
            first_sent_us,
            transit,
            framed_us,
            done_us,
            rto_before_sent: rto_in(first_sent_us, transit.sent_us),
            rto_before_framed: rto_in(transit.at_us, framed_us),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lb() -> LastByte {
        LastByte {
            path: 0,
            start_us: 1_000_000,
            request_us: 1_030_000,
            first_sent_us: 1_230_000,
            transit: Transit {
                sent_us: 1_330_000,
                at_us: 1_480_000,
                propagation_us: 30_000,
                dark_us: 50_000,
            },
            framed_us: 1_500_000,
            done_us: 1_600_000,
            rto_before_sent: true,
            rto_before_framed: false,
        }
    }

    #[test]
    fn the_parts_follow_the_legs_and_add_up() {
        let o = OracleSplit {
            request_s: 0.02,
            send_s: 0.15,
            owd_s: 0.02,
        };
        let b = Budget::of(&lb(), &o);
        assert!((b.excess_ms - 410.0).abs() < 1e-9, "{b:?}");
        assert!((b.setup_ms - 10.0).abs() < 1e-9);
        assert!((b.window_ms - 50.0).abs() < 1e-9);
        assert!((b.queueing_ms - 70.0).abs() < 1e-9);
        assert!((b.reorder_ms - 100.0).abs() < 1e-9);
        // 50 ms dark + 100 ms resent after an RTO.
        assert!((b.stalls_ms - 150.0).abs() < 1e-9);
        // 10 ms slower path + 20 ms head-of-line wait without an RTO.
        assert!((b.rest_ms - 30.0).abs() < 1e-9);
        assert!(b.adds_up(1e-9));
    }

    #[test]
    fn oracle_sending_time_not_spent_at_the_sender_comes_out_of_the_queue() {
        let o = OracleSplit {
            request_s: 0.03,
            send_s: 0.25,
            owd_s: 0.03,
        };
        let mut l = lb();
        l.transit.dark_us = 0;
        l.rto_before_sent = false;
        let b = Budget::of(&l, &o);
        // The sender waited 200 ms of the oracle's 250: 50 ms of its 120 ms queue was the
        // oracle's serialisation.
        assert_eq!(b.window_ms, 0.0);
        assert!((b.queueing_ms - 70.0).abs() < 1e-9, "{b:?}");
        assert!(b.adds_up(1e-9), "{b:?}");
    }

    #[test]
    fn a_request_faster_than_the_oracles_delay_is_no_negative_setup() {
        // The request took 30 ms where the oracle's one-way delay at the start was 45 ms.
        let o = OracleSplit {
            request_s: 0.045,
            send_s: 0.15,
            owd_s: 0.02,
        };
        let b = Budget::of(&lb(), &o);
        assert_eq!(b.setup_ms, 0.0, "{b:?}");
        // 10 ms slower path + 20 ms head-of-line wait − 15 ms the request gained.
        assert!((b.rest_ms - 15.0).abs() < 1e-9, "{b:?}");
        assert!(b.adds_up(1e-9), "{b:?}");
    }

    #[test]
    fn packets_of_a_replaced_connection_are_not_taken_for_the_fresh_ones() {
        use crate::tcp::Segment;
        use polycorn_sched::time::Instant;
        // Download 0's last byte goes out at stream offset 999 of path 0's fresh connection
        // (gen 2); the old connection's (gen 1) segment over the same offsets, still in flight
        // when the proxy replaced it, must not stand for it.
        let mut t = Tracker::new(vec![1000], 1);
        t.request(0, 0);
        t.frame_sent(0, 0, 2, 1000, 999);
        let seg = |at_us| {
            Packet::Data(Segment {
                seq: 0,
                len: 1200,
                retransmission: false,
                sent_at: Instant::from_micros(at_us),
            })
        };
        let transit = |sent_us, at_us| Transit {
            sent_us,
            at_us,
            propagation_us: 20_000,
            dark_us: 0,
        };
        t.transmitted(0, 1, &seg(1_000), 1_000);
        t.arrived(0, 1, &seg(1_000), transit(1_000, 9_000_000));
        t.transmitted(0, 2, &seg(50_000), 50_000);
        t.arrived(0, 2, &seg(50_000), transit(50_000, 90_000));
        t.frame_received(0, 0, 1000, 90_000);
        let lb = t.last_byte(0, 0, 100_000).expect("followed");
        assert_eq!((lb.first_sent_us, lb.transit.sent_us), (50_000, 50_000));
        assert_eq!(lb.transit.at_us, 90_000);
    }
}
