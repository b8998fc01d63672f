//! One direction of one path as packets see it: a `polycorn-link` [`Link`] (delay, delivery
//! opportunities, droptail queue, outages, held handover interruptions) and, beside it, the
//! packets it carries in FIFO order — the model only sees ids and lengths, as in the emulator
//! (`polycorn-emu`'s forwarder), so delivered ids come out in order and skipped ids were
//! dropped.

use std::collections::VecDeque;

use polycorn_link::link::{EnqueueOutcome, Link, LinkConfig, LinkError, Transit};

/// Per-direction counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WireStats {
    /// Packets offered.
    pub packets_in: u64,
    /// Packets delivered.
    pub packets_out: u64,
    /// Bytes delivered.
    pub bytes_out: u64,
    /// Packets dropped (queue, outage, loss, trace end).
    pub dropped: u64,
}

/// One direction of a path carrying packets of type `P`.
#[derive(Debug)]
pub struct Wire<P> {
    link: Link,
    /// Accepted packets: id, length, when offered (µs), the packet.
    packets: VecDeque<(u64, u32, u64, P)>,
    next_id: u64,
    stats: WireStats,
}

impl<P> Wire<P> {
    /// A wire over a link built from `cfg`.
    pub fn new(cfg: LinkConfig) -> Result<Self, LinkError> {
        Ok(Wire {
            link: Link::new(cfg)?,
            packets: VecDeque::new(),
            next_id: 0,
            stats: WireStats::default(),
        })
    }

    /// Offer `packet` of `len` bytes (IP length) at `now_us`; false if the link dropped it.
    pub fn send(&mut self, now_us: u64, len: u32, packet: P) -> bool {
        self.stats.packets_in += 1;
        let id = self.next_id;
        self.next_id += 1;
        match self.link.enqueue(now_us, id, len) {
            EnqueueOutcome::Enqueued => {
                self.packets.push_back((id, len, now_us, packet));
                true
            }
            EnqueueOutcome::Dropped(_) => {
                self.stats.dropped += 1;
                false
            }
        }
    }

    /// When the link next has something to do (serve or deliver).
    pub fn next_event_us(&self) -> Option<u64> {
        self.link.next_event_us()
    }

    /// Every packet delivered by `now_us`, in order, into `out`, each with its
    /// [`Transit`] (when offered, when delivered, its propagation delay and the time it was
    /// held in an outage).
    pub fn deliver(&mut self, now_us: u64, out: &mut Vec<(P, Transit)>) {
        self.link.advance(now_us);
        while let Some((id, at_us)) = self.link.poll_delivered(now_us) {
            while let Some((front, len, sent_us, p)) = self.packets.pop_front() {
                if front == id {
                    self.stats.packets_out += 1;
                    self.stats.bytes_out += u64::from(len);
                    out.push((p, self.link.transit(sent_us, at_us)));
                    break;
                }
                // Accepted earlier but never delivered (lost on the link): dropped.
                self.stats.dropped += 1;
            }
        }
    }

    /// Counters so far.
    pub fn stats(&self) -> WireStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use polycorn_link::trace::{DelaySeries, DeliveryTrace};

    #[test]
    fn delivers_in_order_after_the_delay() {
        let trace = DeliveryTrace::from_rate_series(&[(1000, 12_000_000)]).unwrap();
        let mut cfg = LinkConfig::new(trace);
        cfg.delay = DelaySeries::constant(10_000);
        let mut w: Wire<&str> = Wire::new(cfg).unwrap();
        assert!(w.send(0, 1500, "a"));
        assert!(w.send(0, 1500, "b"));
        let mut out = Vec::new();
        w.deliver(9_000, &mut out);
        assert!(out.is_empty(), "one-way delay is 10 ms");
        w.deliver(20_000, &mut out);
        let got: Vec<_> = out.iter().map(|(p, _)| *p).collect();
        assert_eq!(got, vec!["a", "b"]);
        let t = out[1].1;
        assert_eq!((t.sent_us, t.propagation_us, t.dark_us), (0, 10_000, 0));
        assert!(
            t.queueing_us() >= 1_000,
            "b waited for a's serialisation: {t:?}"
        );
        assert_eq!(w.stats().bytes_out, 3000);
        assert_eq!(w.next_event_us(), None);
    }
}
