//! The `session` target's input: operations ([`Op`]) and the frames they describe
//! ([`FrameSpec`]), read from the fuzzer's bytes and written back by [`encode`].

use super::*;

/// A time step: a table of typical steps, or a raw number of milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dt {
    pub tag: u8,
    pub raw: u32,
}

const DT_TABLE_MS: [u64; 14] = [
    0, 0, 1, 2, 5, 10, 50, 200, 500, 1_000, 1_600, 5_000, 31_000, 121_000,
];

impl Dt {
    pub const ZERO: Dt = Dt { tag: 0, raw: 0 };
    pub fn ms(ms: u32) -> Dt {
        Dt { tag: 15, raw: ms }
    }
    fn read(c: &mut Cursor<'_>) -> Dt {
        let tag = c.u8() % 16;
        let raw = match tag {
            14 => u32::from(c.u16()),
            15 => c.u32(),
            _ => 0,
        };
        Dt { tag, raw }
    }
    fn write(&self, w: &mut Writer) {
        w.u8(self.tag);
        match self.tag % 16 {
            14 => w.u16(self.raw as u16),
            15 => w.u32(self.raw),
            _ => {}
        }
    }
    pub(super) fn millis(&self) -> u64 {
        match self.tag % 16 {
            t @ 0..=13 => DT_TABLE_MS[usize::from(t)],
            _ => u64::from(self.raw),
        }
    }
}

/// A control sequence number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CseqSel {
    /// The peer's next one (then counted as used).
    Next,
    /// The one used last (a repeat).
    Repeat,
    /// This far past the next one (a gap: out of order).
    Ahead(u8),
    Raw(u64),
}

impl CseqSel {
    fn read(c: &mut Cursor<'_>) -> Self {
        match c.u8() % 4 {
            0 => CseqSel::Next,
            1 => CseqSel::Repeat,
            2 => CseqSel::Ahead(c.u8()),
            _ => CseqSel::Raw(c.u64()),
        }
    }
    fn write(&self, w: &mut Writer) {
        match *self {
            CseqSel::Next => w.u8(0),
            CseqSel::Repeat => w.u8(1),
            CseqSel::Ahead(v) => {
                w.u8(2);
                w.u8(v)
            }
            CseqSel::Raw(v) => {
                w.u8(3);
                w.u64(v)
            }
        }
    }
}

/// A flow id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowSel {
    /// One the harness knows (requested, opened or used before), by index.
    Known(u8),
    Small(u8),
    Raw(u64),
    /// The peer's next new flow id (a relay numbers its flows 1, 2, 3, ...).
    New,
}

impl FlowSel {
    fn read(c: &mut Cursor<'_>) -> Self {
        match c.u8() % 4 {
            0 => FlowSel::Known(c.u8()),
            1 => FlowSel::Small(c.u8()),
            2 => FlowSel::Raw(c.u64()),
            _ => FlowSel::New,
        }
    }
    fn write(&self, w: &mut Writer) {
        match *self {
            FlowSel::Known(v) => {
                w.u8(0);
                w.u8(v)
            }
            FlowSel::Small(v) => {
                w.u8(1);
                w.u8(v)
            }
            FlowSel::Raw(v) => {
                w.u8(2);
                w.u64(v)
            }
            FlowSel::New => w.u8(3),
        }
    }
}

/// Where a data frame starts, relative to what the peer sent on the flow so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OffSel {
    /// In order.
    Next,
    /// Past a gap (out of order).
    Gap(u16),
    /// Overlapping what was sent (a duplicate or reinjection).
    Back(u16),
    Raw32(u32),
    Raw(u64),
}

impl OffSel {
    fn read(c: &mut Cursor<'_>) -> Self {
        match c.u8() % 5 {
            0 => OffSel::Next,
            1 => OffSel::Gap(c.u16()),
            2 => OffSel::Back(c.u16()),
            3 => OffSel::Raw32(c.u32()),
            _ => OffSel::Raw(c.u64()),
        }
    }
    fn write(&self, w: &mut Writer) {
        match *self {
            OffSel::Next => w.u8(0),
            OffSel::Gap(v) => {
                w.u8(1);
                w.u16(v)
            }
            OffSel::Back(v) => {
                w.u8(2);
                w.u16(v)
            }
            OffSel::Raw32(v) => {
                w.u8(3);
                w.u32(v)
            }
            OffSel::Raw(v) => {
                w.u8(4);
                w.u64(v)
            }
        }
    }
}

/// A sequence number relative to a base the harness knows: for an Ack, what the shell sent on
/// the flow; for a Credit, that plus the initial credit; for a CtrlAck, one past the highest
/// control sequence number the session wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeqSel {
    Base,
    BasePlusOne,
    Behind(u16),
    Ahead(u16),
    Raw(u64),
}

impl SeqSel {
    fn read(c: &mut Cursor<'_>) -> Self {
        match c.u8() % 5 {
            0 => SeqSel::Base,
            1 => SeqSel::BasePlusOne,
            2 => SeqSel::Behind(c.u16()),
            3 => SeqSel::Ahead(c.u16()),
            _ => SeqSel::Raw(c.u64()),
        }
    }
    fn write(&self, w: &mut Writer) {
        match *self {
            SeqSel::Base => w.u8(0),
            SeqSel::BasePlusOne => w.u8(1),
            SeqSel::Behind(v) => {
                w.u8(2);
                w.u16(v)
            }
            SeqSel::Ahead(v) => {
                w.u8(3);
                w.u16(v)
            }
            SeqSel::Raw(v) => {
                w.u8(4);
                w.u64(v)
            }
        }
    }
    pub(super) fn resolve(&self, base: u64, unit: u64) -> u64 {
        match *self {
            SeqSel::Base => base,
            SeqSel::BasePlusOne => base.saturating_add(1),
            SeqSel::Behind(k) => base.saturating_sub(u64::from(k) * unit),
            SeqSel::Ahead(k) => base.saturating_add(u64::from(k) * unit),
            SeqSel::Raw(v) => v,
        }
    }
}

/// A destination: `tag % 3` is IPv4, IPv6 or a host name of `len` characters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DstSel {
    pub tag: u8,
    pub a: u8,
    pub port: u16,
}

impl DstSel {
    fn read(c: &mut Cursor<'_>) -> Self {
        DstSel {
            tag: c.u8(),
            a: c.u8(),
            port: c.u16(),
        }
    }
    fn write(&self, w: &mut Writer) {
        w.u8(self.tag);
        w.u8(self.a);
        w.u16(self.port);
    }
    pub(super) fn dst(&self) -> Destination {
        match self.tag % 3 {
            0 => Destination::Addr(SocketAddr::from(([192, 0, 2, self.a], self.port))),
            1 => Destination::Addr(SocketAddr::new(
                IpAddr::V6(Ipv6Addr::new(
                    0x2001,
                    0xdb8,
                    0,
                    0,
                    0,
                    0,
                    0,
                    u16::from(self.a),
                )),
                self.port,
            )),
            _ => {
                let len = usize::from(self.a).max(1);
                Destination::Name(HOST_NAME[..len].to_string(), self.port)
            }
        }
    }
}

/// 255 bytes of host name (labels of seven letters).
const HOST_NAME: &str = "abcdefg.hijklmn.opqrstu.vwxyzab.cdefghi.jklmnop.qrstuvw.xyzabcd.\
efghijk.lmnopqr.stuvwxy.zabcdef.ghijklm.nopqrst.uvwxyza.bcdefgh.ijklmno.pqrstuv.wxyzabc.\
defghij.klmnopq.rstuvwx.yzabcde.fghijkl.mnopqrs.tuvwxyz.abcdefg.hijklmn.opqrstu.vwxyzab.\
cdefghi.jklmnop.q";

/// A passenger address: bit 7 picks IPv6.
pub(super) fn user(sel: u8) -> IpAddr {
    if sel & 0x80 != 0 {
        IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, u16::from(sel)))
    } else {
        IpAddr::V4(Ipv4Addr::new(10, 0, 1, sel))
    }
}

/// Data length: `tag % 4` is empty, up to 255, up to 65535, or the 64 KiB maximum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LenSel {
    pub tag: u8,
    pub raw: u16,
}

impl LenSel {
    pub fn bytes(n: u16) -> Self {
        LenSel { tag: 2, raw: n }
    }
    fn read(c: &mut Cursor<'_>) -> Self {
        let tag = c.u8();
        let raw = match tag % 4 {
            1 => u16::from(c.u8()),
            2 => c.u16(),
            _ => 0,
        };
        LenSel { tag, raw }
    }
    fn write(&self, w: &mut Writer) {
        w.u8(self.tag);
        match self.tag % 4 {
            1 => w.u8(self.raw as u8),
            2 => w.u16(self.raw),
            _ => {}
        }
    }
    pub(super) fn len(&self) -> usize {
        match self.tag % 4 {
            0 => 0,
            1 => usize::from(self.raw as u8),
            2 => usize::from(self.raw),
            _ => 64 * 1024,
        }
    }
}

/// The peer's Hello on a new subflow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HelloSpec {
    /// 0: this build's version, 1: 2, 2: 3, 3: `raw_version`.
    pub version: u8,
    pub raw_version: u16,
    /// Bit 0: claim the wrong role; bit 1: another session id; bit 2: this end's Hello carried
    /// its previous epoch (a subflow opened before a renewal).
    pub flags: u8,
    /// 0: the peer's current epoch, 1: a new one (a restarted peer), 2: the previous one,
    /// 3: `raw_epoch`.
    pub epoch: u8,
    pub raw_epoch: u64,
    /// Path name length (0: none).
    pub name_len: u8,
}

impl HelloSpec {
    pub const PLAIN: HelloSpec = HelloSpec {
        version: 0,
        raw_version: 0,
        flags: 0,
        epoch: 0,
        raw_epoch: 0,
        name_len: 0,
    };
    fn read(c: &mut Cursor<'_>) -> Self {
        let version = c.u8() % 4;
        let raw_version = if version == 3 { c.u16() } else { 0 };
        let flags = c.u8();
        let epoch = c.u8() % 4;
        let raw_epoch = if epoch == 3 { c.u64() } else { 0 };
        HelloSpec {
            version,
            raw_version,
            flags,
            epoch,
            raw_epoch,
            name_len: c.u8(),
        }
    }
    fn write(&self, w: &mut Writer) {
        w.u8(self.version);
        if self.version % 4 == 3 {
            w.u16(self.raw_version);
        }
        w.u8(self.flags);
        w.u8(self.epoch);
        if self.epoch % 4 == 3 {
            w.u64(self.raw_epoch);
        }
        w.u8(self.name_len);
    }
}

/// A frame the peer sends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FrameSpec {
    /// A second Hello on a running subflow (a protocol error).
    Hello(HelloSpec),
    OpenFlow {
        cseq: CseqSel,
        flow: FlowSel,
        user: u8,
        dst: DstSel,
    },
    OpenResult {
        cseq: CseqSel,
        flow: FlowSel,
        status: u8,
    },
    Data {
        flow: FlowSel,
        off: OffSel,
        fin: bool,
        len: LenSel,
    },
    Reset {
        cseq: CseqSel,
        flow: FlowSel,
        reason: u8,
    },
    Ack {
        flow: FlowSel,
        next: SeqSel,
    },
    Credit {
        flow: FlowSel,
        limit: SeqSel,
    },
    /// Train context; the u16 fields map onto valid ranges, `cells` is the count.
    Context {
        unix_ms: u64,
        lat: u16,
        lon: u16,
        speed: u16,
        heading: u16,
        cells: u8,
        seed: u8,
    },
    /// A probe; `sent_us` is how far before now it says it was sent.
    Ping {
        id: u32,
        sent_us: SeqSel,
    },
    /// An answer: with `answer`, to the session's last probe on the path; else with raw values.
    Pong {
        answer: bool,
        id: u32,
        ping_sent_us: u64,
        received_us: u64,
    },
    PathStatus {
        path: u8,
        up: u8,
    },
    CtrlAck {
        next: SeqSel,
    },
    Close {
        reason: u8,
        len: u16,
    },
    Refresh {
        path: u8,
        ssthresh: u32,
    },
}

impl FrameSpec {
    fn read(c: &mut Cursor<'_>) -> Self {
        match c.u8() % 16 {
            0 => FrameSpec::Hello(HelloSpec::read(c)),
            1 => FrameSpec::OpenFlow {
                cseq: CseqSel::read(c),
                flow: FlowSel::read(c),
                user: c.u8(),
                dst: DstSel::read(c),
            },
            2 => FrameSpec::OpenResult {
                cseq: CseqSel::read(c),
                flow: FlowSel::read(c),
                status: c.u8(),
            },
            3 | 14 | 15 => FrameSpec::Data {
                flow: FlowSel::read(c),
                off: OffSel::read(c),
                fin: c.u8() & 1 != 0,
                len: LenSel::read(c),
            },
            4 => FrameSpec::Reset {
                cseq: CseqSel::read(c),
                flow: FlowSel::read(c),
                reason: c.u8(),
            },
            5 => FrameSpec::Ack {
                flow: FlowSel::read(c),
                next: SeqSel::read(c),
            },
            6 => FrameSpec::Credit {
                flow: FlowSel::read(c),
                limit: SeqSel::read(c),
            },
            7 => FrameSpec::Context {
                unix_ms: c.u64(),
                lat: c.u16(),
                lon: c.u16(),
                speed: c.u16(),
                heading: c.u16(),
                cells: c.u8(),
                seed: c.u8(),
            },
            8 => FrameSpec::Ping {
                id: c.u32(),
                sent_us: SeqSel::read(c),
            },
            9 => {
                let answer = c.u8() & 1 != 0;
                if answer {
                    FrameSpec::Pong {
                        answer,
                        id: 0,
                        ping_sent_us: 0,
                        received_us: c.u64(),
                    }
                } else {
                    FrameSpec::Pong {
                        answer,
                        id: c.u32(),
                        ping_sent_us: c.u64(),
                        received_us: c.u64(),
                    }
                }
            }
            10 => FrameSpec::PathStatus {
                path: c.u8(),
                up: c.u8(),
            },
            11 => FrameSpec::CtrlAck {
                next: SeqSel::read(c),
            },
            12 => FrameSpec::Close {
                reason: c.u8(),
                len: c.u16(),
            },
            _ => FrameSpec::Refresh {
                path: c.u8(),
                ssthresh: c.u32(),
            },
        }
    }

    fn write(&self, w: &mut Writer) {
        match self {
            FrameSpec::Hello(h) => {
                w.u8(0);
                h.write(w)
            }
            FrameSpec::OpenFlow {
                cseq,
                flow,
                user,
                dst,
            } => {
                w.u8(1);
                cseq.write(w);
                flow.write(w);
                w.u8(*user);
                dst.write(w)
            }
            FrameSpec::OpenResult { cseq, flow, status } => {
                w.u8(2);
                cseq.write(w);
                flow.write(w);
                w.u8(*status)
            }
            FrameSpec::Data {
                flow,
                off,
                fin,
                len,
            } => {
                w.u8(3);
                flow.write(w);
                off.write(w);
                w.u8(u8::from(*fin));
                len.write(w)
            }
            FrameSpec::Reset { cseq, flow, reason } => {
                w.u8(4);
                cseq.write(w);
                flow.write(w);
                w.u8(*reason)
            }
            FrameSpec::Ack { flow, next } => {
                w.u8(5);
                flow.write(w);
                next.write(w)
            }
            FrameSpec::Credit { flow, limit } => {
                w.u8(6);
                flow.write(w);
                limit.write(w)
            }
            FrameSpec::Context {
                unix_ms,
                lat,
                lon,
                speed,
                heading,
                cells,
                seed,
            } => {
                w.u8(7);
                w.u64(*unix_ms);
                w.u16(*lat);
                w.u16(*lon);
                w.u16(*speed);
                w.u16(*heading);
                w.u8(*cells);
                w.u8(*seed)
            }
            FrameSpec::Ping { id, sent_us } => {
                w.u8(8);
                w.u32(*id);
                sent_us.write(w)
            }
            FrameSpec::Pong {
                answer,
                id,
                ping_sent_us,
                received_us,
            } => {
                w.u8(9);
                w.u8(u8::from(*answer));
                if !*answer {
                    w.u32(*id);
                    w.u64(*ping_sent_us);
                }
                w.u64(*received_us)
            }
            FrameSpec::PathStatus { path, up } => {
                w.u8(10);
                w.u8(*path);
                w.u8(*up)
            }
            FrameSpec::CtrlAck { next } => {
                w.u8(11);
                next.write(w)
            }
            FrameSpec::Close { reason, len } => {
                w.u8(12);
                w.u8(*reason);
                w.u16(*len)
            }
            FrameSpec::Refresh { path, ssthresh } => {
                w.u8(13);
                w.u8(*path);
                w.u32(*ssthresh)
            }
        }
    }
}

/// Something the shell, the clock or the peer does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// The peer sends a frame on `path` (connecting the path first if it has no subflow),
    /// `dt` after the previous operation.
    Frame { path: u8, dt: Dt, frame: FrameSpec },
    /// The same frame `2^exp + plus` times (at most [`MAX_BURST`] frames and about
    /// [`MAX_BURST_BYTES`]); each repetition picks its sequence numbers, flow and offset again
    /// (the next ones), raw ones step by `stride`.
    Burst {
        path: u8,
        dt: Dt,
        exp: u8,
        plus: u8,
        stride: u8,
        frame: FrameSpec,
    },
    /// The peer writes these bytes on `path` (decoded as the engine decodes a subflow).
    Raw { path: u8, bytes: Vec<u8> },
    /// Time passes; the session runs its timers.
    Advance(Dt),
    /// The shell's timer fires at [`Session::poll_timeout`].
    Timer,
    /// `path`'s subflow dies.
    Detach { path: u8 },
    /// A new subflow on `path`: the Hello exchange, then attach as the engine does.
    Connect { path: u8, hello: HelloSpec },
    /// A `TCP_INFO` reading of `path`'s subflow (srtt ms, cwnd KiB, unacked KiB, rto backoff,
    /// delivery rate Mbit/s).
    TcpInfo {
        path: u8,
        srtt_ms: u8,
        cwnd_kib: u8,
        unacked_kib: u8,
        backoff: u8,
        rate: u8,
    },
    /// (proxy) The shell answers a requested flow (by index): `how % 8` < 5 accepts, else
    /// refuses. (relay) The shell opens a flow for passenger `user(how)` to `dst`.
    Answer { idx: u8, how: u8, dst: DstSel },
    /// The shell queues bytes of a flow (and its FIN).
    Send {
        flow: FlowSel,
        len: LenSel,
        fin: bool,
    },
    /// The shell reads up to `len` bytes of a flow.
    Read { flow: FlowSel, len: u16 },
    /// The shell resets a flow.
    ResetFlow { flow: FlowSel, reason: u8 },
    /// The peer stops (or resumes) reading `path`'s subflow: its output piles up in the shell.
    PeerReading { path: u8, on: bool },
    /// Close, drain announcement, epoch renewal, ending, refresh request, context, path
    /// status, wall clock, reorder waits (`kind % 9`).
    Misc { kind: u8, arg: u64 },
}

impl Op {
    pub fn read(c: &mut Cursor<'_>) -> Self {
        match c.u8() % 16 {
            0 | 15 => Op::Frame {
                path: c.u8(),
                dt: Dt::read(c),
                frame: FrameSpec::read(c),
            },
            1 => Op::Burst {
                path: c.u8(),
                dt: Dt::read(c),
                exp: c.u8(),
                plus: c.u8(),
                stride: c.u8(),
                frame: FrameSpec::read(c),
            },
            2 => {
                let path = c.u8();
                let n = usize::from(c.u16() % 1024);
                Op::Raw {
                    path,
                    bytes: c.bytes(n).to_vec(),
                }
            }
            3 => Op::Advance(Dt::read(c)),
            4 => Op::Timer,
            5 => Op::Detach { path: c.u8() },
            6 => Op::Connect {
                path: c.u8(),
                hello: HelloSpec::read(c),
            },
            7 => Op::TcpInfo {
                path: c.u8(),
                srtt_ms: c.u8(),
                cwnd_kib: c.u8(),
                unacked_kib: c.u8(),
                backoff: c.u8(),
                rate: c.u8(),
            },
            8 => Op::Answer {
                idx: c.u8(),
                how: c.u8(),
                dst: DstSel::read(c),
            },
            9 => Op::Send {
                flow: FlowSel::read(c),
                len: LenSel::read(c),
                fin: c.u8() & 1 != 0,
            },
            10 => Op::Read {
                flow: FlowSel::read(c),
                len: c.u16(),
            },
            11 => Op::ResetFlow {
                flow: FlowSel::read(c),
                reason: c.u8(),
            },
            12 => Op::PeerReading {
                path: c.u8(),
                on: c.u8() & 1 != 0,
            },
            13 => Op::Misc {
                kind: c.u8(),
                arg: c.u64(),
            },
            _ => Op::Frame {
                path: c.u8(),
                dt: Dt::ZERO,
                frame: FrameSpec::read(c),
            },
        }
    }

    pub fn write(&self, w: &mut Writer) {
        match self {
            Op::Frame { path, dt, frame } => {
                w.u8(0);
                w.u8(*path);
                dt.write(w);
                frame.write(w)
            }
            Op::Burst {
                path,
                dt,
                exp,
                plus,
                stride,
                frame,
            } => {
                w.u8(1);
                w.u8(*path);
                dt.write(w);
                w.u8(*exp);
                w.u8(*plus);
                w.u8(*stride);
                frame.write(w)
            }
            Op::Raw { path, bytes } => {
                w.u8(2);
                w.u8(*path);
                w.u16(bytes.len().min(1023) as u16);
                w.bytes(&bytes[..bytes.len().min(1023)])
            }
            Op::Advance(dt) => {
                w.u8(3);
                dt.write(w)
            }
            Op::Timer => w.u8(4),
            Op::Detach { path } => {
                w.u8(5);
                w.u8(*path)
            }
            Op::Connect { path, hello } => {
                w.u8(6);
                w.u8(*path);
                hello.write(w)
            }
            Op::TcpInfo {
                path,
                srtt_ms,
                cwnd_kib,
                unacked_kib,
                backoff,
                rate,
            } => {
                w.u8(7);
                for b in [*path, *srtt_ms, *cwnd_kib, *unacked_kib, *backoff, *rate] {
                    w.u8(b)
                }
            }
            Op::Answer { idx, how, dst } => {
                w.u8(8);
                w.u8(*idx);
                w.u8(*how);
                dst.write(w)
            }
            Op::Send { flow, len, fin } => {
                w.u8(9);
                flow.write(w);
                len.write(w);
                w.u8(u8::from(*fin))
            }
            Op::Read { flow, len } => {
                w.u8(10);
                flow.write(w);
                w.u16(*len)
            }
            Op::ResetFlow { flow, reason } => {
                w.u8(11);
                flow.write(w);
                w.u8(*reason)
            }
            Op::PeerReading { path, on } => {
                w.u8(12);
                w.u8(*path);
                w.u8(u8::from(*on))
            }
            Op::Misc { kind, arg } => {
                w.u8(13);
                w.u8(*kind);
                w.u64(*arg)
            }
        }
    }
}

/// Header bits (see the module documentation).
pub mod flags {
    pub const RELAY: u8 = 1;
    pub const SMALL_LIMITS: u8 = 2;
    pub const PIPELINE_SHIFT: u8 = 2;
    pub const AUTO_ACCEPT: u8 = 16;
    pub const AUTO_READ: u8 = 32;
    pub const NO_INITIAL_SUBFLOWS: u8 = 64;
    pub const WALL_CLOCK: u8 = 128;
}

/// An input: header byte and operations.
pub fn encode(header: u8, ops: &[Op]) -> Vec<u8> {
    let mut w = Writer::default();
    w.u8(header);
    for op in ops {
        op.write(&mut w);
    }
    w.0
}
