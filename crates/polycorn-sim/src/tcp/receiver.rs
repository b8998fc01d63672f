//! The receiving side of a subflow: reassembly, SACK blocks and the ACK policy.

use super::{Ack, Duration, Instant, Segment, MAX_SACK_BLOCKS};

/// Linux `TCP_DELACK_MIN`: the delayed-ACK timer.
const DELACK: Duration = Duration::from_millis(40);
/// Linux `TCP_MAX_QUICKACKS`: segments ACKed at once at the start of a connection.
const QUICKACKS: u32 = 16;
/// A gap in the data longer than this puts the receiver back in quick-ACK mode (Linux
/// `tcp_event_data_recv`: longer than the receiver's RTO, `TCP_TIMEOUT_INIT` on a side that
/// sends no data of its own).
const QUICKACK_AFTER_IDLE: Duration = Duration::from_secs(1);

/// When the receiver acknowledges.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum AckPolicy {
    /// Linux-like (`__tcp_ack_snd_check`): the first 16 segments are ACKed at once (quick
    /// ACK; again after a second without data), then an ACK once more than one MSS is unacknowledged (every second full segment),
    /// or 40 ms after the first unacknowledged byte; while out-of-order data is held, and for
    /// the segment that fills the last hole, every segment is ACKed at once.
    #[default]
    Delayed,
    /// One ACK per segment.
    EverySegment,
}

/// An out-of-order range held by the receiver and when it last changed.
#[derive(Clone, Copy, Debug)]
struct OooRange {
    start: u64,
    end: u64,
    stamp: u64,
}

/// The receiver of one subflow. See the [module docs](super).
#[derive(Clone, Debug)]
pub struct TcpReceiver {
    policy: AckPolicy,
    mss: u32,
    rcv_nxt: u64,
    /// Disjoint out-of-order ranges above `rcv_nxt`, in sequence order.
    ooo: Vec<OooRange>,
    stamp: u64,
    quick: u32,
    /// `rcv_nxt` when the last ACK went out (`rcv_wup`).
    rcv_wup: u64,
    delack_deadline: Option<Instant>,
    /// When the last data segment arrived.
    last_data: Option<Instant>,
    /// `TS.Recent`: the timestamp to echo.
    ts_recent: Option<Instant>,
    acks_sent: u64,
}

impl TcpReceiver {
    /// A receiver expecting stream offset 0, with full segments of `mss` bytes.
    pub fn new(policy: AckPolicy, mss: u32) -> Self {
        TcpReceiver {
            policy,
            mss: mss.max(1),
            rcv_nxt: 0,
            ooo: Vec::new(),
            stamp: 0,
            quick: QUICKACKS,
            rcv_wup: 0,
            delack_deadline: None,
            last_data: None,
            ts_recent: None,
            acks_sent: 0,
        }
    }

    /// In-order bytes received (the stream offset the receiver expects next).
    pub fn delivered(&self) -> u64 {
        self.rcv_nxt
    }

    /// ACKs sent so far.
    pub fn acks_sent(&self) -> u64 {
        self.acks_sent
    }

    /// Take a segment arriving at `now`; returns the ACK to send now, if any.
    pub fn on_segment(&mut self, now: Instant, seg: &Segment) -> Option<Ack> {
        let (start, end) = (seg.seq, seg.end());
        if self
            .last_data
            .is_some_and(|t| now - t > QUICKACK_AFTER_IDLE)
        {
            self.quick = QUICKACKS;
        }
        self.last_data = Some(now);
        // RFC 7323 §4.3 (Linux `tcp_replace_ts_recent`): take TSval from a segment at or
        // below the left edge of the window last acknowledged.
        if start <= self.rcv_wup {
            self.ts_recent = Some(seg.sent_at);
        }
        let duplicate = end <= self.rcv_nxt || {
            let i = self.ooo.partition_point(|r| r.end < end);
            self.ooo.get(i).is_some_and(|r| r.start <= start)
        };
        if duplicate {
            // Data already held: ACK at once with a D-SACK.
            let mut ack = self.make_ack();
            ack.dsack = true;
            return Some(ack);
        }
        let had_holes = !self.ooo.is_empty();
        let in_order = start <= self.rcv_nxt;
        if in_order {
            self.rcv_nxt = end;
            // Pull in out-of-order ranges now contiguous.
            let mut k = 0;
            while k < self.ooo.len() && self.ooo[k].start <= self.rcv_nxt {
                self.rcv_nxt = self.rcv_nxt.max(self.ooo[k].end);
                k += 1;
            }
            self.ooo.drain(..k);
        } else {
            self.insert_ooo(start, end);
        }
        let immediate = match self.policy {
            AckPolicy::EverySegment => true,
            AckPolicy::Delayed => {
                !in_order
                    || had_holes
                    || self.quick > 0
                    || self.rcv_nxt - self.rcv_wup > u64::from(self.mss)
            }
        };
        if immediate {
            self.quick = self.quick.saturating_sub(1);
            Some(self.make_ack())
        } else {
            if self.delack_deadline.is_none() {
                self.delack_deadline = Some(now + DELACK);
            }
            None
        }
    }

    fn insert_ooo(&mut self, start: u64, end: u64) {
        self.stamp += 1;
        let stamp = self.stamp;
        // First range that ends at or after `start` (may merge).
        let i = self.ooo.partition_point(|r| r.end < start);
        let mut j = i;
        let mut s = start;
        let mut e = end;
        while j < self.ooo.len() && self.ooo[j].start <= e {
            s = s.min(self.ooo[j].start);
            e = e.max(self.ooo[j].end);
            j += 1;
        }
        let merged = OooRange {
            start: s,
            end: e,
            stamp,
        };
        if j > i {
            self.ooo[i] = merged;
            self.ooo.drain(i + 1..j);
        } else {
            self.ooo.insert(i, merged);
        }
    }

    fn make_ack(&mut self) -> Ack {
        self.rcv_wup = self.rcv_nxt;
        self.delack_deadline = None;
        self.acks_sent += 1;
        let mut ack = Ack::cumulative(self.rcv_nxt);
        ack.ts_echo = self.ts_recent;
        // The most recently changed ranges first.
        let mut n = 0usize;
        let mut last_stamp = u64::MAX;
        while n < MAX_SACK_BLOCKS {
            let best = self
                .ooo
                .iter()
                .filter(|r| r.stamp < last_stamp)
                .max_by_key(|r| r.stamp);
            let Some(r) = best else { break };
            ack.sack[n] = (r.start, r.end);
            last_stamp = r.stamp;
            n += 1;
        }
        ack.sack_len = n as u8;
        ack
    }

    /// The delayed-ACK deadline, if an ACK is pending.
    pub fn timeout(&self) -> Option<Instant> {
        self.delack_deadline
    }

    /// Run the delayed-ACK timer at `now`; returns the ACK to send, if due.
    pub fn on_timeout(&mut self, now: Instant) -> Option<Ack> {
        match self.delack_deadline {
            Some(d) if d <= now => Some(self.make_ack()),
            _ => None,
        }
    }
}
