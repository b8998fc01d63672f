//! When a TCP segment's bytes were first put on a link: the forwarder reads the IPv4 and TCP
//! headers (never the payload, which is TLS anyway) of the packets a link is offered and, per
//! connection, remembers when each range of sequence numbers was first offered, so a
//! retransmission's record says when its bytes first left as well as when they last did.

use std::collections::{HashMap, VecDeque};

/// Segments remembered per connection (older ones are forgotten; a retransmission of one of
/// them counts as first sent when it is offered).
const KEEP: usize = 16_384;

/// Source and destination address and port.
type ConnKey = ([u8; 4], [u8; 4], u16, u16);

#[derive(Debug, Default)]
struct Conn {
    /// One past the highest sequence number offered so far.
    max_end: Option<u32>,
    /// (first sequence number, one past the last, first offered µs), oldest first.
    segs: VecDeque<(u32, u32, u64)>,
}

/// First-offer times of the TCP bytes a link carried.
#[derive(Debug, Default)]
pub struct SeqTrack {
    conns: HashMap<ConnKey, Conn>,
}

/// `a` is before `b` in sequence space.
fn before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// Connection, sequence number and payload length of an IPv4 TCP packet.
fn tcp_segment(pkt: &[u8]) -> Option<(ConnKey, u32, u32)> {
    if pkt.len() < 20 || pkt[0] >> 4 != 4 || pkt[9] != 6 {
        return None;
    }
    let ihl = usize::from(pkt[0] & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([pkt[2], pkt[3]])).min(pkt.len());
    let tcp = pkt.get(ihl..total)?;
    if tcp.len() < 20 {
        return None;
    }
    let off = usize::from(tcp[12] >> 4) * 4;
    let len = tcp.len().checked_sub(off)? as u32;
    let key = (
        pkt[12..16].try_into().ok()?,
        pkt[16..20].try_into().ok()?,
        u16::from_be_bytes([tcp[0], tcp[1]]),
        u16::from_be_bytes([tcp[2], tcp[3]]),
    );
    let seq = u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]);
    Some((key, seq, len))
}

impl SeqTrack {
    /// `pkt` is offered at `now_us`: when the last byte it carries was first offered (`now_us`
    /// unless it is a retransmission of bytes seen before; also `now_us` for packets that are
    /// not TCP or carry no data).
    pub fn first_offered(&mut self, pkt: &[u8], now_us: u64) -> u64 {
        let Some((key, seq, len)) = tcp_segment(pkt) else {
            return now_us;
        };
        if len == 0 {
            return now_us;
        }
        let end = seq.wrapping_add(len);
        let c = self.conns.entry(key).or_default();
        match c.max_end {
            Some(max) if !before(max, end) => {
                // Seen before: the remembered segment holding its last byte.
                let last = end.wrapping_sub(1);
                c.segs
                    .iter()
                    .rev()
                    .find(|&&(a, b, _)| !before(last, a) && before(last, b))
                    .map_or(now_us, |&(_, _, t)| t)
            }
            _ => {
                c.max_end = Some(end);
                c.segs.push_back((seq, end, now_us));
                if c.segs.len() > KEEP {
                    c.segs.pop_front();
                }
                now_us
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(sport: u16, seq: u32, len: usize) -> Vec<u8> {
        let mut p = vec![0u8; 40 + len];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&((40 + len) as u16).to_be_bytes());
        p[9] = 6;
        p[12..16].copy_from_slice(&[10, 0, 0, 1]);
        p[16..20].copy_from_slice(&[10, 0, 0, 2]);
        p[20..22].copy_from_slice(&sport.to_be_bytes());
        p[22..24].copy_from_slice(&443u16.to_be_bytes());
        p[24..28].copy_from_slice(&seq.to_be_bytes());
        p[32] = 5 << 4;
        p
    }

    #[test]
    fn a_retransmission_keeps_its_first_offer_time() {
        let mut t = SeqTrack::default();
        let base = u32::MAX - 1000; // sequence numbers wrap in between
        assert_eq!(t.first_offered(&packet(1, base, 1000), 10), 10);
        assert_eq!(
            t.first_offered(&packet(1, base.wrapping_add(1000), 1000), 20),
            20
        );
        assert_eq!(
            t.first_offered(&packet(2, base, 1000), 25),
            25,
            "another connection"
        );
        assert_eq!(t.first_offered(&packet(1, base, 1000), 300), 10, "resent");
        assert_eq!(
            t.first_offered(&packet(1, base.wrapping_add(1000), 1000), 310),
            20
        );
        assert_eq!(
            t.first_offered(&packet(1, base.wrapping_add(2000), 500), 320),
            320
        );
        // A pure acknowledgement and a non-TCP packet are offered now.
        assert_eq!(t.first_offered(&packet(1, base, 0), 330), 330);
        assert_eq!(t.first_offered(&[0x60; 40], 340), 340);
        assert_eq!(t.first_offered(&[0x45, 0, 0], 350), 350);
    }
}
