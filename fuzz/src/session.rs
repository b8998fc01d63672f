//! The `session` target: a [`Session`] (proxy role unless the input says relay) driven the way
//! `polycorn-net`'s engine drives it, while a hostile but authenticated peer sends it whatever
//! frames it likes on its subflows, reconnects, and stops reading.
//!
//! # Input
//! One header byte, then operations until the input ends ([`Op`]). Fields past the end read as
//! zero. Header bits: 0 relay role (else proxy); 1 small limits (16 flows, 64 KiB windows,
//! a 3 MiB session buffer);
//! 2–3 scheduler pipeline; 4 the shell accepts every requested flow at once; 5 the shell reads
//! every readable flow at once; 6 no subflow at the start (else paths 0 and 1 connect);
//! 7 the wall clock is set.
//!
//! Frames are described, not written out ([`FrameSpec`]): flow ids, offsets, control sequence
//! numbers and acknowledgements are picked relative to what the harness has seen (the next
//! offset of a flow, the highest control sequence in the session's output, the last probe on a
//! path), so that few input bytes reach deep states. Each frame is encoded, decoded again (it
//! must come back equal) and fed to [`Session::on_frame`] as the engine feeds it; a frame that
//! does not decode, or that the session refuses, ends its subflow as it does in the engine.
//!
//! # What is checked
//! * nothing panics (an integer overflow included: the fuzz build has overflow checks);
//! * everything the session writes decodes as a stream of valid frames;
//! * [`Session::buffered_bytes`] stays within `session_buffer` (3 MiB with small limits), and
//!   its accounting agrees with the flows (the session checks that itself in a build with
//!   debug assertions, as the fuzz build is);
//! * the heap the session holds, outside what the harness took as output, stays below
//!   [`STATE_PER_BYTE`] × the bytes the peer sent (frames as on the wire) + 2 × the shell's
//!   (bytes queued with [`Session::send`], plus an allowance per flow it opens, answer or
//!   reset and per frame it queues itself) + the empty capacity its output buffers may keep
//!   (14 × the largest output taken from a path at once) + [`STATE_SLACK`] after every
//!   operation, however much time passes;
//! * output for a path whose peer does not read ([`Op::PeerReading`]) stays below
//!   [`BACKLOG_PER_BYTE`] × the bytes the peer sent + 4 × the shell's + [`BACKLOG_SLACK`] (set
//!   `POLYCORN_FUZZ_BACKLOG=off` to skip this check);
//! * at the end, with every subflow gone and the session ended
//!   ([`Session::end_if_all_paths_down`]), no flow is left and the heap it holds is below
//!   [`FINAL_PER_BYTE`] × the non-payload bytes the peer sent + the capacity its output buffers
//!   keep (as above) + [`FINAL_SLACK`]: no received or queued payload survives its flow.
//!
//! The heap is measured with [`crate::alloc::Counting`], which the target installs as its
//! global allocator.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use polycorn_proto::frame::{decode, MAX_CLOSE_MESSAGE, MAX_CONTEXT_CELLS};
use polycorn_proto::session::INITIAL_CREDIT;
use polycorn_proto::{
    CellInfo, CloseReason, ContextInfo, Destination, Event, Frame, HelloOutcome, OpenStatus,
    ReadOutcome, ResetReason, Role, Session, SessionConfig, SESSION_PATH, VERSION,
};
use polycorn_sched::path::TcpInfoSample;
use polycorn_sched::predict::NoPrediction;
use polycorn_sched::time::{Bandwidth, Duration, Instant};

use crate::alloc::live_bytes;
use crate::{Cursor, Writer};

/// Subflows (paths) the peer uses.
pub const PATHS: usize = 3;
/// Heap bytes the session may hold per byte the peer sent.
pub const STATE_PER_BYTE: i64 = 64;
/// Heap bytes the session may hold beyond that (its paths, scheduler state, first flows).
pub const STATE_SLACK: i64 = 512 * 1024;
/// Output bytes queued for a peer that does not read, per byte it sent.
pub const BACKLOG_PER_BYTE: i64 = 64;
/// Output bytes queued for a peer that does not read, beyond that.
pub const BACKLOG_SLACK: i64 = 256 * 1024;
/// Heap bytes an ended session may hold per non-payload byte the peer sent: what it remembers
/// (out-of-order control sequence numbers, closed flow ids, unacknowledged control frames) and
/// the capacity its tables keep at their high-water mark (a map of 1,024 flows keeps its room
/// after they end), but no payload.
pub const FINAL_PER_BYTE: i64 = STATE_PER_BYTE;
/// Heap bytes an ended session may hold beyond that.
pub const FINAL_SLACK: i64 = 256 * 1024;
/// Longest burst of repeated frames ([`Op::Burst`]).
pub const MAX_BURST: u32 = 70_000;
/// A burst also stops once it has sent this many bytes.
pub const MAX_BURST_BYTES: i64 = 4 << 20;
/// The clock stops here (about a year, in µs), far from any overflow.
const MAX_NOW_US: u64 = 1 << 45;
const SESSION_ID: u64 = 0x5e55_1011;
const PIPELINES: [&str; 4] = ["hrsch", "minrtt", "polycorn", "redundant"];
static ZEROS: [u8; 64 * 1024] = [0; 64 * 1024];

mod format;
use format::user;
pub use format::{
    encode, flags, CseqSel, DstSel, Dt, FlowSel, FrameSpec, HelloSpec, LenSel, OffSel, Op, SeqSel,
};

/// What the harness knows of a flow.
#[derive(Clone, Copy, Debug, Default)]
struct FlowTrack {
    /// Next offset the peer sends on it.
    peer_next: u64,
    /// Bytes the shell queued on it.
    local_sent: u64,
}

const MAX_KNOWN: usize = 256;
const MAX_TRACKED: usize = 1024;

struct Harness {
    s: Session,
    role: Role,
    peer_role: Role,
    now: Instant,
    auto_accept: bool,
    auto_read: bool,
    reading: [bool; PATHS],
    backlog: [Vec<u8>; PATHS],
    out: Vec<u8>,
    /// Where frames are encoded before they are decoded again and fed.
    wire: Vec<u8>,
    read_buf: Vec<u8>,
    known: Vec<u64>,
    requested: VecDeque<u64>,
    tracks: HashMap<u64, FlowTrack>,
    /// Flows the shell has a task for (requested of it, or opened by it).
    shell_flows: HashSet<u64>,
    peer_cseq: u64,
    last_cseq: u64,
    peer_new_flow: u64,
    peer_epoch: u64,
    last_ping: [Option<(u32, u64)>; PATHS],
    /// One past the highest control sequence number seen in the session's output.
    ctrl_seen: u64,
    /// Wire bytes the peer sent (frames, Hellos and raw bytes).
    fed: i64,
    /// Of those, data payload bytes.
    fed_payload: i64,
    /// Bytes the shell queued with `send`, and allowances for what else it asked the session
    /// to keep (flows it opened, answers, resets, frames it queued).
    local: i64,
    baseline: isize,
    backlog_check: bool,
    /// The most output taken from a path at once. The session's output buffers (two per path)
    /// keep their capacity when emptied, and every take trades the harness's buffer for one of
    /// them, so each may hold up to twice this (a reattached path, for one, is given everything
    /// in flight again).
    max_take: usize,
}

fn read_unannounced() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("POLYCORN_FUZZ_READ_UNANNOUNCED").is_some())
}

fn backlog_check_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("POLYCORN_FUZZ_BACKLOG").map_or(true, |v| v != "off"))
}

impl Harness {
    fn new(header: u8) -> Harness {
        let role = if header & flags::RELAY != 0 {
            Role::Relay
        } else {
            Role::Proxy
        };
        let pipeline = PIPELINES[usize::from((header >> flags::PIPELINE_SHIFT) & 3)];
        let mut cfg = SessionConfig::new(role, SESSION_ID, pipeline);
        cfg.epoch = 0x1000;
        if header & flags::SMALL_LIMITS != 0 {
            cfg.max_flows = 16;
            cfg.flow_window = 64 * 1024;
            cfg.user_window = 128 * 1024;
            // Room for a few flows: the budget, not max_flows, turns the next ones away.
            cfg.session_buffer = 3 << 20;
        }
        let mut s = Session::new(cfg).expect("preset pipelines parse");
        if header & flags::WALL_CLOCK != 0 {
            s.set_wall_clock(Instant::ZERO, 1_700_000_000_000_000);
        }
        let peer_role = match role {
            Role::Proxy => Role::Relay,
            Role::Relay => Role::Proxy,
        };
        let mut h = Harness {
            s,
            role,
            peer_role,
            now: Instant::ZERO,
            auto_accept: header & flags::AUTO_ACCEPT != 0,
            auto_read: header & flags::AUTO_READ != 0,
            reading: [true; PATHS],
            backlog: Default::default(),
            out: Vec::new(),
            wire: Vec::new(),
            read_buf: vec![0; 64 * 1024],
            known: Vec::with_capacity(MAX_KNOWN),
            requested: VecDeque::with_capacity(MAX_KNOWN),
            tracks: HashMap::with_capacity(2 * MAX_TRACKED),
            shell_flows: HashSet::with_capacity(2 * MAX_TRACKED),
            peer_cseq: 0,
            last_cseq: 0,
            peer_new_flow: 1,
            peer_epoch: 7,
            last_ping: [None; PATHS],
            ctrl_seen: 0,
            fed: 0,
            fed_payload: 0,
            local: 0,
            baseline: 0,
            backlog_check: backlog_check_enabled(),
            max_take: 0,
        };
        h.baseline = live_bytes();
        if header & flags::NO_INITIAL_SUBFLOWS == 0 {
            h.connect(0, HelloSpec::PLAIN);
            h.connect(1, HelloSpec::PLAIN);
            h.drive();
        }
        h
    }

    fn advance(&mut self, dt: Dt) {
        let us = dt.millis().saturating_mul(1000);
        self.now = Instant::from_micros(self.now.as_micros().saturating_add(us).min(MAX_NOW_US));
    }

    fn path(p: u8) -> u8 {
        p % PATHS as u8
    }

    fn remember(&mut self, flow: u64) {
        if !self.known.contains(&flow) {
            if self.known.len() == MAX_KNOWN {
                self.known.remove(0);
            }
            self.known.push(flow);
        }
    }

    fn track(&mut self, flow: u64) -> FlowTrack {
        self.tracks.get(&flow).copied().unwrap_or_default()
    }

    fn set_track(&mut self, flow: u64, t: FlowTrack) {
        if self.tracks.len() < MAX_TRACKED || self.tracks.contains_key(&flow) {
            self.tracks.insert(flow, t);
        }
    }

    fn flow(&mut self, sel: FlowSel, k: u64, stride: u64) -> u64 {
        match sel {
            FlowSel::Known(i) => {
                if self.known.is_empty() {
                    1
                } else {
                    self.known[(usize::from(i) + k as usize) % self.known.len()]
                }
            }
            FlowSel::Small(v) => u64::from(v).wrapping_add(k.wrapping_mul(stride)),
            FlowSel::Raw(v) => v.wrapping_add(k.wrapping_mul(stride)),
            FlowSel::New => {
                let f = self.peer_new_flow;
                self.peer_new_flow += 1;
                f
            }
        }
    }

    fn cseq(&mut self, sel: CseqSel, k: u64, stride: u64) -> u64 {
        let c = match sel {
            CseqSel::Next => {
                let c = self.peer_cseq;
                self.peer_cseq += 1;
                c
            }
            CseqSel::Repeat => self.last_cseq,
            CseqSel::Ahead(d) => self.peer_cseq + 1 + u64::from(d) + k * stride.max(1),
            CseqSel::Raw(v) => v.wrapping_add(k.wrapping_mul(stride)),
        };
        self.last_cseq = c;
        c
    }

    /// Build the frame a spec describes; `k` is the repetition of a burst.
    fn build(&mut self, spec: &FrameSpec, path: u8, k: u64, stride: u64) -> Frame<'static> {
        match *spec {
            FrameSpec::Hello(h) => self.hello_frame(path, h),
            FrameSpec::OpenFlow {
                cseq,
                flow,
                user: u,
                dst,
            } => {
                let cseq = self.cseq(cseq, k, stride);
                let flow = self.flow(flow, k, stride);
                if k < 8 {
                    self.remember(flow);
                }
                Frame::OpenFlow {
                    cseq,
                    flow,
                    user: user(u.wrapping_add(k as u8)),
                    dst: dst.dst(),
                }
            }
            FrameSpec::OpenResult { cseq, flow, status } => {
                let cseq = self.cseq(cseq, k, stride);
                let flow = self.flow(flow, k, stride);
                let status = match status % 6 {
                    0 => OpenStatus::Ok,
                    1 => OpenStatus::Refused,
                    2 => OpenStatus::Unreachable,
                    3 => OpenStatus::Denied,
                    4 => OpenStatus::NameError,
                    _ => OpenStatus::Failed,
                };
                Frame::OpenResult { cseq, flow, status }
            }
            FrameSpec::Data {
                flow,
                off,
                fin,
                len,
            } => {
                let flow = self.flow(flow, k, stride);
                if k < 8 {
                    self.remember(flow);
                }
                let mut t = self.track(flow);
                let len = len.len();
                let offset = match off {
                    OffSel::Next => t.peer_next,
                    OffSel::Gap(g) => t.peer_next.saturating_add(1 + u64::from(g)),
                    OffSel::Back(b) => t.peer_next.saturating_sub(u64::from(b)),
                    OffSel::Raw32(v) => u64::from(v).wrapping_add(k.wrapping_mul(stride)),
                    OffSel::Raw(v) => v.wrapping_add(k.wrapping_mul(stride)),
                };
                t.peer_next = t.peer_next.max(offset.saturating_add(len as u64));
                self.set_track(flow, t);
                Frame::Data {
                    flow,
                    offset,
                    fin,
                    data: &ZEROS[..len],
                }
            }
            FrameSpec::Reset { cseq, flow, reason } => {
                let cseq = self.cseq(cseq, k, stride);
                let flow = self.flow(flow, k, stride);
                Frame::Reset {
                    cseq,
                    flow,
                    reason: reset_reason(reason),
                }
            }
            FrameSpec::Ack { flow, next } => {
                let flow = self.flow(flow, k, stride);
                let base = self.track(flow).local_sent;
                Frame::Ack {
                    flow,
                    next: next.resolve(base, 1),
                }
            }
            FrameSpec::Credit { flow, limit } => {
                let flow = self.flow(flow, k, stride);
                let base = self.track(flow).local_sent + INITIAL_CREDIT;
                Frame::Credit {
                    flow,
                    limit: limit.resolve(base, 1024),
                }
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
                let n = usize::from(cells) % (MAX_CONTEXT_CELLS + 1);
                let cells = (0..n)
                    .map(|i| {
                        let x = seed.wrapping_add(i as u8);
                        CellInfo {
                            path: x % 4,
                            cell: (x & 4 != 0).then_some(u64::from(x) * 1_000_003),
                            rsrp_dbm: (x & 8 != 0).then_some(-140.0 + f32::from(x % 100)),
                        }
                    })
                    .collect();
                Frame::Context(ContextInfo {
                    unix_ms,
                    lat: f64::from(lat) / 65535.0 * 180.0 - 90.0,
                    lon: f64::from(lon) / 65535.0 * 360.0 - 180.0,
                    speed_mps: f32::from(speed) / 100.0,
                    heading_deg: f32::from(heading) / 100.0,
                    cells,
                })
            }
            FrameSpec::Ping { id, sent_us } => Frame::Ping {
                id,
                sent_us: sent_us.resolve(self.now.as_micros(), 1000),
            },
            FrameSpec::Pong {
                answer,
                id,
                ping_sent_us,
                received_us,
            } => {
                let (id, ping_sent_us) = match self.last_ping[usize::from(path)] {
                    Some(p) if answer => p,
                    _ => (id, ping_sent_us),
                };
                Frame::Pong {
                    id,
                    ping_sent_us,
                    received_us,
                }
            }
            FrameSpec::PathStatus { path: p, up } => Frame::PathStatus {
                path: if up & 2 != 0 { SESSION_PATH } else { p },
                up: up & 1 != 0,
            },
            FrameSpec::CtrlAck { next } => Frame::CtrlAck {
                next: next.resolve(self.ctrl_seen, 1),
            },
            FrameSpec::Close { reason, len } => {
                let len = usize::from(len) % (MAX_CLOSE_MESSAGE + 1);
                Frame::Close {
                    reason: close_reason(reason),
                    message: "x".repeat(len),
                }
            }
            FrameSpec::Refresh { path, ssthresh } => Frame::Refresh { path, ssthresh },
        }
    }

    fn hello_frame(&self, path: u8, h: HelloSpec) -> Frame<'static> {
        let version = match h.version % 4 {
            0 => VERSION,
            1 => 2,
            2 => 3,
            _ => h.raw_version,
        };
        let epoch = match h.epoch % 4 {
            0 => self.peer_epoch,
            1 => self.peer_epoch.wrapping_add(1 << 40),
            2 => self.peer_epoch.wrapping_sub(1),
            _ => h.raw_epoch,
        };
        let role = if h.flags & 1 != 0 {
            self.role
        } else {
            self.peer_role
        };
        let name_len = usize::from(h.name_len) % 33;
        Frame::Hello {
            version,
            role,
            session: if h.flags & 2 != 0 {
                SESSION_ID ^ 1
            } else {
                SESSION_ID
            },
            path,
            epoch,
            name: (name_len > 0).then(|| "p-0._".repeat(7)[..name_len].to_string()),
        }
    }

    /// A new subflow on `path`: the engine's Hello exchange and attach.
    fn connect(&mut self, path: u8, h: HelloSpec) {
        let bytes = self.hello_frame(path, h).to_vec();
        self.fed += bytes.len() as i64;
        let frame = match decode(&bytes) {
            Ok(Some((f, n))) => {
                assert_eq!(n, bytes.len());
                f
            }
            // A Hello the peer cannot send (e.g. an empty name): the subflow fails.
            _ => return,
        };
        let Ok(peer) = Session::check_hello(self.role, &frame) else {
            return;
        };
        if peer.session != SESSION_ID {
            return; // another session's subflow
        }
        let ours = if h.flags & 4 != 0 {
            self.s.epoch().wrapping_sub(1)
        } else {
            self.s.epoch()
        };
        match self.s.on_peer_hello(self.now, ours, peer.epoch) {
            HelloOutcome::Attach | HelloOutcome::PeerRestarted => {}
            HelloOutcome::Renewed | HelloOutcome::Stale | HelloOutcome::Elsewhere => return,
        }
        if peer.epoch != self.peer_epoch {
            // A new peer numbers its control frames and flows afresh.
            self.peer_epoch = peer.epoch;
            self.peer_cseq = 0;
            self.peer_new_flow = 1;
            self.ctrl_seen = 0;
        }
        if self.s.path_attached(path) {
            let _ = self.s.detach_path(self.now, path);
        }
        self.backlog[usize::from(path)] = Vec::new();
        self.reading[usize::from(path)] = true;
        self.last_ping[usize::from(path)] = None;
        self.s.attach_path(self.now, path).expect("path in range");
        if self.role == Role::Proxy {
            self.s.set_peer_version(path, peer.version);
            self.s.set_path_name(path, peer.name);
        }
    }

    /// The subflow of `path` ends (closed, failed, or a protocol error).
    fn subflow_lost(&mut self, path: u8) {
        let _ = self.s.detach_path(self.now, path);
        self.backlog[usize::from(path)] = Vec::new();
    }

    /// Feed one frame as the engine does; returns whether the subflow lives on.
    fn feed(&mut self, path: u8, frame: Frame<'_>) -> bool {
        if !self.s.path_attached(path) {
            self.connect(path, HelloSpec::PLAIN);
            if !self.s.path_attached(path) {
                return false;
            }
        }
        // The encoding buffer is reused (taken out while the decoded frame borrows it).
        let mut wire = std::mem::take(&mut self.wire);
        wire.clear();
        frame.encode(&mut wire);
        self.fed += wire.len() as i64;
        if let Frame::Data { data, .. } = &frame {
            self.fed_payload += data.len() as i64;
        }
        let accepted = match decode(&wire) {
            Ok(Some((f, n))) => {
                assert_eq!(n, wire.len(), "decode used part of an encoded frame");
                assert_eq!(f, frame, "a frame changed through encode and decode");
                self.s.on_frame(self.now, path, f).is_ok()
            }
            Ok(None) => panic!("an encoded frame is incomplete: {frame:?}"),
            // A frame the encoder writes but the decoder refuses (a value out of range):
            // the engine ends the subflow.
            Err(_) => false,
        };
        self.wire = wire;
        if !accepted {
            self.subflow_lost(path);
        }
        accepted
    }

    /// Raw bytes on a subflow, decoded as the engine decodes them.
    fn feed_raw(&mut self, path: u8, bytes: &[u8]) {
        if !self.s.path_attached(path) {
            self.connect(path, HelloSpec::PLAIN);
            if !self.s.path_attached(path) {
                return;
            }
        }
        let mut used = 0;
        loop {
            match decode(&bytes[used..]) {
                Ok(Some((frame, n))) => {
                    self.fed += n as i64;
                    if let Frame::Data { data, .. } = &frame {
                        self.fed_payload += data.len() as i64;
                    }
                    if self.s.on_frame(self.now, path, frame).is_err() {
                        self.subflow_lost(path);
                        return;
                    }
                    used += n;
                }
                Ok(None) => return,
                Err(_) => {
                    self.subflow_lost(path);
                    return;
                }
            }
        }
    }

    fn local_flow(&mut self, sel: FlowSel) -> u64 {
        match sel {
            FlowSel::New => {
                if self.known.is_empty() {
                    1
                } else {
                    *self.known.last().expect("not empty")
                }
            }
            other => self.flow(other, 0, 0),
        }
    }

    fn answer(&mut self, idx: u8, how: u8, dst: DstSel) {
        match self.role {
            Role::Proxy => {
                if self.requested.is_empty() {
                    return;
                }
                let i = usize::from(idx) % self.requested.len();
                let flow = self.requested.remove(i).expect("in range");
                // The answer is a control frame the session keeps until acknowledged.
                self.local += 128;
                let _ = if how % 8 < 5 {
                    self.s.accept_flow(self.now, flow)
                } else {
                    let status = match how % 8 {
                        5 => OpenStatus::Refused,
                        6 => OpenStatus::Unreachable,
                        _ => OpenStatus::Denied,
                    };
                    self.s.refuse_flow(self.now, flow, status)
                };
            }
            Role::Relay => {
                if let Ok(flow) = self.s.open_flow(self.now, user(how), dst.dst()) {
                    // A flow's state and its OpenFlow, kept until acknowledged.
                    self.local += 512 + 256;
                    self.remember(flow);
                    if self.shell_flows.len() < MAX_TRACKED {
                        self.shell_flows.insert(flow);
                    }
                }
            }
        }
    }

    fn send(&mut self, flow: u64, len: usize, fin: bool) {
        if let Ok(n) = self.s.send(self.now, flow, &ZEROS[..len]) {
            self.local += n as i64;
            let mut t = self.track(flow);
            t.local_sent += n as u64;
            self.set_track(flow, t);
        }
        if fin {
            let _ = self.s.send_fin(self.now, flow);
        }
    }

    /// Whether the shell reads `flow`: the engine has a task only for the flows it opened or
    /// was asked to connect, not for data of a flow the relay has not announced (unless
    /// `POLYCORN_FUZZ_READ_UNANNOUNCED` is set: then it reads whatever is readable).
    fn shell_reads(&self, flow: u64) -> bool {
        self.shell_flows.contains(&flow) || read_unannounced()
    }

    fn read(&mut self, flow: u64, len: usize) {
        if !self.shell_reads(flow) {
            return;
        }
        let len = len.min(self.read_buf.len());
        let _ = self.s.read(self.now, flow, &mut self.read_buf[..len]);
    }

    fn read_all(&mut self, flow: u64) {
        for _ in 0..10_000 {
            match self.s.read(self.now, flow, &mut self.read_buf) {
                ReadOutcome::Data(_) => {}
                ReadOutcome::WouldBlock | ReadOutcome::Eof => return,
            }
        }
        panic!("flow {flow} stays readable after 10,000 reads of 64 KiB");
    }

    fn misc(&mut self, kind: u8, arg: u64) {
        let now = self.now;
        // What this end queues on its own counts as the shell's bytes.
        self.local += 128;
        match kind % 9 {
            0 => {
                let message = "m".repeat((arg >> 8) as usize % 1100);
                self.local += message.len() as i64 * (1 + PATHS as i64);
                self.s.close(now, close_reason(arg as u8), &message)
            }
            1 => {
                let _ = self.s.announce_draining(now);
            }
            2 => {
                self.s.renew_epoch(now);
            }
            3 => {
                if self.s.end_if_all_paths_down(now) {
                    assert_eq!(self.s.open_flows(), 0, "flows left in an ended session");
                }
            }
            4 => {
                let _ = self
                    .s
                    .ask_refresh(now, Self::path(arg as u8), (arg >> 8) as u32);
            }
            5 => {
                let ctx = ContextInfo {
                    unix_ms: arg,
                    lat: 39.9,
                    lon: 116.4,
                    speed_mps: (arg % 120) as f32,
                    heading_deg: 90.0,
                    cells: vec![CellInfo {
                        path: 0,
                        cell: Some(arg >> 16),
                        rsrp_dbm: Some(-90.0),
                    }],
                };
                if self.role == Role::Relay {
                    self.s.send_context(now, &ctx);
                }
            }
            6 => self.s.send_path_status(now, arg as u8, arg & 0x100 != 0),
            7 => self
                .s
                .set_wall_clock(now, 1_700_000_000_000_000 + (arg % (1 << 50))),
            _ => {
                let mut waits = Vec::new();
                self.s.take_reorder_waits(&mut waits);
            }
        }
    }

    /// The engine's `drive`: run the session, collect its output and events.
    fn drive(&mut self) {
        self.s.poll_transmit(self.now, &NoPrediction);
        self.collect_output();
        while self.s.poll_sched_event().is_some() {}
        let mut guard = 0;
        while let Some(e) = self.s.poll_event() {
            if trace_enabled() {
                eprintln!("  event {e:?}");
            }
            guard += 1;
            assert!(guard < 10_000_000, "endless events");
            match e {
                Event::FlowRequested { flow, .. } => {
                    self.remember(flow);
                    if self.shell_flows.len() < MAX_TRACKED {
                        self.shell_flows.insert(flow);
                    }
                    if self.auto_accept {
                        let _ = self.s.accept_flow(self.now, flow);
                    } else if self.requested.len() < MAX_KNOWN {
                        self.requested.push_back(flow);
                    }
                }
                Event::Readable(flow) if self.auto_read && self.shell_reads(flow) => {
                    self.read_all(flow)
                }
                Event::FlowReset { flow, .. } | Event::FlowClosed(flow) => {
                    self.tracks.remove(&flow);
                    self.shell_flows.remove(&flow);
                }
                _ => {}
            }
        }
        if self.auto_accept || self.auto_read {
            // What the shell did in answer is output too.
            self.s.poll_transmit(self.now, &NoPrediction);
            self.collect_output();
        }
    }

    fn collect_output(&mut self) {
        for p in 0..PATHS as u8 {
            self.s.take_output(p, &mut self.out);
            if self.out.is_empty() {
                continue;
            }
            let out = std::mem::take(&mut self.out);
            self.max_take = self.max_take.max(out.len());
            self.inspect_output(p, &out);
            if self.s.path_attached(p) && !self.reading[usize::from(p)] {
                self.backlog[usize::from(p)].extend_from_slice(&out);
            }
            self.out = out;
        }
    }

    /// Everything the session writes must be valid frames, whole.
    fn inspect_output(&mut self, path: u8, mut buf: &[u8]) {
        while !buf.is_empty() {
            match decode(buf) {
                Ok(Some((frame, n))) => {
                    match frame {
                        Frame::Ping { id, sent_us } => {
                            self.last_ping[usize::from(path)] = Some((id, sent_us))
                        }
                        Frame::OpenFlow { cseq, .. }
                        | Frame::OpenResult { cseq, .. }
                        | Frame::Reset { cseq, .. } => {
                            self.ctrl_seen = self.ctrl_seen.max(cseq.saturating_add(1))
                        }
                        _ => {}
                    }
                    buf = &buf[n..];
                }
                Ok(None) => panic!(
                    "the session wrote an incomplete frame on path {path}: {:02x?}",
                    &buf[..buf.len().min(64)]
                ),
                Err(e) => panic!(
                    "the session wrote a frame its peer refuses on path {path}: {e}: {:02x?}",
                    &buf[..buf.len().min(64)]
                ),
            }
        }
    }

    fn held_by_harness(&self) -> isize {
        (self.out.capacity()
            + self.wire.capacity()
            + self.backlog.iter().map(Vec::capacity).sum::<usize>()) as isize
    }

    /// What the session's output buffers may hold as empty capacity: two buffers per path (and
    /// the harness's, which it trades with them), each up to twice the largest take.
    fn buffer_capacity(&self) -> i64 {
        2 * (2 * PATHS as i64 + 1) * self.max_take as i64
    }

    fn check_memory(&self, what: &str) {
        // The session's own account of its flows' buffers (checked against the flows in a
        // build with debug assertions, as this one is) and its budget.
        let buffered = self.s.buffered_bytes();
        let budget = self.s.config().session_buffer;
        assert!(
            buffered <= budget,
            "the flows hold {buffered} bytes after {what}: above session_buffer {budget}"
        );
        let state = (live_bytes() - self.baseline - self.held_by_harness()) as i64;
        let buffers = self.buffer_capacity();
        let allowed = STATE_PER_BYTE * self.fed + 2 * self.local + buffers + STATE_SLACK;
        if stats_enabled() {
            record_stats(state, self.fed, self.local);
        }
        assert!(
            state <= allowed,
            "session heap {state} bytes after {what}: above {STATE_PER_BYTE} x {} bytes from the \
             peer + 2 x {} bytes queued by the shell + {buffers} bytes of output buffers + \
             {STATE_SLACK} ({} flows open)",
            self.fed,
            self.local,
            self.s.open_flows()
        );
        if self.backlog_check {
            let backlog: usize = self.backlog.iter().map(Vec::len).sum();
            let allowed = BACKLOG_PER_BYTE * self.fed + 4 * self.local + BACKLOG_SLACK;
            assert!(
                backlog as i64 <= allowed,
                "output for a peer that does not read reached {backlog} bytes after {what}: \
                 above {BACKLOG_PER_BYTE} x {} bytes from the peer + 4 x {} bytes queued by the \
                 shell + {BACKLOG_SLACK} (at {} ms; POLYCORN_FUZZ_BACKLOG=off skips this check)",
                self.fed,
                self.local,
                self.now.as_micros() / 1000
            );
        }
    }

    fn op(&mut self, op: &Op) {
        match op {
            Op::Frame { path, dt, frame } => {
                let path = Self::path(*path);
                self.advance(*dt);
                let f = self.build(frame, path, 0, 0);
                self.feed(path, f);
                self.drive();
            }
            Op::Burst {
                path,
                dt,
                exp,
                plus,
                stride,
                frame,
            } => {
                let path = Self::path(*path);
                self.advance(*dt);
                let n = ((1u32 << (exp % 17)) + u32::from(*plus)).min(MAX_BURST);
                let fed_before = self.fed;
                for k in 0..u64::from(n) {
                    let f = self.build(frame, path, k, u64::from(*stride));
                    if !self.feed(path, f) {
                        break;
                    }
                    if self.fed - fed_before > MAX_BURST_BYTES {
                        // Bursts reach counts; volume costs time and reaches nothing more.
                        break;
                    }
                    if k % 1024 == 1023 {
                        self.drive();
                    }
                }
                self.drive();
            }
            Op::Raw { path, bytes } => {
                self.feed_raw(Self::path(*path), bytes);
                self.drive();
            }
            Op::Advance(dt) => {
                self.advance(*dt);
                self.drive();
            }
            Op::Timer => {
                if let Some(t) = self.s.poll_timeout() {
                    if t > self.now {
                        self.now = Instant::from_micros(t.as_micros().min(MAX_NOW_US));
                    }
                }
                self.drive();
            }
            Op::Detach { path } => {
                self.subflow_lost(Self::path(*path));
                self.drive();
            }
            Op::Connect { path, hello } => {
                self.connect(Self::path(*path), *hello);
                self.drive();
            }
            Op::TcpInfo {
                path,
                srtt_ms,
                cwnd_kib,
                unacked_kib,
                backoff,
                rate,
            } => {
                let sample = TcpInfoSample {
                    srtt: Duration::from_millis(u64::from(*srtt_ms) * 4),
                    rttvar: Duration::from_millis(u64::from(*srtt_ms)),
                    min_rtt: Some(Duration::from_millis(u64::from(*srtt_ms))),
                    cwnd_bytes: u64::from(*cwnd_kib) * 1024,
                    mss_bytes: 1448,
                    unacked_bytes: u64::from(*unacked_kib) * 1024,
                    notsent_bytes: 0,
                    delivery_rate: Bandwidth::from_mbit_per_sec(u64::from(*rate)),
                    rto_backoff: u32::from(*backoff),
                    bytes_acked: 0,
                    unacked_age: Duration::ZERO,
                };
                let _ = self.s.on_tcp_info(self.now, Self::path(*path), &sample);
                self.drive();
            }
            Op::Answer { idx, how, dst } => {
                self.answer(*idx, *how, *dst);
                self.drive();
            }
            Op::Send { flow, len, fin } => {
                let flow = self.local_flow(*flow);
                self.send(flow, len.len(), *fin);
                self.drive();
            }
            Op::Read { flow, len } => {
                let flow = self.local_flow(*flow);
                self.read(flow, usize::from(*len));
                self.drive();
            }
            Op::ResetFlow { flow, reason } => {
                let flow = self.local_flow(*flow);
                self.local += 128;
                let _ = self.s.reset_flow(self.now, flow, reset_reason(*reason));
                self.drive();
            }
            Op::PeerReading { path, on } => {
                let p = usize::from(Self::path(*path));
                self.reading[p] = *on;
                if *on {
                    self.backlog[p] = Vec::new();
                }
                self.drive();
            }
            Op::Misc { kind, arg } => {
                self.misc(*kind, *arg);
                self.drive();
            }
        }
    }

    /// Every subflow goes; the session is ended as the proxy ends a restarted relay's earlier
    /// one. Nothing of its flows may stay behind.
    fn finish(mut self) {
        for p in 0..PATHS as u8 {
            self.subflow_lost(p);
        }
        self.drive();
        assert!(
            self.s.end_if_all_paths_down(self.now),
            "a session with no subflow has a usable path"
        );
        assert_eq!(self.s.open_flows(), 0, "flows left in an ended session");
        self.drive();
        let mut waits = Vec::new();
        self.s.take_reorder_waits(&mut waits);
        drop(waits);
        self.out = Vec::new();
        self.wire = Vec::new();
        for b in &mut self.backlog {
            *b = Vec::new();
        }
        let state = (live_bytes() - self.baseline - self.held_by_harness()) as i64;
        let control = self.fed - self.fed_payload;
        let buffers = self.buffer_capacity();
        let allowed = FINAL_PER_BYTE * control + buffers + FINAL_SLACK;
        assert!(
            state <= allowed,
            "an ended session holds {state} heap bytes: above {FINAL_PER_BYTE} x {control} \
             non-payload bytes from the peer + {buffers} bytes of output buffers + {FINAL_SLACK}"
        );
    }
}

fn reset_reason(b: u8) -> ResetReason {
    match b % 4 {
        0 => ResetReason::PeerReset,
        1 => ResetReason::SessionLost,
        2 => ResetReason::Protocol,
        _ => ResetReason::Shutdown,
    }
}

fn close_reason(b: u8) -> CloseReason {
    match b % 4 {
        0 => CloseReason::Shutdown,
        1 => CloseReason::Version,
        2 => CloseReason::Protocol,
        _ => CloseReason::Limit,
    }
}

fn trace_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("POLYCORN_FUZZ_TRACE").is_some())
}

fn stats_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("POLYCORN_FUZZ_STATS").is_some())
}

/// With `POLYCORN_FUZZ_STATS` set: the largest heap per peer byte seen, printed when it grows
/// (for tuning the bounds).
fn record_stats(state: i64, fed: i64, local: i64) {
    use std::sync::atomic::{AtomicI64, Ordering};
    static BEST: AtomicI64 = AtomicI64::new(0);
    let ratio = (state - 2 * local) * 100 / (fed + 1);
    if ratio > BEST.load(Ordering::Relaxed) && state > 64 * 1024 {
        BEST.store(ratio, Ordering::Relaxed);
        eprintln!(
            "stats: session heap {state} B, peer sent {fed} B, shell queued {local} B: {}.{:02} B per peer byte",
            ratio / 100,
            ratio % 100
        );
    }
}

/// Run one input.
pub fn run(data: &[u8]) {
    let mut c = Cursor::new(data);
    let header = c.u8();
    let trace = trace_enabled();
    if trace {
        eprintln!("header {header:#04x}");
    }
    let mut h = Harness::new(header);
    let mut ops = 0;
    while !c.is_empty() && ops < 4096 {
        let op = Op::read(&mut c);
        if trace {
            eprintln!("at {} ms: {op:?}", h.now.as_micros() / 1000);
        }
        h.op(&op);
        if trace {
            let held = (live_bytes() - h.baseline - h.held_by_harness()) / 1024;
            let backlog: usize = h.backlog.iter().map(Vec::len).sum();
            eprintln!(
                "  flows {}, paths {:?}, peer sent {} B, shell {} B, heap {held} KiB, backlog {backlog} B",
                h.s.open_flows(),
                (0..PATHS as u8).map(|p| h.s.path_attached(p)).collect::<Vec<_>>(),
                h.fed,
                h.local
            );
        }
        h.check_memory("an operation");
        ops += 1;
    }
    h.finish();
}
