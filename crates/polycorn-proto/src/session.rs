//! The sans-IO multiplexing session: one per relay–proxy pair, shared by all subflows.
//!
//! The session owns every flow's send buffer (bytes kept until the peer acknowledges them, so a
//! dead subflow loses nothing) and receive buffer (reordering across paths, duplicates from
//! reinjection or redundancy dropped, in-order delivery), the flow-control credit in both
//! directions, reliable control frames, path probes, and the [`Scheduler`] that decides which
//! path carries which chunk. It never reads a clock or touches a socket: the shell feeds it
//! frames, `TCP_INFO` samples and time, and drains per-path output and events.
//!
//! ## Flow control and memory
//! Every flow starts with [`INITIAL_CREDIT`] in each direction. The receiver then grants credit
//! as the application (the passenger's or server's socket) consumes data: its window beyond
//! what was consumed. The window starts at the initial credit and doubles at each grant after
//! the sender came within a quarter of it of the limit, up to `flow_window`, shrunk to
//! `user_window / flows` for a passenger with many flows (never below the initial credit), so
//! a flow the peer sends little on is promised little. Data beyond the credit is a protocol
//! error, so the receive buffer of a flow never exceeds its window. The credit bounds data
//! bytes only: a FIN may follow the last byte it allows, and no credit is granted after it.
//! The send buffer is bounded by the same window: the shell reads from a socket only as much
//! as [`Session::send_capacity`] allows (at most [`MIN_SEND_BUFFER`] at a time, kept for the
//! flow until its next [`Session::send`]), which is how backpressure reaches the sending
//! passenger or server (TCP flow control) instead of unbounded buffering.
//!
//! The session as a whole holds at most [`SessionConfig::session_buffer`] bytes in its flows'
//! buffers ([`Session::buffered_bytes`]: received data not yet read, in order or waiting for a
//! gap, plus sent data not yet acknowledged), whatever the peer does:
//! * Every flow sets aside its initial credit (the peer may send that much unasked) and
//!   [`MIN_SEND_BUFFER`] of send buffer, which it can always use. A new flow is admitted only
//!   while that still fits beside what the others hold and were promised: otherwise the relay's
//!   [`Session::open_flow`] fails with [`ProtoError::TooManyFlows`] and the proxy answers an
//!   `OpenFlow` with [`OpenStatus::Failed`] (the passenger's connection is reset), as at
//!   `max_flows`. A session therefore has at most `session_buffer / (INITIAL_CREDIT +
//!   MIN_SEND_BUFFER)` flows open (6,553 with the default 2 GiB).
//! * Credit beyond the initial credit and send buffer beyond [`MIN_SEND_BUFFER`] come from the
//!   rest of the budget, less an eighth kept for new flows. Once it is used up, a receiver
//!   grants no more than the initial credit beyond what its application consumed, and
//!   [`Session::send_capacity`] allows a flow only its own [`MIN_SEND_BUFFER`]. A flow whose
//!   capacity is 0 therefore always has bytes of its own unacknowledged, and their
//!   acknowledgement frees room and wakes it ([`Event::Writable`]).
//!
//! Data may reach the proxy before its flow's `OpenFlow` (it took a faster path than the
//! control frame). Such a flow is held with its initial credit only, and only while its
//! `OpenFlow` can still come. It cannot once [`UNANNOUNCED_WAIT`] with a usable path has
//! passed, nor once the relay has opened a higher flow id with every earlier control frame
//! received (the relay numbers its flows in the order of their `OpenFlow`s' control sequence
//! numbers); and such flows together may hold at most [`MAX_UNANNOUNCED_BYTES`]. Past any of
//! these the relay sent data for a flow it never opened ([`ProtoError::UnopenedFlow`]), and
//! the whole session fails, not just a subflow (the data sits in the session, not in a
//! subflow): every flow is reset, a [`Frame::Close`] goes out on every path, and
//! [`Session::on_frame`] returns the error for every frame from then on, so the shell ends
//! each subflow as it does after any protocol violation. Data for flow ids the relay used
//! before its epoch changed (it keeps counting its flow ids through renewals) is dropped
//! unbuffered.
//!
//! ## Reliability
//! Data is acknowledged cumulatively per flow ([`Frame::Ack`]); until then the scheduler keeps
//! a record of which path carried which chunk and reinjects according to the pipeline's policy
//! or when a subflow dies ([`Session::detach_path`]). Control frames (open, open result,
//! reset) carry a control sequence number, are sent on every live path and repeated until
//! acknowledged ([`Frame::CtrlAck`]); receivers process each at most once.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::net::IpAddr;

use polycorn_sched::flow::{FlowId, UserId};
use polycorn_sched::path::{PathId, TcpInfoSample, MAX_PATHS};
use polycorn_sched::predict::HandoverPredictor;
use polycorn_sched::scheduler::{SchedConfig, SchedError, Scheduler};
use polycorn_sched::spec::SpecError;
use polycorn_sched::time::{Duration, Instant};
use thiserror::Error;

use crate::frame::{
    encode_data_header, CloseReason, ContextInfo, Destination, Frame, FrameError, OpenStatus,
    ResetReason, Role, MIN_VERSION, REFRESH_VERSION, SESSION_PATH, VERSION,
};

mod flows;
mod input;
mod output;
mod paths;

/// Credit every flow starts with, in both directions, before any [`Frame::Credit`].
pub const INITIAL_CREDIT: u64 = 256 * 1024;

/// Send buffer every open flow may fill whatever the rest of the session holds (see
/// [`SessionConfig::session_buffer`]): set aside for it, with its initial credit, when it opens.
pub const MIN_SEND_BUFFER: u64 = 64 * 1024;

/// (proxy) How long data may wait for its flow's `OpenFlow`, counted only while some path is
/// usable (an outage of every path holds the `OpenFlow` as much as it holds the data). The
/// relay repeats an unacknowledged `OpenFlow` on every usable path every
/// [`SessionConfig::ctrl_retransmit`] (500 ms), so this is twenty repeats.
pub const UNANNOUNCED_WAIT: Duration = Duration::from_secs(10);

/// (proxy) Most bytes all flows whose data came before their `OpenFlow` may hold together (32
/// flows' initial credit).
pub const MAX_UNANNOUNCED_BYTES: u64 = 8 << 20;

/// What each open flow sets aside of [`SessionConfig::session_buffer`].
const FLOW_RESERVE: u64 = INITIAL_CREDIT + MIN_SEND_BUFFER;

/// Tunables of a session.
#[derive(Clone, Debug)]
pub struct SessionConfig {
    /// Which end this is.
    pub role: Role,
    /// Session id (the relay picks it; the proxy learns it from the first Hello).
    pub session_id: u64,
    /// This end's incarnation of the session, sent in every Hello (see
    /// [`Session::on_peer_hello`]). The shell sets a random value when it creates the session;
    /// a peer that restarts or drops the session state must come back with another one.
    /// Default 0.
    pub epoch: u64,
    /// Receive window and send buffer per flow, bytes. Default 4 MiB.
    pub flow_window: u64,
    /// Receive window shared by one passenger's flows, bytes. Default 16 MiB.
    pub user_window: u64,
    /// Most flows open at once. Default 65,536.
    pub max_flows: usize,
    /// Most bytes the session holds in all its flows' buffers together: received data not yet
    /// read (in order or out of order) plus sent data not yet acknowledged
    /// ([`Session::buffered_bytes`]). Each open flow sets aside [`INITIAL_CREDIT`] +
    /// [`MIN_SEND_BUFFER`] (320 KiB) of it, so it also caps the flows open at once (at 6,553
    /// with the default); credit and send buffer beyond those come from the rest, less an
    /// eighth kept for new flows. Default 2 GiB. See the module documentation.
    pub session_buffer: u64,
    /// Acknowledge after this many newly received bytes of a flow. Default 32 KiB.
    pub ack_bytes: u64,
    /// Acknowledge at most this long after data arrived. Default 5 ms.
    pub ack_delay: Duration,
    /// Probe each path this often. Default 200 ms.
    pub ping_interval: Duration,
    /// Probe each path this often instead once no flow has been open for
    /// [`SessionConfig::idle_after`] (`None`: always every `ping_interval`). The probes of an
    /// idle session are its only traffic; at 200 ms they cost about 3 KB/s per path. The first
    /// flow after an idle spell probes every path at once. Default 5 s.
    pub idle_ping_interval: Option<Duration>,
    /// How long without an open flow before probing slows to `idle_ping_interval`. Default
    /// 120 s: the first flow after an idle spell got its first byte about 50–100 ms later on
    /// the emulated HSR trip (the bench with 40 s between flows), so passengers of a train in
    /// service, where some flow is nearly always open, should rarely meet one.
    pub idle_after: Duration,
    /// Repeat unacknowledged control frames this often. Default 500 ms.
    pub ctrl_retransmit: Duration,
    /// A path that received nothing for this long while probed is taken out of scheduling
    /// until it speaks again. Default 1.5 s.
    pub stall_after: Duration,
    /// Flows survive while every path is down for up to this long, then are reset. Default 30 s.
    pub hold_time: Duration,
    /// A flow with data or FIN sent and no acknowledgement progress for this long gets an
    /// empty data frame that makes the peer acknowledge again (acknowledgements can die with a
    /// subflow). Default 1 s.
    pub ack_probe: Duration,
    /// Scheduler pipeline (text spec, e.g. `hrsch`).
    pub pipeline: String,
    /// Scheduler tunables.
    pub sched: SchedConfig,
}

impl SessionConfig {
    /// Defaults for `role` with the given session id and pipeline spec.
    pub fn new(role: Role, session_id: u64, pipeline: &str) -> Self {
        SessionConfig {
            role,
            session_id,
            epoch: 0,
            flow_window: 4 << 20,
            user_window: 16 << 20,
            max_flows: 65_536,
            session_buffer: 2 << 30,
            ack_bytes: 32 * 1024,
            ack_delay: Duration::from_millis(5),
            ping_interval: Duration::from_millis(200),
            idle_ping_interval: Some(Duration::from_secs(5)),
            idle_after: Duration::from_secs(120),
            ctrl_retransmit: Duration::from_millis(500),
            stall_after: Duration::from_millis(1500),
            hold_time: Duration::from_secs(30),
            ack_probe: Duration::from_secs(1),
            pipeline: pipeline.to_string(),
            sched: SchedConfig::default(),
        }
    }
}

/// A violation by the peer (or a misuse by the shell); the shell closes the subflow it came on
/// and logs it. Other flows and subflows are unaffected, except after
/// [`ProtoError::UnopenedFlow`], which fails the whole session.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ProtoError {
    /// Undecodable bytes.
    #[error("bad frame: {0}")]
    Frame(#[from] FrameError),
    /// The peer speaks another version.
    #[error(
        "peer speaks protocol version {theirs}, this build speaks {ours} and accepts peers \
         of versions {min} to {ours}",
        min = MIN_VERSION
    )]
    Version {
        /// Ours.
        ours: u16,
        /// Theirs.
        theirs: u16,
    },
    /// Hello missing, repeated, from the wrong role or for the wrong path/session.
    #[error("bad hello: {0}")]
    Hello(String),
    /// Path index out of range.
    #[error("path {0} is out of range (at most {MAX_PATHS} paths)")]
    BadPath(u8),
    /// Data beyond the credit we granted.
    #[error("flow {flow}: data up to sequence {end} exceeds the granted credit {limit}")]
    FlowControl {
        /// Flow.
        flow: u64,
        /// End of the offending data.
        end: u64,
        /// Granted limit.
        limit: u64,
    },
    /// FIN at two different positions, or data after the FIN.
    #[error("flow {flow}: data or FIN inconsistent with FIN at {fin}")]
    Fin {
        /// Flow.
        flow: u64,
        /// Known FIN position.
        fin: u64,
    },
    /// Acknowledgement of data never sent.
    #[error("flow {flow}: acknowledgement {ack} beyond the {sent} sequence numbers sent")]
    AckBeyondSent {
        /// Flow.
        flow: u64,
        /// The ack.
        ack: u64,
        /// Sent so far.
        sent: u64,
    },
    /// Too many flows: `max_flows` (the number given), or no room left in `session_buffer` for
    /// one more (the number open).
    #[error("flow limit of {0} reached")]
    TooManyFlows(usize),
    /// A frame only the other role may send.
    #[error("a {0} frame is not valid from this peer")]
    WrongDirection(&'static str),
    /// Too many out-of-order control frames.
    #[error("more than {0} control frames outstanding")]
    CtrlBacklog(usize),
    /// Shell misuse: unknown flow.
    #[error("unknown flow {0}")]
    UnknownFlow(u64),
    /// Shell misuse: operation not valid in the flow's state.
    #[error("flow {flow}: {what}")]
    FlowState {
        /// Flow.
        flow: u64,
        /// What was wrong.
        what: &'static str,
    },
    /// This end closed the session ([`Session::close`]): no new flow.
    #[error("the session is closed (this end is shutting down)")]
    Closed,
    /// (proxy) The relay sent data for a flow it never opened (see [`Unopened`] for how that
    /// is known). The session failed with it: every flow was reset, a [`Frame::Close`] went
    /// out on every path, and [`Session::on_frame`] returns this error for every frame from
    /// then on ([`Session::failure`]), so each subflow ends at its next frame.
    #[error("data for flow {flow} that was never opened: {why}")]
    UnopenedFlow {
        /// Flow.
        flow: u64,
        /// How it is known that the flow will not be opened.
        why: Unopened,
    },
}

/// How the proxy knows that data it holds belongs to a flow the relay will never open
/// ([`ProtoError::UnopenedFlow`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unopened {
    /// Its `OpenFlow` did not come within [`UNANNOUNCED_WAIT`] (time with a usable path).
    NotInTime,
    /// The relay opened flows up to `opened_through` with every earlier control frame received:
    /// it numbers flows in the order of their `OpenFlow`s, so this lower id's never comes.
    PassedOver {
        /// Highest flow id opened so far in control-sequence order.
        opened_through: u64,
    },
    /// Flows not yet opened held `bytes`, more than [`MAX_UNANNOUNCED_BYTES`].
    TooMuchData {
        /// What they held.
        bytes: u64,
    },
}

impl std::fmt::Display for Unopened {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unopened::NotInTime => write!(
                f,
                "no OpenFlow for it within {} ms with a usable path",
                UNANNOUNCED_WAIT.as_millis()
            ),
            Unopened::PassedOver { opened_through } => write!(
                f,
                "the relay has opened flows up to {opened_through} in order, so its OpenFlow \
                 cannot come any more"
            ),
            Unopened::TooMuchData { bytes } => write!(
                f,
                "flows not yet opened hold {bytes} bytes, more than the {MAX_UNANNOUNCED_BYTES} \
                 allowed"
            ),
        }
    }
}

/// Something the shell must act on.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// (proxy) The relay asks for a connection to `dst` on behalf of passenger `user`; answer
    /// with [`Session::accept_flow`] or [`Session::refuse_flow`].
    FlowRequested {
        /// Flow.
        flow: u64,
        /// Passenger.
        user: IpAddr,
        /// Destination.
        dst: Destination,
    },
    /// (relay) The proxy answered an open.
    FlowOpened {
        /// Flow.
        flow: u64,
        /// Result.
        status: OpenStatus,
    },
    /// In-order data (or the end of the stream) can be read with [`Session::read`].
    Readable(u64),
    /// Send buffer space freed after the flow was full.
    Writable(u64),
    /// The peer reset the flow, or the session gave up on it; close the socket with RST.
    FlowReset {
        /// Flow.
        flow: u64,
        /// Why.
        reason: ResetReason,
    },
    /// Both directions finished and were acknowledged; the flow is gone.
    FlowClosed(u64),
    /// (proxy) New train context from the relay.
    Context(ContextInfo),
    /// The peer reports a path up or down.
    PeerPathStatus {
        /// Path.
        path: u8,
        /// Up?
        up: bool,
    },
    /// (relay) The proxy announced that it drains before it stops: flows opened from now on
    /// belong at the next proxy ([`Session::peer_draining`]).
    PeerDraining,
    /// Every path has been down longer than the hold time; all flows were reset. The relay
    /// reports it only while flows were open; the proxy also for an idle session, which it then
    /// frees.
    SessionLost,
    /// The peer closed the session (a [`Frame::Close`], e.g. it is shutting down): every open
    /// flow was reset ([`ResetReason::Shutdown`]). Frames that arrive after it are ignored until
    /// a subflow's Hello comes from the next peer, which starts afresh (flows opened meanwhile
    /// are carried to it).
    PeerClosed {
        /// Why.
        reason: CloseReason,
        /// The peer's words.
        message: String,
        /// Flows that were open and were reset by it (0 for an idle session).
        flows_reset: usize,
    },
}

/// Result of [`Session::read`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadOutcome {
    /// This many bytes were copied.
    Data(usize),
    /// Nothing to read now.
    WouldBlock,
    /// The peer finished the stream and everything was read.
    Eof,
}

/// A relay Hello whose epoch is at most this far behind the relay's latest (as the proxy knows
/// it) is from before the relay renewed its epoch ([`HelloOutcome::Stale`]); any other
/// change is a relay that started afresh.
const RENEWALS_BEHIND: u64 = 1 << 32;

/// What a new subflow's Hellos mean for the session ([`Session::on_peer_hello`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HelloOutcome {
    /// Attach the subflow.
    Attach,
    /// The peer lost the session's state: every open flow was reset and the session starts
    /// afresh with it. Attach the subflow.
    PeerRestarted,
    /// (relay) The proxy is another one, or one that lost the session's state, and no path
    /// works with the session's proxy any more: every open flow was reset and this end took a
    /// new epoch, so that no proxy it spoke to before takes what it says from now on for the
    /// rest of an old conversation. The subflow's Hello carried the old epoch: drop it and
    /// connect again.
    Renewed,
    /// (relay) The proxy is another one than the session's while a path still works with the
    /// session's: nothing changed; drop the subflow and try again later (the session stays
    /// with its proxy while that one is reachable).
    Elsewhere,
    /// The subflow's Hello carried an earlier epoch of the relay (one renewed since it was
    /// sent; the relay sees it from its own epoch, the proxy because the relay's epochs only
    /// grow): drop the subflow (the relay connects again). Nothing changed.
    Stale,
}

/// Data segments that arrived out of order and waited for a gap to fill (receive side, all
/// flows): the out-of-order delay of POLYCORN's Fig. 11.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReorderStats {
    /// Segments that arrived ahead of a gap and were later delivered in order.
    pub segments: u64,
    /// Sum of their waits from arrival to in-order delivery.
    pub wait_sum: Duration,
    /// Longest wait.
    pub wait_max: Duration,
    /// Waits not kept for [`Session::take_reorder_waits`] because the shell did not collect
    /// them in time (they still count in `segments` and `wait_sum`).
    pub waits_dropped: u64,
}

/// Out-of-order segments of one flow whose arrival time is tracked; beyond it, new ones are
/// not timed (bounded memory against a peer sending tiny segments out of order).
pub const MAX_TIMED_OOO_SEGMENTS: usize = 4096;
/// Individual waits kept until the shell takes them.
pub const MAX_PENDING_REORDER_WAITS: usize = 65_536;

/// Per-path counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PathCounters {
    /// Frame bytes queued for sending.
    pub tx_bytes: u64,
    /// Bytes of data frames received (headers included).
    pub rx_bytes: u64,
    /// Frames of any kind received (probes and control included).
    pub rx_frames: u64,
    /// Flow data bytes sent (including copies).
    pub data_bytes: u64,
    /// Data bytes sent again after an earlier copy (reinjection).
    pub reinjected_bytes: u64,
    /// Data bytes sent as extra simultaneous copies (redundant scheduling).
    pub redundant_bytes: u64,
    /// Times the subflow attached.
    pub attaches: u64,
    /// Latest probe RTT, µs.
    pub rtt_us: u64,
}

#[derive(Debug, Default)]
struct PathSlot {
    attached: bool,
    stalled: bool,
    prio: Vec<u8>,
    bulk: Vec<u8>,
    last_rx: Instant,
    /// Silence before this instant does not count towards a stall: set by the probes of an
    /// idle session (sent seconds apart) and by the first probe after it.
    silence_from: Instant,
    next_ping: Instant,
    ping_seq: u32,
    ping_out: Option<(u32, Instant)>,
    counters: PathCounters,
    /// The path's name: the relay's config at the relay, the relay's latest Hello on this path
    /// at the proxy.
    name: Option<String>,
    /// (proxy) The protocol version of the relay's Hello on this path's latest subflow (0:
    /// not told, see [`Session::set_peer_version`]).
    peer_version: u16,
    /// (relay) The proxy asked for this path's subflow to be replaced ([`Frame::Refresh`]):
    /// its slow-start threshold, segments. Cleared when a subflow attaches.
    refresh_asked: Option<u32>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FlowPhase {
    /// Relay: OpenFlow sent, no answer yet.
    Opening,
    /// Proxy: data arrived before the OpenFlow.
    Unannounced,
    /// Proxy: shell asked to connect.
    Requested,
    /// Both ends connected.
    Open,
}

#[derive(Debug)]
struct SendSide {
    base: u64,
    buf: VecDeque<u8>,
    fin: bool,
    acked: u64,
    blocked: bool,
    /// Budget promised by [`Session::send_capacity`] beyond [`MIN_SEND_BUFFER`], until the
    /// flow's next [`Session::send`].
    lease: u64,
    /// Highest sequence sent so far (data bytes, plus one once the FIN went out).
    sent: u64,
    /// When the peer's acknowledgement last advanced (or the last probe went out).
    progress_at: Instant,
}

impl SendSide {
    fn end(&self) -> u64 {
        self.base + self.buf.len() as u64
    }

    /// Something sent is unacknowledged, or there is something to send and nothing in flight.
    fn needs_probe(&self) -> bool {
        self.sent > self.acked || (self.sent == self.acked && self.end() > self.sent)
    }
}

#[derive(Debug)]
struct RecvSide {
    next: u64,
    ooo: BTreeMap<u64, Vec<u8>>,
    /// End offset of each out-of-order segment -> when it first arrived (for the reorder wait).
    ooo_since: BTreeMap<u64, Instant>,
    fin_at: Option<u64>,
    ready: VecDeque<Vec<u8>>,
    ready_off: usize,
    /// Bytes held in `ready` (from `ready_off` on) and `ooo`.
    buffered: u64,
    consumed: u64,
    eof_read: bool,
    limit: u64,
    /// How far beyond what was consumed the credit goes now: from the initial credit, doubled
    /// at each grant after the sender came near the limit (`pressed`), up to the flow's window.
    window: u64,
    /// Data came within a quarter window of the limit since the last grant.
    pressed: bool,
    acked_sent: u64,
    credit_sent: u64,
    notified: bool,
}

impl RecvSide {
    fn fin_in_order(&self) -> bool {
        self.fin_at.is_some_and(|f| self.next > f)
    }

    /// Credit granted beyond the initial credit past what the application consumed: what this
    /// flow's receive side may hold beyond the part every flow sets aside.
    fn extra(&self) -> u64 {
        (self.limit - self.consumed).saturating_sub(INITIAL_CREDIT)
    }
}

/// Send buffer beyond [`MIN_SEND_BUFFER`].
fn send_extra(held: usize) -> u64 {
    (held as u64).saturating_sub(MIN_SEND_BUFFER)
}

#[derive(Debug)]
struct FlowState {
    phase: FlowPhase,
    user: Option<IpAddr>,
    in_sched: bool,
    send: SendSide,
    recv: RecvSide,
}

#[derive(Debug)]
struct CtrlEntry {
    bytes: Vec<u8>,
    sent_at: Option<Instant>,
}

const MAX_CTRL_OOO: usize = 65_536;
/// (proxy) Most flows whose data came before their `OpenFlow`.
const MAX_UNANNOUNCED: usize = 1024;
/// Most closed flow ids the proxy remembers above the highest id below which every flow is
/// closed or open; past it the oldest gap is taken as closed.
const MAX_CLOSED_ABOVE: usize = 16_384;
const MAX_DECISIONS_PER_POLL: usize = 512;

/// The session state machine. See the module documentation.
#[derive(Debug)]
pub struct Session {
    cfg: SessionConfig,
    sched: Scheduler,
    paths: Vec<PathSlot>,
    flows: HashMap<u64, FlowState>,
    user_flows: HashMap<IpAddr, u32>,
    next_flow: u64,
    closed_floor: u64,
    closed_above: BTreeSet<u64>,
    /// (proxy) Flows whose data came before their `OpenFlow`: when it first came, on the clock
    /// of time with a usable path ([`Session::usable_clock`]).
    unannounced: BTreeMap<u64, Duration>,
    /// (proxy) Bytes those flows hold.
    unannounced_bytes: u64,
    /// (proxy) Highest flow id whose `OpenFlow` came with every earlier control frame of the
    /// relay's epoch ([`Unopened::PassedOver`]).
    opened_through: u64,
    /// (proxy) `OpenFlow`s that came ahead of an earlier control frame: cseq -> flow.
    opens_ahead: BTreeMap<u64, u64>,
    /// (proxy) Highest flow id the relay opened or sent data for.
    peer_flow_high: u64,
    /// (proxy) Flow ids of the relay's earlier epochs are at most this.
    stale_through: u64,
    /// Bytes of received data held (all flows).
    recv_bytes: u64,
    /// Bytes of send buffers (all flows).
    send_bytes: u64,
    /// Sum of [`RecvSide::extra`] over flows.
    recv_extra: u64,
    /// Sum of [`send_extra`] over flows.
    send_extra: u64,
    /// Sum of the flows' send leases ([`Session::send_capacity`]).
    leased: u64,
    /// Time with a usable path before the current spell (see [`Session::usable_clock`]).
    usable_before: Duration,
    /// When the current spell with a usable path began (while `all_down_since` is `None`).
    usable_from: Instant,
    /// The peer sent data for a flow it never opened: the session failed.
    failed: Option<ProtoError>,
    ctrl_out: BTreeMap<u64, CtrlEntry>,
    next_cseq: u64,
    ctrl_in_next: u64,
    ctrl_in_seen: BTreeSet<u64>,
    ctrl_ack_due: bool,
    ack_dirty: BTreeSet<u64>,
    ack_deadline: Option<Instant>,
    events: VecDeque<Event>,
    all_down_since: Option<Instant>,
    /// Since when no flow has been open (`None` while one is).
    no_flows_since: Option<Instant>,
    wall_offset_us: i64,
    now: Instant,
    stage_moves: Vec<(&'static str, u64)>,
    reorder: ReorderStats,
    reorder_waits: Vec<Duration>,
    /// The epoch of the peer's Hellos so far.
    peer_epoch: Option<u64>,
    totals: FlowTotals,
    /// This end closed the session ([`Session::close`]): the Close frame it sent.
    closed: Option<Vec<u8>>,
    /// The peer closed the session (until a new peer epoch).
    peer_closed: bool,
    /// (relay) The proxy announced its drain and has not closed the session yet.
    peer_draining: bool,
}

/// Passenger connections a session has carried, since it was created (a restart with a new peer
/// epoch does not zero them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowTotals {
    /// Flows opened: on the relay every [`Session::open_flow`]; on the proxy every `OpenFlow`
    /// taken (one refused for `max_flows` or the session's buffer is not opened).
    pub opened: u64,
    /// Of those, flows that ended by a reset instead of both FINs: reset by this end or the
    /// peer, refused by the destination, or reset because the session was lost.
    pub reset: u64,
}

/// What a peer's Hello says, once checked ([`Session::check_hello`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerHello {
    /// Session id.
    pub session: u64,
    /// Path the subflow carries.
    pub path: u8,
    /// The peer's incarnation of the session.
    pub epoch: u64,
    /// The protocol version it speaks ([`MIN_VERSION`] to [`VERSION`]).
    pub version: u16,
    /// The path's name, when the peer (a relay of version 3 or later) gave one.
    pub name: Option<String>,
}

fn user_id(ip: IpAddr) -> UserId {
    match ip {
        IpAddr::V4(a) => UserId(u64::from(u32::from(a))),
        IpAddr::V6(a) => {
            // FNV-1a over the address: stable, collisions only merge two users' fairness.
            let mut h: u64 = 0xcbf2_9ce4_8422_2325;
            for b in a.octets() {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
            UserId(h | (1 << 63))
        }
    }
}

fn path_id(path: u8) -> Result<PathId, ProtoError> {
    PathId::new(usize::from(path)).ok_or(ProtoError::BadPath(path))
}

impl Session {
    /// A new session; fails if the pipeline spec is invalid.
    pub fn new(cfg: SessionConfig) -> Result<Session, SpecError> {
        let mut sched_cfg = cfg.sched.clone();
        sched_cfg.initial_credit_bytes = INITIAL_CREDIT;
        let sched = Scheduler::from_spec(sched_cfg, &cfg.pipeline)?;
        let mut paths = Vec::with_capacity(MAX_PATHS);
        paths.resize_with(MAX_PATHS, PathSlot::default);
        Ok(Session {
            cfg,
            sched,
            paths,
            flows: HashMap::new(),
            user_flows: HashMap::new(),
            next_flow: 1,
            closed_floor: 0,
            closed_above: BTreeSet::new(),
            unannounced: BTreeMap::new(),
            unannounced_bytes: 0,
            opened_through: 0,
            opens_ahead: BTreeMap::new(),
            peer_flow_high: 0,
            stale_through: 0,
            recv_bytes: 0,
            send_bytes: 0,
            recv_extra: 0,
            send_extra: 0,
            leased: 0,
            usable_before: Duration::ZERO,
            usable_from: Instant::ZERO,
            failed: None,
            ctrl_out: BTreeMap::new(),
            next_cseq: 0,
            ctrl_in_next: 0,
            ctrl_in_seen: BTreeSet::new(),
            ctrl_ack_due: false,
            ack_dirty: BTreeSet::new(),
            ack_deadline: None,
            events: VecDeque::new(),
            all_down_since: Some(Instant::ZERO),
            no_flows_since: None,
            wall_offset_us: 0,
            now: Instant::ZERO,
            stage_moves: Vec::new(),
            reorder: ReorderStats::default(),
            reorder_waits: Vec::new(),
            peer_epoch: None,
            totals: FlowTotals::default(),
            closed: None,
            peer_closed: false,
            peer_draining: false,
        })
    }

    /// Out-of-order delay counters (receive side).
    pub fn reorder_stats(&self) -> ReorderStats {
        self.reorder
    }

    /// Move the reorder waits recorded since the last call into `out` (for a histogram).
    pub fn take_reorder_waits(&mut self, out: &mut Vec<Duration>) {
        out.append(&mut self.reorder_waits);
    }

    /// The configuration.
    pub fn config(&self) -> &SessionConfig {
        &self.cfg
    }

    /// The scheduler (read-only: path state, stats, trace).
    pub fn scheduler(&self) -> &Scheduler {
        &self.sched
    }

    /// The scheduler's next event (a path held back on a prediction or let go, a
    /// reinjection), oldest first, for the shell's log.
    pub fn poll_sched_event(&mut self) -> Option<polycorn_sched::SchedEvent> {
        self.sched.poll_event()
    }

    /// Path moves made by each scheduler stage so far (how often each stage changed a
    /// decision), in first-seen order.
    pub fn stage_moves(&self) -> &[(&'static str, u64)] {
        &self.stage_moves
    }

    fn count_moves(&mut self) {
        for m in self.sched.trace().moves() {
            match self.stage_moves.iter_mut().find(|(s, _)| *s == m.stage) {
                Some((_, n)) => *n += 1,
                None => self.stage_moves.push((m.stage, 1)),
            }
        }
    }

    /// Counters of `path`.
    pub fn path_counters(&self, path: u8) -> Option<PathCounters> {
        self.paths.get(usize::from(path)).map(|p| p.counters)
    }

    /// How long `path` has heard no frame of the peer, at `now`; `None` before its first
    /// frame. While paths are probed every [`Session::probe_interval`], a path that went dark
    /// went dark within that much after this began.
    pub fn path_silent_for(&self, now: Instant, path: u8) -> Option<Duration> {
        let p = self.paths.get(usize::from(path))?;
        (p.counters.rx_frames > 0).then(|| now.saturating_duration_since(p.last_rx))
    }

    /// Whether `path`'s subflow is attached and not stalled.
    pub fn path_usable(&self, path: u8) -> bool {
        self.paths
            .get(usize::from(path))
            .is_some_and(|p| p.attached && !p.stalled)
    }

    /// Whether any path's subflow is attached and not stalled.
    pub fn any_path_usable(&self) -> bool {
        self.paths.iter().any(|p| p.attached && !p.stalled)
    }

    /// Whether `path`'s subflow is alive with its congestion window full at the last
    /// `TCP_INFO` sample (in flight plus queued ≥ cwnd): the scheduler gives it nothing more
    /// until a newer sample shows the window opened, so the shell should sample it again as
    /// soon as acknowledgements can have arrived (see [`Session::on_tcp_info`]).
    pub fn path_window_full(&self, path: u8) -> bool {
        PathId::new(usize::from(path))
            .and_then(|id| self.sched.path(id))
            .is_some_and(|p| p.alive && !p.has_room())
    }

    /// Whether `path`'s subflow is attached (possibly stalled).
    pub fn path_attached(&self, path: u8) -> bool {
        self.paths
            .get(usize::from(path))
            .is_some_and(|p| p.attached)
    }

    /// Flows currently open.
    pub fn open_flows(&self) -> usize {
        self.flows.len()
    }

    /// Flows opened and reset so far.
    pub fn flow_totals(&self) -> FlowTotals {
        self.totals
    }

    /// Bytes held in the flows' buffers now: received data not yet read (in order or waiting
    /// for a gap) plus sent data not yet acknowledged. Never more than
    /// [`SessionConfig::session_buffer`].
    pub fn buffered_bytes(&self) -> u64 {
        #[cfg(debug_assertions)]
        self.check_accounting();
        self.recv_bytes + self.send_bytes
    }

    /// Why the session failed, if it did: the peer sent data for a flow it never opened
    /// ([`ProtoError::UnopenedFlow`]). The session is then closed ([`Session::closed_here`])
    /// and [`Session::on_frame`] returns this error for every frame.
    pub fn failure(&self) -> Option<&ProtoError> {
        self.failed.as_ref()
    }

    /// The running sums behind [`Session::buffered_bytes`] and the budget agree with the flows.
    #[cfg(debug_assertions)]
    fn check_accounting(&self) {
        let (mut recv, mut send, mut rx, mut sx, mut un) = (0u64, 0u64, 0u64, 0u64, 0u64);
        let mut leased = 0;
        for (id, f) in &self.flows {
            let r = &f.recv;
            let held = r.ready.iter().map(|b| b.len() as u64).sum::<u64>() - r.ready_off as u64
                + r.ooo.values().map(|b| b.len() as u64).sum::<u64>();
            assert_eq!(held, r.buffered, "flow {id}: receive bytes");
            recv += held;
            rx += r.extra();
            send += f.send.buf.len() as u64;
            sx += send_extra(f.send.buf.len());
            leased += f.send.lease;
            if f.phase == FlowPhase::Unannounced {
                assert!(self.unannounced.contains_key(id), "flow {id} unannounced");
                un += held;
            }
        }
        assert_eq!(
            (recv, send, rx, sx, leased, un, self.unannounced.len()),
            (
                self.recv_bytes,
                self.send_bytes,
                self.recv_extra,
                self.send_extra,
                self.leased,
                self.unannounced_bytes,
                self.flows
                    .values()
                    .filter(|f| f.phase == FlowPhase::Unannounced)
                    .count()
            ),
            "buffer accounting"
        );
        assert!(
            self.committed() <= self.cfg.session_buffer,
            "budget exceeded"
        );
    }

    /// What the open flows set aside of the budget.
    fn reserved(&self) -> u64 {
        self.flows.len() as u64 * FLOW_RESERVE
    }

    /// What the flows set aside of the budget, use of it beyond that, or were promised: never
    /// more than [`SessionConfig::session_buffer`], and never less than what they hold.
    fn committed(&self) -> u64 {
        self.reserved() + self.recv_extra + self.send_extra + self.leased
    }

    /// Budget left for credit beyond the initial credit and send buffer beyond
    /// [`MIN_SEND_BUFFER`]: what is not committed, less an eighth kept for new flows.
    fn budget_room(&self) -> u64 {
        let budget = self.cfg.session_buffer;
        budget.saturating_sub(budget / 8 + self.committed())
    }

    /// Whether one more flow can be opened: the flow limit, and its share of the budget.
    fn flow_limit_reached(&self) -> Option<ProtoError> {
        if self.flows.len() >= self.cfg.max_flows {
            return Some(ProtoError::TooManyFlows(self.cfg.max_flows));
        }
        let after = self.committed() + FLOW_RESERVE;
        (after > self.cfg.session_buffer).then_some(ProtoError::TooManyFlows(self.flows.len()))
    }

    /// Time with a usable path so far: stands still while no path is usable.
    fn usable_clock(&self, now: Instant) -> Duration {
        match self.all_down_since {
            Some(_) => self.usable_before,
            None => self.usable_before + now.saturating_duration_since(self.usable_from),
        }
    }

    /// Some path is usable (again) at `now`.
    fn paths_up(&mut self, now: Instant) {
        if self.all_down_since.take().is_some() {
            self.usable_from = now;
        }
    }

    /// No path is usable from `now` on (if one was).
    fn paths_down(&mut self, now: Instant) {
        if self.all_down_since.is_none() {
            self.usable_before = self.usable_clock(now);
            self.all_down_since = Some(now);
        }
    }

    /// Forget `flow`, which ended by a reset (counted unless the peer never announced it).
    fn forget_reset_flow(&mut self, now: Instant, flow: u64) {
        if self
            .flows
            .get(&flow)
            .is_some_and(|f| f.phase != FlowPhase::Unannounced)
        {
            self.totals.reset += 1;
        }
        self.forget_flow(now, flow);
    }

    /// Tell the session how to turn its clock into wall-clock time (Unix µs), for one-way
    /// delays from probe timestamps. Relay and proxy clocks must be synchronized (GPS or NTP)
    /// for one-way delays to mean anything; unsynchronized clocks fall back to RTT / 2.
    pub fn set_wall_clock(&mut self, now: Instant, unix_us: u64) {
        self.wall_offset_us = unix_us as i64 - now.as_micros() as i64;
    }

    /// The session id.
    pub fn session_id(&self) -> u64 {
        self.cfg.session_id
    }

    /// The Hello this end sends first on a new subflow of `path` (naming no path).
    pub fn hello(&self, path: u8) -> Frame<'static> {
        Frame::Hello {
            version: VERSION,
            role: self.cfg.role,
            session: self.cfg.session_id,
            path,
            epoch: self.cfg.epoch,
            name: None,
        }
    }

    /// The relay's Hello on a new subflow of `path`, giving the path's name so that the proxy
    /// shows it in its metrics and logs. A name the protocol cannot carry (see
    /// [`crate::valid_path_name`]; the relay's config refuses such names) is left out.
    pub fn named_hello(&self, path: u8, name: &str) -> Frame<'static> {
        let mut hello = self.hello(path);
        if let Frame::Hello { name: n, .. } = &mut hello {
            *n = crate::frame::valid_path_name(name).then(|| name.to_owned());
        }
        hello
    }

    /// The proxy's answer to a Hello of protocol `version` on `path`: in the peer's version
    /// ([`PeerHello::version`]), so that a relay of an older one accepts it.
    pub fn answer_hello(&self, path: u8, version: u16) -> Frame<'static> {
        let mut hello = self.hello(path);
        if let Frame::Hello { version: v, .. } = &mut hello {
            *v = version.clamp(MIN_VERSION, VERSION);
        }
        hello
    }

    /// Check a peer's Hello: version and role. Returns what it says.
    pub fn check_hello(role: Role, frame: &Frame<'_>) -> Result<PeerHello, ProtoError> {
        match frame {
            Frame::Hello {
                version,
                role: theirs,
                session,
                path,
                epoch,
                name,
            } => {
                if !(MIN_VERSION..=VERSION).contains(version) {
                    return Err(ProtoError::Version {
                        ours: VERSION,
                        theirs: *version,
                    });
                }
                if *theirs == role {
                    return Err(ProtoError::Hello(format!(
                        "peer claims the same role ({role:?}) as this end"
                    )));
                }
                path_id(*path)?;
                Ok(PeerHello {
                    session: *session,
                    path: *path,
                    epoch: *epoch,
                    version: *version,
                    name: name.clone(),
                })
            }
            other => Err(ProtoError::Hello(format!(
                "expected Hello as the first frame, got frame type {}",
                other.kind()
            ))),
        }
    }

    fn observe(&mut self, now: Instant) {
        if now > self.now {
            self.now = now;
        }
    }
}

fn sched_err(flow: u64, e: SchedError) -> ProtoError {
    match e {
        SchedError::AckBeyondSent { ack, sent, .. } => {
            ProtoError::AckBeyondSent { flow, ack, sent }
        }
        _ => ProtoError::FlowState {
            flow,
            what: "rejected by the scheduler",
        },
    }
}

/// Insert `[s, s + d.len())` into the out-of-order map, filling only gaps (existing bytes win:
/// every copy of a sequence number carries the same byte).
fn insert_ooo(ooo: &mut BTreeMap<u64, Vec<u8>>, s: u64, d: &[u8]) -> u64 {
    let e = s + d.len() as u64;
    let mut added = 0;
    let from = ooo.range(..=s).next_back().map_or(s, |(k, _)| *k);
    let spans: Vec<(u64, u64)> = ooo
        .range(from..e)
        .map(|(k, v)| (*k, *k + v.len() as u64))
        .collect();
    let mut cursor = s;
    for (ks, ke) in spans {
        if ke <= cursor {
            continue;
        }
        if ks > cursor {
            let piece = &d[(cursor - s) as usize..(ks - s) as usize];
            added += piece.len() as u64;
            ooo.insert(cursor, piece.to_vec());
        }
        cursor = cursor.max(ke);
        if cursor >= e {
            return added;
        }
    }
    if cursor < e {
        added += e - cursor;
        ooo.insert(cursor, d[(cursor - s) as usize..].to_vec());
    }
    added
}

#[cfg(test)]
mod tests;
