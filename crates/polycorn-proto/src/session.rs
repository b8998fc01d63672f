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

    // ----- paths -------------------------------------------------------------------------

    /// A subflow for `path` completed its handshake. Unacknowledged control frames and every
    /// flow's acknowledgement are repeated on it.
    pub fn attach_path(&mut self, now: Instant, path: u8) -> Result<(), ProtoError> {
        self.observe(now);
        let id = path_id(path)?;
        if self.sched.path(id).is_none() {
            self.sched.add_path(now, id).expect("path checked absent");
        } else {
            self.sched
                .set_path_alive(now, id, true)
                .expect("path exists");
        }
        let slot = &mut self.paths[usize::from(path)];
        slot.attached = true;
        slot.stalled = false;
        slot.prio.clear();
        slot.bulk.clear();
        slot.last_rx = now;
        slot.next_ping = now;
        slot.ping_out = None;
        slot.refresh_asked = None;
        slot.counters.attaches += 1;
        for e in self.ctrl_out.values_mut() {
            e.sent_at = None;
        }
        // Acknowledgements and credit sent on a subflow that died may never have arrived:
        // repeat both (a lost credit would leave a sender with nothing in flight waiting).
        for f in self.flows.values_mut() {
            f.recv.credit_sent = 0;
        }
        self.ack_dirty.extend(self.flows.keys().copied());
        self.ack_deadline = Some(now);
        self.ctrl_ack_due = true;
        self.paths_up(now);
        Ok(())
    }

    /// Name `path` for metrics and logs (`None`: no name). The relay's shell names its paths
    /// as its config does; the proxy's shell as the relay's Hello on the path's latest subflow
    /// did (a relay of protocol 2 names none).
    pub fn set_path_name(&mut self, path: u8, name: Option<String>) {
        if let Some(slot) = self.paths.get_mut(usize::from(path)) {
            slot.name = name;
        }
    }

    /// The name of `path`, if it has one ([`Session::set_path_name`]).
    pub fn path_name(&self, path: u8) -> Option<&str> {
        self.paths.get(usize::from(path))?.name.as_deref()
    }

    /// (proxy) Record the protocol version of the relay's Hello on `path`'s latest subflow
    /// ([`PeerHello::version`]): it decides which frames the path may carry to the relay.
    pub fn set_peer_version(&mut self, path: u8, version: u16) {
        if let Some(slot) = self.paths.get_mut(usize::from(path)) {
            slot.peer_version = version;
        }
    }

    /// (proxy) Ask the relay to replace `path`'s subflow with a fresh connection, because this
    /// end's slow-start threshold on it fell to `ssthresh` segments while the path was idle
    /// ([`Frame::Refresh`]). Queued on the path's own subflow ahead of data. Returns whether
    /// it was sent: not to a relay older than [`REFRESH_VERSION`] (which could not decode it,
    /// see [`Session::set_peer_version`]), nor on a path without a subflow.
    pub fn ask_refresh(
        &mut self,
        now: Instant,
        path: u8,
        ssthresh: u32,
    ) -> Result<bool, ProtoError> {
        if self.cfg.role != Role::Proxy {
            return Err(ProtoError::WrongDirection("Refresh"));
        }
        self.observe(now);
        let Some(slot) = self.paths.get_mut(usize::from(path)) else {
            return Ok(false);
        };
        if !slot.attached || slot.peer_version < REFRESH_VERSION {
            return Ok(false);
        }
        let bytes = Frame::Refresh { path, ssthresh }.to_vec();
        slot.counters.tx_bytes += bytes.len() as u64;
        slot.prio.extend_from_slice(&bytes);
        Ok(true)
    }

    /// (relay) Whether the proxy asked for `path`'s subflow to be replaced since a subflow
    /// last attached on it ([`Frame::Refresh`]): the proxy's slow-start threshold, segments.
    /// Taking it clears it.
    pub fn take_refresh_request(&mut self, path: u8) -> Option<u32> {
        self.paths.get_mut(usize::from(path))?.refresh_asked.take()
    }

    /// This end's epoch: the incarnation its Hellos carry ([`SessionConfig::epoch`], changed
    /// by [`Session::renew_epoch`]).
    pub fn epoch(&self) -> u64 {
        self.cfg.epoch
    }

    /// A new subflow's Hellos: this end's carried epoch `ours`, the peer's `theirs`; call it
    /// before attaching the subflow, and attach it only on [`HelloOutcome::Attach`] or
    /// [`HelloOutcome::PeerRestarted`].
    ///
    /// The peer's first epoch is remembered. A different one means the peer lost the session's
    /// state (a proxy restarted, or dropped the session after every path was down longer than
    /// the hold time), or, at the relay, that the proxy is another one (its host name moved).
    /// Every open flow is then reset ([`Event::FlowReset`], reason
    /// [`ResetReason::SessionLost`]) rather than left waiting for answers that cannot come, and
    /// flow ids, control frame sequence numbers and queued output start again as in a new
    /// session. The relay also renews its own epoch ([`Session::renew_epoch`]): a relay epoch
    /// then only ever belongs to one proxy incarnation, so a proxy the relay comes back to
    /// after speaking to another sees a restarted relay and starts afresh too, instead of
    /// taking the new control frames for repeats of old ones.
    ///
    /// A relay whose proxy answers with another epoch while any path still works with the
    /// session's proxy changes nothing ([`HelloOutcome::Elsewhere`]): one path that reached
    /// another proxy (the name moved, or its IPv4 and IPv6 addresses lead to different hosts)
    /// does not end what the working ones carry.
    pub fn on_peer_hello(&mut self, now: Instant, ours: u64, theirs: u64) -> HelloOutcome {
        self.observe(now);
        let outcome = self.hello_outcome(ours, theirs);
        match outcome {
            HelloOutcome::Attach if self.peer_epoch.is_none() => {
                // The first Hello, or the first of the peer that follows one that closed the
                // session: flows opened meanwhile go to this one.
                self.peer_epoch = Some(theirs);
                self.peer_closed = false;
                self.peer_draining = false;
            }
            HelloOutcome::Renewed => {
                self.renew_epoch(now);
            }
            HelloOutcome::PeerRestarted => {
                self.peer_epoch = Some(theirs);
                self.restart_with_peer(now);
            }
            HelloOutcome::Attach | HelloOutcome::Elsewhere | HelloOutcome::Stale => {}
        }
        outcome
    }

    /// What [`Session::on_peer_hello`] would answer for these epochs, changing nothing (the
    /// relay asks before it takes a new connection as a path's subflow).
    pub fn hello_outcome(&self, ours: u64, theirs: u64) -> HelloOutcome {
        if ours != self.cfg.epoch {
            return HelloOutcome::Stale;
        }
        match self.peer_epoch {
            None => HelloOutcome::Attach,
            Some(e) if e == theirs => HelloOutcome::Attach,
            Some(_) if self.cfg.role == Role::Relay => {
                if self.any_path_usable() {
                    HelloOutcome::Elsewhere
                } else {
                    HelloOutcome::Renewed
                }
            }
            // The relay's epochs only grow, by one at each renewal, within one session id (a
            // restarted relay comes back under a new id): one a little behind the known one is
            // a subflow the relay opened before it renewed, on its way out.
            Some(e) if e.wrapping_sub(theirs) <= RENEWALS_BEHIND => HelloOutcome::Stale,
            Some(_) => HelloOutcome::PeerRestarted,
        }
    }

    /// Start afresh under a new epoch (this end's incarnation, [`SessionConfig::epoch`]), as an
    /// end about to reach another peer does (the relay failing over to another proxy): every
    /// open flow is reset ([`ResetReason::SessionLost`]), what was said with the peer so far is
    /// forgotten, the next peer's Hello is taken as a first one, and this end's Hellos carry the
    /// new epoch from now on. A peer that still holds the earlier state (a proxy the relay comes
    /// back to later) then sees a restarted peer and starts afresh too, instead of taking the
    /// new control frames for repeats of old ones. Returns the new epoch.
    pub fn renew_epoch(&mut self, now: Instant) -> u64 {
        self.observe(now);
        self.cfg.epoch = self.cfg.epoch.wrapping_add(1);
        self.peer_epoch = None;
        self.restart_with_peer(now);
        self.cfg.epoch
    }

    fn restart_with_peer(&mut self, now: Instant) {
        self.peer_closed = false;
        self.peer_draining = false;
        self.reset_all_flows(now, ResetReason::SessionLost);
        self.forget_peer();
    }

    /// Forget what was said with the peer so far (control sequence numbers, queued output), as
    /// in a new session with a new peer. Flows are not touched.
    fn forget_peer(&mut self) {
        // The relay keeps counting flow ids (a passenger connection's tasks may still hold an
        // old id for a moment); a relay that restarted counts from 1 again, so the proxy forgets
        // which ids it closed.
        if self.cfg.role == Role::Proxy {
            self.closed_floor = 0;
            self.closed_above.clear();
            // What still arrives for the flows of the conversation so far (from a subflow of
            // the relay's earlier epoch) must not wait for an OpenFlow: the relay's new flow
            // ids are higher (it keeps counting).
            self.stale_through = self.peer_flow_high;
        }
        debug_assert!(self.unannounced.is_empty(), "flows are reset first");
        self.opened_through = 0;
        self.opens_ahead.clear();
        self.ctrl_out.clear();
        self.next_cseq = 0;
        self.ctrl_in_next = 0;
        self.ctrl_in_seen.clear();
        self.ctrl_ack_due = false;
        self.ack_dirty.clear();
        self.ack_deadline = None;
        for slot in &mut self.paths {
            slot.prio.clear();
            slot.bulk.clear();
            slot.ping_out = None;
        }
    }

    /// `path`'s subflow is gone (closed, failed, or abandoned by the shell): what it carried is
    /// reinjected on the other paths and nothing more is scheduled on it until it attaches again.
    pub fn detach_path(&mut self, now: Instant, path: u8) -> Result<(), ProtoError> {
        self.observe(now);
        let id = path_id(path)?;
        let slot = &mut self.paths[usize::from(path)];
        if !slot.attached {
            return Ok(());
        }
        slot.attached = false;
        slot.stalled = false;
        slot.prio.clear();
        slot.bulk.clear();
        slot.ping_out = None;
        if self.sched.path(id).is_some() {
            self.sched.on_path_reset(now, id).expect("path exists");
            self.sched
                .set_path_alive(now, id, false)
                .expect("path exists");
        }
        self.update_all_down(now);
        Ok(())
    }

    fn update_all_down(&mut self, now: Instant) {
        let any = self.paths.iter().any(|p| p.attached && !p.stalled);
        if any {
            self.paths_up(now);
        } else {
            self.paths_down(now);
        }
    }

    /// A `TCP_INFO` reading of `path`'s subflow.
    pub fn on_tcp_info(
        &mut self,
        now: Instant,
        path: u8,
        sample: &TcpInfoSample,
    ) -> Result<(), ProtoError> {
        self.observe(now);
        let id = path_id(path)?;
        let slot = &self.paths[usize::from(path)];
        if !slot.attached {
            return Ok(());
        }
        let mut s = *sample;
        s.notsent_bytes = s
            .notsent_bytes
            .saturating_add((slot.prio.len() + slot.bulk.len()) as u64);
        self.sched
            .on_tcp_info(now, id, &s)
            .expect("attached path exists");
        Ok(())
    }

    // ----- flows (local side) --------------------------------------------------------------

    fn new_flow_state(&self, phase: FlowPhase, user: Option<IpAddr>) -> FlowState {
        FlowState {
            phase,
            user,
            in_sched: false,
            send: SendSide {
                base: 0,
                buf: VecDeque::new(),
                fin: false,
                acked: 0,
                blocked: false,
                lease: 0,
                sent: 0,
                progress_at: self.now,
            },
            recv: RecvSide {
                next: 0,
                ooo: BTreeMap::new(),
                ooo_since: BTreeMap::new(),
                fin_at: None,
                ready: VecDeque::new(),
                ready_off: 0,
                buffered: 0,
                consumed: 0,
                eof_read: false,
                limit: INITIAL_CREDIT,
                window: INITIAL_CREDIT,
                pressed: false,
                acked_sent: 0,
                credit_sent: INITIAL_CREDIT,
                notified: false,
            },
        }
    }

    fn register_user(&mut self, now: Instant, flow: u64, user: IpAddr) {
        *self.user_flows.entry(user).or_insert(0) += 1;
        self.sched
            .open_flow(now, FlowId(flow), user_id(user))
            .expect("flow ids are unique");
        if let Some(f) = self.flows.get_mut(&flow) {
            f.in_sched = true;
        }
    }

    /// (relay) Open a flow for passenger `user` to `dst`. Data may be sent right away; the
    /// proxy holds it until the destination answers.
    pub fn open_flow(
        &mut self,
        now: Instant,
        user: IpAddr,
        dst: Destination,
    ) -> Result<u64, ProtoError> {
        self.observe(now);
        if self.cfg.role != Role::Relay {
            return Err(ProtoError::WrongDirection("OpenFlow"));
        }
        if self.closed.is_some() {
            return Err(ProtoError::Closed);
        }
        if let Some(e) = self.flow_limit_reached() {
            return Err(e);
        }
        if let Destination::Name(n, _) = &dst {
            if n.is_empty() || n.len() > 255 {
                return Err(ProtoError::FlowState {
                    flow: 0,
                    what: "host name must be 1 to 255 bytes",
                });
            }
        }
        let flow = self.next_flow;
        self.next_flow += 1;
        let st = self.new_flow_state(FlowPhase::Opening, Some(user));
        self.flows.insert(flow, st);
        self.totals.opened += 1;
        self.register_user(now, flow, user);
        let cseq = self.next_cseq;
        self.push_ctrl(Frame::OpenFlow {
            cseq,
            flow,
            user,
            dst,
        });
        Ok(flow)
    }

    /// (proxy) The destination of a requested flow is connected.
    pub fn accept_flow(&mut self, now: Instant, flow: u64) -> Result<(), ProtoError> {
        self.observe(now);
        let f = self
            .flows
            .get_mut(&flow)
            .ok_or(ProtoError::UnknownFlow(flow))?;
        if f.phase != FlowPhase::Requested {
            return Err(ProtoError::FlowState {
                flow,
                what: "accept_flow on a flow that was not requested",
            });
        }
        f.phase = FlowPhase::Open;
        let cseq = self.next_cseq;
        self.push_ctrl(Frame::OpenResult {
            cseq,
            flow,
            status: OpenStatus::Ok,
        });
        Ok(())
    }

    /// (proxy) The destination of a requested flow could not be reached; the relay resets the
    /// passenger's connection.
    pub fn refuse_flow(
        &mut self,
        now: Instant,
        flow: u64,
        status: OpenStatus,
    ) -> Result<(), ProtoError> {
        self.observe(now);
        if !self.flows.contains_key(&flow) {
            return Err(ProtoError::UnknownFlow(flow));
        }
        let cseq = self.next_cseq;
        self.push_ctrl(Frame::OpenResult { cseq, flow, status });
        self.forget_reset_flow(now, flow);
        Ok(())
    }

    /// Bytes of `flow` the shell may pass to [`Session::send`] now (0 if full or unknown), at
    /// most [`MIN_SEND_BUFFER`] at a time: up to `flow_window` in its send buffer, beyond
    /// [`MIN_SEND_BUFFER`] only while the session's budget has room
    /// ([`SessionConfig::session_buffer`]). What it returns is promised: the next
    /// [`Session::send`] of the flow takes that much even if other flows have used the budget
    /// meanwhile (the shell may read that much from the socket first). At 0, the flow has bytes
    /// of its own unacknowledged, and [`Event::Writable`] follows their acknowledgement (once
    /// [`Session::send`] was refused bytes or offered none).
    pub fn send_capacity(&mut self, flow: u64) -> usize {
        let Some(f) = self.flows.get_mut(&flow) else {
            return 0;
        };
        // The earlier promise is renewed, not added to.
        self.leased -= std::mem::take(&mut f.send.lease);
        if f.send.fin {
            return 0;
        }
        let held = f.send.buf.len() as u64;
        let own = self.cfg.flow_window.saturating_sub(held);
        let floor = MIN_SEND_BUFFER.saturating_sub(held);
        let room = self.budget_room();
        let cap = own.min(MIN_SEND_BUFFER).min(floor + room);
        let lease = cap.saturating_sub(floor);
        self.flows.get_mut(&flow).expect("present").send.lease = lease;
        self.leased += lease;
        cap as usize
    }

    /// Queue bytes read from the local socket of `flow`. Returns how many were taken (at most
    /// [`Session::send_capacity`]); when fewer than offered, [`Event::Writable`] follows once
    /// space frees up.
    pub fn send(&mut self, now: Instant, flow: u64, data: &[u8]) -> Result<usize, ProtoError> {
        self.observe(now);
        let cap = self.send_capacity(flow);
        let f = self
            .flows
            .get_mut(&flow)
            .ok_or(ProtoError::UnknownFlow(flow))?;
        if f.send.fin {
            return Err(ProtoError::FlowState {
                flow,
                what: "send after FIN",
            });
        }
        let n = data.len().min(cap);
        if n < data.len() || cap == 0 {
            f.send.blocked = true;
        }
        if n == 0 {
            self.leased -= std::mem::take(&mut f.send.lease);
            return Ok(0);
        }
        if f.send.sent == f.send.acked && f.send.sent >= f.send.end() {
            // An idle flow has data again: the probe clock starts now.
            f.send.progress_at = now;
        }
        let extra_before = send_extra(f.send.buf.len());
        f.send.buf.extend(&data[..n]);
        self.send_bytes += n as u64;
        self.send_extra = self.send_extra - extra_before + send_extra(f.send.buf.len());
        // The promise is kept: what was taken of it is in `send_extra` now.
        self.leased -= std::mem::take(&mut f.send.lease);
        let held = f.send.buf.len() as u64;
        let in_sched = f.in_sched;
        if held >= self.cfg.flow_window || (held >= MIN_SEND_BUFFER && self.budget_room() == 0) {
            // Full: the shell may wait now, and the acknowledgement that frees room wakes it.
            self.flows.get_mut(&flow).expect("present").send.blocked = true;
        }
        if in_sched {
            self.sched
                .on_flow_data(now, FlowId(flow), n as u64)
                .map_err(|e| sched_err(flow, e))?;
        }
        Ok(n)
    }

    /// The local socket of `flow` reached end of stream: FIN follows the queued bytes.
    pub fn send_fin(&mut self, now: Instant, flow: u64) -> Result<(), ProtoError> {
        self.observe(now);
        let f = self
            .flows
            .get_mut(&flow)
            .ok_or(ProtoError::UnknownFlow(flow))?;
        if f.send.fin {
            return Ok(());
        }
        f.send.fin = true;
        if f.in_sched {
            self.sched
                .on_flow_fin(now, FlowId(flow))
                .map_err(|e| sched_err(flow, e))?;
        }
        Ok(())
    }

    /// Abort `flow` (its local socket was reset or failed): the peer resets its side.
    pub fn reset_flow(
        &mut self,
        now: Instant,
        flow: u64,
        reason: ResetReason,
    ) -> Result<(), ProtoError> {
        self.observe(now);
        if !self.flows.contains_key(&flow) {
            return Err(ProtoError::UnknownFlow(flow));
        }
        let cseq = self.next_cseq;
        self.push_ctrl(Frame::Reset { cseq, flow, reason });
        self.forget_reset_flow(now, flow);
        Ok(())
    }

    /// Copy in-order received bytes of `flow` into `buf`.
    pub fn read(&mut self, now: Instant, flow: u64, buf: &mut [u8]) -> ReadOutcome {
        self.observe(now);
        let Some(f) = self.flows.get_mut(&flow) else {
            return ReadOutcome::WouldBlock;
        };
        let r = &mut f.recv;
        let mut n = 0;
        while n < buf.len() {
            let Some(front) = r.ready.front() else { break };
            let avail = &front[r.ready_off..];
            let k = avail.len().min(buf.len() - n);
            buf[n..n + k].copy_from_slice(&avail[..k]);
            n += k;
            r.ready_off += k;
            if r.ready_off == front.len() {
                r.ready.pop_front();
                r.ready_off = 0;
            }
        }
        if n > 0 {
            let extra_before = r.extra();
            r.consumed += n as u64;
            r.buffered -= n as u64;
            r.notified = false;
            self.recv_extra = self.recv_extra - extra_before + r.extra();
            self.recv_bytes -= n as u64;
            self.maybe_credit(flow);
            return ReadOutcome::Data(n);
        }
        r.notified = false;
        if r.fin_in_order() {
            if !r.eof_read {
                r.eof_read = true;
                self.check_done(now, flow);
            }
            return ReadOutcome::Eof;
        }
        ReadOutcome::WouldBlock
    }

    fn flow_window_for(&self, user: Option<IpAddr>) -> u64 {
        let n = user
            .and_then(|u| self.user_flows.get(&u).copied())
            .unwrap_or(1)
            .max(1);
        (self.cfg.user_window / u64::from(n))
            .min(self.cfg.flow_window)
            .max(INITIAL_CREDIT)
    }

    /// The credit limit `f` may have now, and its window: the window beyond what its
    /// application consumed, as far as the session's budget allows, and at least the initial
    /// credit beyond it (set aside when the flow opened); none once the FIN came. The window
    /// grows from the initial credit, doubling while the sender keeps coming near the limit, up
    /// to [`Session::flow_window_for`] (the initial credit while its `OpenFlow` has not come):
    /// a flow the peer sends little on promises none of the budget it would not use.
    fn grantable_limit(&self, f: &FlowState) -> (u64, u64) {
        let r = &f.recv;
        if r.fin_at.is_some() {
            // Nothing comes after the FIN (which needs no credit).
            return (r.limit, r.window);
        }
        let most = if f.phase == FlowPhase::Unannounced {
            INITIAL_CREDIT
        } else {
            self.flow_window_for(f.user)
        };
        let window = if r.pressed {
            r.window.saturating_mul(2)
        } else {
            r.window
        }
        .min(most)
        .max(INITIAL_CREDIT);
        let floor = (r.consumed + INITIAL_CREDIT).max(r.limit);
        let limit = (r.consumed + window)
            .min(floor.saturating_add(self.budget_room()))
            .max(r.limit);
        (limit, window)
    }

    /// Raise `flow`'s credit limit to `limit` (never lowers it), with `window` its window from
    /// now on.
    fn set_limit(&mut self, flow: u64, (limit, window): (u64, u64)) {
        let Some(f) = self.flows.get_mut(&flow) else {
            return;
        };
        let r = &mut f.recv;
        if limit > r.limit {
            let extra_before = r.extra();
            r.limit = limit;
            r.window = window;
            r.pressed = false;
            self.recv_extra = self.recv_extra - extra_before + r.extra();
        }
    }

    fn maybe_credit(&mut self, flow: u64) {
        let Some(f) = self.flows.get(&flow) else {
            return;
        };
        let (limit, window) = self.grantable_limit(f);
        let r = &f.recv;
        // Not for every read: once a quarter of the credit it gives is new.
        if limit > r.limit && limit - r.credit_sent >= (limit - r.consumed) / 4 {
            self.set_limit(flow, (limit, window));
            self.ack_dirty.insert(flow);
            self.ack_deadline = Some(self.now);
        }
    }

    // ----- context and path status ----------------------------------------------------------

    /// (relay) New train context: sent ahead of all data on every live path, and fed to the
    /// local scheduler.
    pub fn send_context(&mut self, now: Instant, ctx: &ContextInfo) {
        self.observe(now);
        self.sched.on_train_speed(now, f64::from(ctx.speed_mps));
        let bytes = Frame::Context(ctx.clone()).to_vec();
        for p in self.paths.iter_mut().filter(|p| p.attached) {
            p.prio.extend_from_slice(&bytes);
            p.counters.tx_bytes += bytes.len() as u64;
        }
    }

    /// (proxy) Announce that this end drains before it stops ([`SESSION_PATH`]): the relay then
    /// opens its new flows at the next proxy rather than here. Queued on every attached path
    /// ahead of data.
    pub fn announce_draining(&mut self, now: Instant) -> Result<(), ProtoError> {
        if self.cfg.role != Role::Proxy {
            return Err(ProtoError::WrongDirection("PathStatus (drain)"));
        }
        self.send_path_status(now, SESSION_PATH, false);
        Ok(())
    }

    /// (relay) Whether the proxy announced its drain ([`Session::announce_draining`]) and has
    /// not closed the session since: a flow opened now would be carried by a proxy about to
    /// stop. Cleared by its Close, and by the Hello of a proxy with a new epoch.
    pub fn peer_draining(&self) -> bool {
        self.peer_draining
    }

    /// Tell the peer that `path` is up or down (e.g. the modem lost its cell).
    pub fn send_path_status(&mut self, now: Instant, path: u8, up: bool) {
        self.observe(now);
        let bytes = Frame::PathStatus { path, up }.to_vec();
        for p in self.paths.iter_mut().filter(|p| p.attached) {
            p.prio.extend_from_slice(&bytes);
        }
    }

    /// Close the session, e.g. because this end is shutting down: every open flow is reset
    /// ([`Event::FlowReset`], reason [`ResetReason::Shutdown`]), queued output is dropped, and a
    /// [`Frame::Close`] with `reason` and `message` is queued on every attached path, so that the
    /// peer resets its side of the flows at once instead of waiting out its hold time
    /// ([`Event::PeerClosed`] there). No flow can be opened afterwards ([`ProtoError::Closed`]).
    pub fn close(&mut self, now: Instant, reason: CloseReason, message: &str) {
        self.observe(now);
        self.shut(now, ResetReason::Shutdown, reason, message);
    }

    /// The peer broke the session as a whole ([`ProtoError::UnopenedFlow`]): close it as
    /// [`Session::close`] does, its flows reset for [`ResetReason::Protocol`] and the Close
    /// saying why, and keep the error for [`Session::on_frame`] to return from now on. Returns
    /// it.
    fn fail(&mut self, now: Instant, err: ProtoError) -> ProtoError {
        if self.failed.is_none() {
            let reason = match err {
                ProtoError::UnopenedFlow {
                    why: Unopened::TooMuchData { .. },
                    ..
                } => CloseReason::Limit,
                _ => CloseReason::Protocol,
            };
            self.shut(now, ResetReason::Protocol, reason, &err.to_string());
            self.failed = Some(err.clone());
        }
        err
    }

    fn shut(&mut self, now: Instant, reset: ResetReason, reason: CloseReason, message: &str) {
        self.reset_all_flows(now, reset);
        self.ctrl_out.clear();
        self.ack_dirty.clear();
        self.ack_deadline = None;
        let bytes = Frame::Close {
            reason,
            message: message.to_string(),
        }
        .to_vec();
        for p in self.paths.iter_mut() {
            p.prio.clear();
            p.bulk.clear();
            if p.attached {
                p.prio.extend_from_slice(&bytes);
            }
        }
        self.closed = Some(bytes);
    }

    /// Whether this end closed the session ([`Session::close`]).
    pub fn closed_here(&self) -> bool {
        self.closed.is_some()
    }

    /// The encoded Close frame this end sent ([`Session::close`]), for the shell to write on a
    /// subflow that connects after the close.
    pub fn close_frame(&self) -> Option<&[u8]> {
        self.closed.as_deref()
    }

    /// Whether the peer closed the session ([`Event::PeerClosed`]) and no peer has said Hello
    /// since.
    pub fn peer_closed(&self) -> bool {
        self.peer_closed
    }

    fn reset_all_flows(&mut self, now: Instant, reason: ResetReason) {
        let mut flows: Vec<u64> = self.flows.keys().copied().collect();
        flows.sort_unstable();
        for flow in flows {
            self.events.push_back(Event::FlowReset { flow, reason });
            self.forget_reset_flow(now, flow);
        }
    }

    // ----- input ------------------------------------------------------------------------

    /// A frame arrived on `path` (after the Hello exchange).
    pub fn on_frame(&mut self, now: Instant, path: u8, frame: Frame<'_>) -> Result<(), ProtoError> {
        self.observe(now);
        path_id(path)?;
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        {
            let slot = &mut self.paths[usize::from(path)];
            slot.last_rx = now;
            slot.counters.rx_frames += 1;
            if slot.stalled {
                slot.stalled = false;
                let id = path_id(path)?;
                if self.sched.path(id).is_some() {
                    self.sched.set_path_alive(now, id, true).expect("exists");
                }
                self.paths_up(now);
            }
        }
        if self.peer_closed {
            // What a peer sent on its other subflows before its Close (sent on every path)
            // arrives after it: it concerns flows and control frames that are gone, and must
            // not acknowledge or answer the ones meant for the next peer.
            return Ok(());
        }
        match frame {
            Frame::Hello { .. } => Err(ProtoError::Hello("second Hello on a subflow".into())),
            Frame::Data {
                flow,
                offset,
                fin,
                data,
            } => {
                self.paths[usize::from(path)].counters.rx_bytes +=
                    (data.len() + crate::frame::DATA_OVERHEAD) as u64;
                self.on_data(now, flow, offset, fin, data)
            }
            Frame::Ack { flow, next } => self.on_ack(now, flow, next),
            Frame::Credit { flow, limit } => {
                if let Some(f) = self.flows.get(&flow) {
                    if f.in_sched {
                        self.sched
                            .on_flow_credit(now, FlowId(flow), limit)
                            .map_err(|e| sched_err(flow, e))?;
                    }
                }
                Ok(())
            }
            Frame::OpenFlow {
                cseq,
                flow,
                user,
                dst,
            } => {
                if self.cfg.role != Role::Proxy {
                    return Err(ProtoError::WrongDirection("OpenFlow"));
                }
                if self.ctrl_first_time(cseq)? {
                    self.opens_ahead.insert(cseq, flow);
                    self.advance_opened_through();
                    self.on_open_flow(now, flow, user, dst)?;
                }
                Ok(())
            }
            Frame::OpenResult { cseq, flow, status } => {
                if self.cfg.role != Role::Relay {
                    return Err(ProtoError::WrongDirection("OpenResult"));
                }
                if self.ctrl_first_time(cseq)? {
                    if let Some(f) = self.flows.get_mut(&flow) {
                        if f.phase == FlowPhase::Opening {
                            if status == OpenStatus::Ok {
                                f.phase = FlowPhase::Open;
                                self.events.push_back(Event::FlowOpened { flow, status });
                                self.check_done(now, flow);
                            } else {
                                self.events.push_back(Event::FlowOpened { flow, status });
                                self.forget_reset_flow(now, flow);
                            }
                        }
                    }
                }
                Ok(())
            }
            Frame::Reset { cseq, flow, reason } => {
                if self.ctrl_first_time(cseq)? {
                    if self.flows.contains_key(&flow) {
                        self.events.push_back(Event::FlowReset { flow, reason });
                        self.forget_reset_flow(now, flow);
                    } else if flow != 0 {
                        // Reset before its OpenFlow arrived (or for a flow long gone): a late
                        // OpenFlow must not connect it.
                        self.mark_closed(flow);
                    }
                }
                Ok(())
            }
            Frame::CtrlAck { next } => {
                let keep = self.ctrl_out.split_off(&next);
                self.ctrl_out = keep;
                Ok(())
            }
            Frame::Context(ctx) => {
                if self.cfg.role != Role::Proxy {
                    return Err(ProtoError::WrongDirection("Context"));
                }
                self.sched.on_train_speed(now, f64::from(ctx.speed_mps));
                self.events.push_back(Event::Context(ctx));
                Ok(())
            }
            Frame::Ping { id, sent_us } => {
                let received_us = (now.as_micros() as i64 + self.wall_offset_us).max(0) as u64;
                let pong = Frame::Pong {
                    id,
                    ping_sent_us: sent_us,
                    received_us,
                };
                let slot = &mut self.paths[usize::from(path)];
                pong.encode(&mut slot.prio);
                Ok(())
            }
            Frame::Pong {
                id,
                ping_sent_us,
                received_us,
            } => {
                let slot = &mut self.paths[usize::from(path)];
                if slot.ping_out.is_some_and(|(i, _)| i == id) {
                    slot.ping_out = None;
                }
                let sent = Instant::from_micros(ping_sent_us);
                if sent <= now {
                    let rtt = now - sent;
                    slot.counters.rtt_us = rtt.as_micros();
                    let pid = path_id(path)?;
                    if self.sched.path(pid).is_some() {
                        self.sched.on_rtt_sample(now, pid, rtt).expect("exists");
                        // In i128: the peer's clock reading is any u64 it likes.
                        let sent_wall = i128::from(ping_sent_us) + i128::from(self.wall_offset_us);
                        let owd = i128::from(received_us) - sent_wall;
                        let owd = if owd >= 0 && owd <= i128::from(rtt.as_micros()) {
                            owd as u64
                        } else {
                            rtt.as_micros() / 2
                        };
                        self.sched
                            .on_owd_sample(now, pid, Duration::from_micros(owd))
                            .expect("exists");
                    }
                }
                Ok(())
            }
            Frame::PathStatus {
                path: SESSION_PATH,
                up,
            } => {
                // Only a proxy announces a drain; a relay's session-wide status means nothing yet.
                if self.cfg.role == Role::Relay && !up && !self.peer_draining {
                    self.peer_draining = true;
                    self.events.push_back(Event::PeerDraining);
                }
                Ok(())
            }
            Frame::PathStatus { path: p, up } => {
                self.events.push_back(Event::PeerPathStatus { path: p, up });
                Ok(())
            }
            Frame::Refresh { path: p, ssthresh } => {
                if self.cfg.role != Role::Relay {
                    return Err(ProtoError::WrongDirection("Refresh"));
                }
                if let Some(slot) = self.paths.get_mut(usize::from(p)) {
                    slot.refresh_asked = Some(ssthresh);
                }
                Ok(())
            }
            Frame::Close { reason, message } => {
                // Sent on every path: the first one counts (the rest are ignored above).
                self.peer_closed = true;
                self.peer_draining = false;
                let flows_reset = self.flows.len();
                self.reset_all_flows(now, ResetReason::Shutdown);
                // The peer is gone with all it knew: the next one (a restarted proxy) starts
                // afresh, and flows opened until it answers are carried to it rather than
                // reset when its Hello shows a new epoch.
                self.forget_peer();
                self.peer_epoch = None;
                self.events.push_back(Event::PeerClosed {
                    reason,
                    message,
                    flows_reset,
                });
                Ok(())
            }
        }
    }

    /// Whether a control frame with `cseq` is new; records it and schedules a CtrlAck.
    fn ctrl_first_time(&mut self, cseq: u64) -> Result<bool, ProtoError> {
        self.ctrl_ack_due = true;
        if cseq < self.ctrl_in_next || self.ctrl_in_seen.contains(&cseq) {
            return Ok(false);
        }
        if cseq == self.ctrl_in_next {
            self.ctrl_in_next += 1;
            while self.ctrl_in_seen.remove(&self.ctrl_in_next) {
                self.ctrl_in_next += 1;
            }
        } else {
            if self.ctrl_in_seen.len() >= MAX_CTRL_OOO {
                return Err(ProtoError::CtrlBacklog(MAX_CTRL_OOO));
            }
            self.ctrl_in_seen.insert(cseq);
        }
        self.advance_opened_through();
        Ok(true)
    }

    /// (proxy) Take the `OpenFlow`s every earlier control frame of which has come into
    /// `opened_through`: the relay allocates flow ids in the order of their `OpenFlow`s'
    /// control sequence numbers, so a lower id that is neither open nor closed by then was
    /// never opened in this epoch.
    fn advance_opened_through(&mut self) {
        while let Some(e) = self.opens_ahead.first_entry() {
            if *e.key() >= self.ctrl_in_next {
                break;
            }
            self.opened_through = self.opened_through.max(e.remove());
        }
    }

    fn is_closed(&self, flow: u64) -> bool {
        match self.cfg.role {
            Role::Relay => flow >= self.next_flow || !self.flows.contains_key(&flow),
            Role::Proxy => {
                !self.flows.contains_key(&flow)
                    && (flow <= self.closed_floor || self.closed_above.contains(&flow))
            }
        }
    }

    fn mark_closed(&mut self, flow: u64) {
        if self.cfg.role != Role::Proxy {
            return;
        }
        if flow <= self.closed_floor {
            return;
        }
        self.closed_above.insert(flow);
        if self.closed_above.len() > MAX_CLOSED_ABOVE {
            // Ids below the oldest closed one that were never seen (flows of the relay's
            // exchange with an earlier proxy session): none can still be on its way.
            let first = *self.closed_above.first().expect("not empty");
            self.closed_floor = first - 1;
        }
        // Advance over closed ids and over open ones (they are known while open; a long-lived
        // flow must not make every later closed id be remembered one by one).
        while let Some(next) = self.closed_floor.checked_add(1) {
            if self.closed_above.remove(&next) || self.flows.contains_key(&next) {
                self.closed_floor = next;
            } else {
                break;
            }
        }
    }

    fn on_open_flow(
        &mut self,
        now: Instant,
        flow: u64,
        user: IpAddr,
        dst: Destination,
    ) -> Result<(), ProtoError> {
        if flow == 0 || self.is_closed(flow) {
            return Ok(());
        }
        self.peer_flow_high = self.peer_flow_high.max(flow);
        match self.flows.get_mut(&flow) {
            Some(f) if f.phase == FlowPhase::Unannounced => {
                f.phase = FlowPhase::Requested;
                f.user = Some(user);
                self.unannounced.remove(&flow);
                self.unannounced_bytes -= f.recv.buffered;
                self.totals.opened += 1;
            }
            Some(_) => return Ok(()),
            None => {
                if self.flow_limit_reached().is_some() {
                    // Refuse instead of failing the subflow: the passenger gets a reset.
                    let cseq = self.next_cseq;
                    self.push_ctrl(Frame::OpenResult {
                        cseq,
                        flow,
                        status: OpenStatus::Failed,
                    });
                    self.mark_closed(flow);
                    return Ok(());
                }
                let st = self.new_flow_state(FlowPhase::Requested, Some(user));
                self.flows.insert(flow, st);
                self.totals.opened += 1;
            }
        }
        self.register_user(now, flow, user);
        // Data that arrived before the open was already counted; nothing else to replay: the
        // scheduler only carries this side's sending direction.
        self.events
            .push_back(Event::FlowRequested { flow, user, dst });
        Ok(())
    }

    fn on_data(
        &mut self,
        now: Instant,
        flow: u64,
        offset: u64,
        fin: bool,
        data: &[u8],
    ) -> Result<(), ProtoError> {
        let end = offset + data.len() as u64;
        if !self.flows.contains_key(&flow) {
            if flow == 0 || self.is_closed(flow) {
                // Late copy for a finished flow: everything was received; say so again so the
                // peer stops reinjecting.
                if flow != 0 {
                    self.queue_raw_ack(flow, end + u64::from(fin));
                }
                return Ok(());
            }
            if self.cfg.role == Role::Relay || flow <= self.stale_through {
                // (proxy) A flow of the relay's earlier epoch, all of whose flows were reset.
                return Ok(());
            }
            if flow <= self.opened_through {
                let why = Unopened::PassedOver {
                    opened_through: self.opened_through,
                };
                return Err(self.fail(now, ProtoError::UnopenedFlow { flow, why }));
            }
            if self.unannounced.len() >= MAX_UNANNOUNCED {
                return Err(ProtoError::TooManyFlows(self.cfg.max_flows));
            }
            if let Some(e) = self.flow_limit_reached() {
                return Err(e);
            }
            let st = self.new_flow_state(FlowPhase::Unannounced, None);
            self.flows.insert(flow, st);
            let since = self.usable_clock(now);
            self.unannounced.insert(flow, since);
            self.peer_flow_high = self.peer_flow_high.max(flow);
        }
        let f = self.flows.get_mut(&flow).expect("present");
        let unannounced = f.phase == FlowPhase::Unannounced;
        let r = &mut f.recv;
        // The credit bounds the data, which needs buffer space; the FIN needs none, and a
        // sender may put it on the last byte the credit allows.
        if end > r.limit {
            return Err(ProtoError::FlowControl {
                flow,
                end,
                limit: r.limit,
            });
        }
        if let Some(fa) = r.fin_at {
            if end > fa || (fin && end != fa) {
                return Err(ProtoError::Fin { flow, fin: fa });
            }
        } else if fin {
            if r.next > end || r.ooo.range(end..).next().is_some() {
                return Err(ProtoError::Fin { flow, fin: end });
            }
            r.fin_at = Some(end);
        }
        if end + r.window / 4 >= r.limit {
            r.pressed = true;
        }
        let before = r.next;
        let held_before = r.buffered;
        if end > r.next {
            let (s, d) = if offset < r.next {
                (r.next, &data[(r.next - offset) as usize..])
            } else {
                (offset, data)
            };
            if s == r.next {
                r.ready.push_back(d.to_vec());
                r.buffered += d.len() as u64;
                r.next = end;
                // Pull in out-of-order segments that now connect.
                while let Some((&k, _)) = r.ooo.first_key_value() {
                    if k > r.next {
                        break;
                    }
                    let seg = r.ooo.remove(&k).expect("present");
                    r.buffered -= seg.len() as u64;
                    let seg_end = k + seg.len() as u64;
                    if seg_end > r.next {
                        let rest = &seg[(r.next - k) as usize..];
                        r.buffered += rest.len() as u64;
                        r.ready.push_back(rest.to_vec());
                        r.next = seg_end;
                    }
                }
            } else {
                r.buffered += insert_ooo(&mut r.ooo, s, d);
                let seg_end = s + d.len() as u64;
                if r.ooo_since.len() < MAX_TIMED_OOO_SEGMENTS || r.ooo_since.contains_key(&seg_end)
                {
                    r.ooo_since.entry(seg_end).or_insert(now);
                }
            }
        }
        // Out-of-order segments the advance delivered: their reorder wait ends now.
        while let Some(e) = r.ooo_since.first_entry() {
            if *e.key() > r.next {
                break;
            }
            let wait = now.saturating_duration_since(e.remove());
            self.reorder.segments += 1;
            self.reorder.wait_sum = self.reorder.wait_sum + wait;
            self.reorder.wait_max = self.reorder.wait_max.max(wait);
            if self.reorder_waits.len() < MAX_PENDING_REORDER_WAITS {
                self.reorder_waits.push(wait);
            } else {
                self.reorder.waits_dropped += 1;
            }
        }
        if r.fin_at == Some(r.next) {
            r.next += 1;
        }
        // Never fewer: the flow still holds every byte it held, now perhaps in order.
        let added = r.buffered - held_before;
        self.recv_bytes += added;
        if unannounced {
            self.unannounced_bytes += added;
            if self.unannounced_bytes > MAX_UNANNOUNCED_BYTES {
                let why = Unopened::TooMuchData {
                    bytes: self.unannounced_bytes,
                };
                return Err(self.fail(now, ProtoError::UnopenedFlow { flow, why }));
            }
        }
        let r = &mut self.flows.get_mut(&flow).expect("present").recv;
        let advanced = r.next > before;
        if advanced && !r.notified {
            r.notified = true;
            self.events.push_back(Event::Readable(flow));
        }
        // Acknowledge: promptly at FIN or after enough bytes; otherwise within ack_delay.
        // Duplicates are acknowledged too, so the sender stops reinjecting them.
        if !advanced {
            // A duplicate or a probe: the sender may be missing our credit as well as our
            // acknowledgement, so both go out again.
            self.flows.get_mut(&flow).expect("present").recv.credit_sent = 0;
        }
        let r = &self.flows[&flow].recv;
        let urgent = r.fin_in_order() || r.next - r.acked_sent >= self.cfg.ack_bytes || !advanced;
        self.ack_dirty.insert(flow);
        let due = if urgent {
            now
        } else {
            now + self.cfg.ack_delay
        };
        self.ack_deadline = Some(self.ack_deadline.map_or(due, |d| d.min(due)));
        Ok(())
    }

    fn on_ack(&mut self, now: Instant, flow: u64, next: u64) -> Result<(), ProtoError> {
        let Some(f) = self.flows.get_mut(&flow) else {
            return Ok(());
        };
        let sent_end = f.send.end() + u64::from(f.send.fin);
        if next > sent_end {
            return Err(ProtoError::AckBeyondSent {
                flow,
                ack: next,
                sent: sent_end,
            });
        }
        if next <= f.send.acked {
            return Ok(());
        }
        if f.in_sched {
            self.sched
                .on_flow_ack(now, FlowId(flow), next)
                .map_err(|e| match e {
                    SchedError::AckBeyondSent { ack, sent, .. } => {
                        ProtoError::AckBeyondSent { flow, ack, sent }
                    }
                    e => sched_err(flow, e),
                })?;
        }
        let f = self.flows.get_mut(&flow).expect("present");
        f.send.acked = next;
        f.send.progress_at = now;
        let data_acked = next.min(f.send.end());
        let drop = (data_acked - f.send.base) as usize;
        let extra_before = send_extra(f.send.buf.len());
        f.send.buf.drain(..drop);
        f.send.base = data_acked;
        self.send_bytes -= drop as u64;
        self.send_extra = self.send_extra - extra_before + send_extra(f.send.buf.len());
        if drop > 0 && f.send.blocked {
            f.send.blocked = false;
            self.events.push_back(Event::Writable(flow));
        }
        self.check_done(now, flow);
        Ok(())
    }

    /// Close a flow once both directions are finished and acknowledged.
    fn check_done(&mut self, now: Instant, flow: u64) {
        let Some(f) = self.flows.get(&flow) else {
            return;
        };
        let sent_done = f.send.fin && f.send.acked == f.send.end() + 1;
        let recv_done = f.recv.eof_read;
        if f.phase == FlowPhase::Open && sent_done && recv_done {
            // The final acknowledgement of the peer's FIN goes out now, before we forget.
            let next = f.recv.next;
            self.queue_raw_ack(flow, next);
            self.forget_flow(now, flow);
            self.events.push_back(Event::FlowClosed(flow));
        }
    }

    fn forget_flow(&mut self, now: Instant, flow: u64) {
        if let Some(f) = self.flows.remove(&flow) {
            if f.phase == FlowPhase::Unannounced {
                self.unannounced.remove(&flow);
                self.unannounced_bytes -= f.recv.buffered;
            }
            self.recv_bytes -= f.recv.buffered;
            self.recv_extra -= f.recv.extra();
            self.send_bytes -= f.send.buf.len() as u64;
            self.send_extra -= send_extra(f.send.buf.len());
            self.leased -= f.send.lease;
            if f.in_sched {
                let _ = self.sched.close_flow(now, FlowId(flow));
            }
            if let Some(u) = f.user {
                if let Some(n) = self.user_flows.get_mut(&u) {
                    *n -= 1;
                    if *n == 0 {
                        self.user_flows.remove(&u);
                    }
                }
            }
        }
        self.ack_dirty.remove(&flow);
        self.mark_closed(flow);
    }

    // ----- output ------------------------------------------------------------------------

    fn push_ctrl(&mut self, frame: Frame<'_>) {
        let cseq = self.next_cseq;
        self.next_cseq += 1;
        self.ctrl_out.insert(
            cseq,
            CtrlEntry {
                bytes: frame.to_vec(),
                sent_at: None,
            },
        );
    }

    /// The usable path with the smallest smoothed RTT (for acknowledgements), if any.
    fn best_path(&self) -> Option<usize> {
        let mut best: Option<(u64, usize)> = None;
        for (i, p) in self.paths.iter().enumerate() {
            if !p.attached || p.stalled {
                continue;
            }
            let rtt = PathId::new(i)
                .and_then(|id| self.sched.path(id))
                .map_or(u64::MAX, |s| s.srtt.as_micros());
            if best.is_none_or(|(r, _)| rtt < r) {
                best = Some((rtt, i));
            }
        }
        best.map(|(_, i)| i).or_else(|| {
            // All stalled: an attached path still beats nothing.
            self.paths.iter().position(|p| p.attached)
        })
    }

    /// Whether no flow has been open for [`SessionConfig::idle_after`] (probes then go every
    /// [`SessionConfig::idle_ping_interval`]). The first flow after such a spell probes every
    /// path at once, and a path's silence counts from that probe: the idle probes left its
    /// last answer seconds old, which says nothing about a stall.
    fn probing_idle(&mut self, now: Instant) -> bool {
        let Some(slow) = self.cfg.idle_ping_interval else {
            self.no_flows_since = None;
            return false;
        };
        if self.flows.is_empty() {
            let since = *self.no_flows_since.get_or_insert(now);
            return now >= since + self.cfg.idle_after;
        }
        if let Some(since) = self.no_flows_since.take() {
            if now >= since + self.cfg.idle_after && slow > self.cfg.ping_interval {
                for p in self.paths.iter_mut().filter(|p| p.attached) {
                    p.next_ping = now;
                    p.silence_from = now;
                }
            }
        }
        false
    }

    /// How often each path is probed now: [`SessionConfig::ping_interval`], or
    /// [`SessionConfig::idle_ping_interval`] once no flow has been open for
    /// [`SessionConfig::idle_after`] (as of the last [`Session::poll_transmit`]).
    pub fn probe_interval(&self) -> Duration {
        match (self.cfg.idle_ping_interval, self.no_flows_since) {
            (Some(slow), Some(since)) if self.now >= since + self.cfg.idle_after => slow,
            _ => self.cfg.ping_interval,
        }
    }

    fn queue_raw_ack(&mut self, flow: u64, next: u64) {
        if let Some(i) = self.best_path() {
            Frame::Ack { flow, next }.encode(&mut self.paths[i].prio);
        }
    }

    /// Run timers and the scheduler; fill per-path output. Call after every input and when
    /// [`Session::poll_timeout`] expires.
    pub fn poll_transmit(&mut self, now: Instant, predictor: &dyn HandoverPredictor) {
        self.observe(now);
        self.check_hold(now);
        self.expire_unannounced(now);
        // Probes and stall detection.
        let idle = self.probing_idle(now);
        let ping_interval = match self.cfg.idle_ping_interval {
            Some(slow) if idle => slow,
            _ => self.cfg.ping_interval,
        };
        let stall_after = self.cfg.stall_after;
        for i in 0..self.paths.len() {
            let p = &mut self.paths[i];
            if !p.attached {
                continue;
            }
            if !p.stalled
                && now > p.last_rx.max(p.silence_from) + stall_after
                && p.ping_out.is_some()
            {
                p.stalled = true;
                if let Some(id) = PathId::new(i) {
                    if self.sched.path(id).is_some() {
                        self.sched.set_path_alive(now, id, false).expect("exists");
                    }
                }
                self.update_all_down(now);
            }
            let p = &mut self.paths[i];
            if now >= p.next_ping {
                p.ping_seq = p.ping_seq.wrapping_add(1);
                if idle {
                    // Seconds between probes: the path is silent until this one is answered.
                    p.silence_from = now;
                }
                Frame::Ping {
                    id: p.ping_seq,
                    sent_us: now.as_micros(),
                }
                .encode(&mut p.prio);
                if p.ping_out.is_none() {
                    p.ping_out = Some((p.ping_seq, now));
                }
                p.next_ping = now + ping_interval;
            }
        }
        // Reliable control frames: new ones and due repeats, on every usable path.
        let retransmit = self.cfg.ctrl_retransmit;
        let usable: Vec<usize> = (0..self.paths.len())
            .filter(|&i| self.paths[i].attached && !self.paths[i].stalled)
            .collect();
        let targets = if usable.is_empty() {
            (0..self.paths.len())
                .filter(|&i| self.paths[i].attached)
                .collect()
        } else {
            usable
        };
        if !targets.is_empty() {
            for e in self.ctrl_out.values_mut() {
                if e.sent_at.is_none_or(|t| now >= t + retransmit) {
                    e.sent_at = Some(now);
                    for &i in &targets {
                        self.paths[i].prio.extend_from_slice(&e.bytes);
                    }
                }
            }
        }
        if self.ctrl_ack_due {
            if let Some(i) = self.best_path() {
                Frame::CtrlAck {
                    next: self.ctrl_in_next,
                }
                .encode(&mut self.paths[i].prio);
                self.ctrl_ack_due = false;
            }
        }
        // Acknowledgements and credit.
        if self.ack_deadline.is_some_and(|d| now >= d) {
            if let Some(best) = self.best_path() {
                let dirty = std::mem::take(&mut self.ack_dirty);
                for flow in dirty {
                    let Some(f) = self.flows.get(&flow) else {
                        continue;
                    };
                    let grant = self.grantable_limit(f);
                    self.set_limit(flow, grant);
                    let f = self.flows.get_mut(&flow).expect("present");
                    let r = &mut f.recv;
                    let out = &mut self.paths[best].prio;
                    Frame::Ack { flow, next: r.next }.encode(out);
                    r.acked_sent = r.next;
                    if r.limit > r.credit_sent {
                        Frame::Credit {
                            flow,
                            limit: r.limit,
                        }
                        .encode(out);
                        r.credit_sent = r.limit;
                    }
                }
                self.ack_deadline = None;
            }
        }
        // Probes: a flow whose sent bytes stay unacknowledged, or that has bytes to send but
        // nothing in flight (waiting for credit that may have been lost), asks the peer to
        // repeat its acknowledgement and credit.
        if let Some(best) = self.best_path() {
            let probe = self.cfg.ack_probe;
            for (&flow, f) in self.flows.iter_mut() {
                let s = &mut f.send;
                if s.needs_probe() && now >= s.progress_at + probe {
                    s.progress_at = now;
                    let data_end = s.sent.min(s.end());
                    let fin = s.sent > s.end();
                    encode_data_header(&mut self.paths[best].prio, flow, data_end, fin, 0);
                }
            }
        }
        // Data.
        for _ in 0..MAX_DECISIONS_PER_POLL {
            let decision = self.sched.poll_decision(now, predictor);
            self.count_moves();
            let Some(d) = decision else {
                break;
            };
            let flow = d.flow.0;
            let Some(f) = self.flows.get_mut(&flow) else {
                continue;
            };
            let end_seq = d.offset + d.seq_len();
            if end_seq > f.send.sent {
                if f.send.sent <= f.send.acked {
                    // Nothing was outstanding: the probe clock starts now.
                    f.send.progress_at = now;
                }
                f.send.sent = end_seq;
            }
            let s = &f.send;
            if d.offset < s.base || d.offset + u64::from(d.len) > s.end() {
                continue;
            }
            let start = (d.offset - s.base) as usize;
            let len = d.len as usize;
            let (a, b) = s.buf.as_slices();
            let copies = d.paths.len() as u64;
            for pid in d.paths.iter() {
                let slot = &mut self.paths[pid.index()];
                let out = &mut slot.bulk;
                let before = out.len();
                encode_data_header(out, flow, d.offset, d.fin, len);
                let end = start + len;
                if start < a.len() {
                    out.extend_from_slice(&a[start..end.min(a.len())]);
                }
                if end > a.len() {
                    out.extend_from_slice(&b[start.saturating_sub(a.len())..end - a.len()]);
                }
                slot.counters.tx_bytes += (out.len() - before) as u64;
                slot.counters.data_bytes += len as u64;
                if d.reinjection {
                    slot.counters.reinjected_bytes += len as u64;
                }
            }
            if copies > 1 {
                // Count the extra copies on every path but the first.
                for pid in d.paths.iter().skip(1) {
                    self.paths[pid.index()].counters.redundant_bytes += len as u64;
                }
            }
        }
    }

    /// Whether an outage of every path can end the session: with flows open, on both ends (they
    /// are reset); without, on the proxy only, which then frees the session (its relay restarted
    /// under a new id, or comes back later to a fresh session under the same one).
    fn hold_matters(&self) -> bool {
        !self.flows.is_empty() || self.cfg.role == Role::Proxy
    }

    /// End the session now, as its hold time running out would, if no path is usable (every
    /// subflow gone, or silent for the stall time): every flow is reset
    /// ([`ResetReason::SessionLost`]) and [`Event::SessionLost`] follows. Returns whether it
    /// ended. The proxy calls it on a relay's earlier session when the same relay opens a new
    /// one: a relay that restarted (after a crash, or a gateway's power cut, whose subflows
    /// only fall silent) will never come back to the old session, so holding its passengers'
    /// connections for the hold time only keeps their servers waiting.
    pub fn end_if_all_paths_down(&mut self, now: Instant) -> bool {
        self.observe(now);
        if self.paths.iter().any(|p| p.attached && !p.stalled) {
            return false;
        }
        self.reset_all_flows(now, ResetReason::SessionLost);
        self.events.push_back(Event::SessionLost);
        self.paths_down(now);
        self.all_down_since = Some(now);
        true
    }

    /// (proxy) Fail the session if data has waited [`UNANNOUNCED_WAIT`] (with a usable path)
    /// for its flow's `OpenFlow`.
    fn expire_unannounced(&mut self, now: Instant) {
        if self.failed.is_some() || self.all_down_since.is_some() {
            return;
        }
        let clock = self.usable_clock(now);
        let oldest = self.unannounced.iter().min_by_key(|(_, &since)| since);
        if let Some((&flow, _)) = oldest.filter(|(_, &since)| clock >= since + UNANNOUNCED_WAIT) {
            let why = Unopened::NotInTime;
            self.fail(now, ProtoError::UnopenedFlow { flow, why });
        }
    }

    /// (proxy) When [`Session::expire_unannounced`] must look again: none while no path is
    /// usable (the wait stands still).
    fn unannounced_deadline(&self) -> Option<Instant> {
        if self.failed.is_some() || self.all_down_since.is_some() {
            return None;
        }
        let since = self.unannounced.values().min()?;
        let due = *since + UNANNOUNCED_WAIT;
        Some(self.usable_from + due.saturating_sub(self.usable_before))
    }

    fn check_hold(&mut self, now: Instant) {
        let Some(since) = self.all_down_since else {
            return;
        };
        if now > since + self.cfg.hold_time && self.hold_matters() {
            self.reset_all_flows(now, ResetReason::SessionLost);
            self.events.push_back(Event::SessionLost);
            // Start counting again so a later outage is judged on its own.
            self.all_down_since = Some(now);
        }
    }

    /// Whether `path` has bytes to write.
    pub fn has_output(&self, path: u8) -> bool {
        self.paths
            .get(usize::from(path))
            .is_some_and(|p| !p.prio.is_empty() || !p.bulk.is_empty())
    }

    /// Take everything queued for `path` (control frames first), to be written to its subflow
    /// in order. `out` is cleared first; its allocation is reused.
    pub fn take_output(&mut self, path: u8, out: &mut Vec<u8>) {
        out.clear();
        let Some(p) = self.paths.get_mut(usize::from(path)) else {
            return;
        };
        if p.prio.is_empty() {
            std::mem::swap(out, &mut p.bulk);
        } else {
            std::mem::swap(out, &mut p.prio);
            out.extend_from_slice(&p.bulk);
            p.bulk.clear();
        }
    }

    /// Next event for the shell.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When [`Session::poll_transmit`] must run again if nothing else happens.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut t: Option<Instant> = self.sched.poll_timeout();
        let mut consider = |x: Instant| t = Some(t.map_or(x, |y| y.min(x)));
        let any_attached = self.paths.iter().any(|p| p.attached);
        if let Some(d) = self.ack_deadline.filter(|_| any_attached) {
            consider(d);
        }
        for p in self.paths.iter().filter(|p| p.attached) {
            consider(p.next_ping);
            if !p.stalled && p.ping_out.is_some() {
                consider(p.last_rx.max(p.silence_from) + self.cfg.stall_after);
            }
        }
        if any_attached {
            if let Some(e) = self.ctrl_out.values().map(|e| e.sent_at).min() {
                consider(e.map_or(self.now, |s| s + self.cfg.ctrl_retransmit));
            }
        }
        if any_attached {
            for f in self.flows.values() {
                if f.send.needs_probe() {
                    consider(f.send.progress_at + self.cfg.ack_probe);
                }
            }
        }
        if let Some(since) = self.all_down_since {
            if self.hold_matters() {
                consider(since + self.cfg.hold_time + Duration::from_micros(1));
            }
        }
        if let Some(at) = self.unannounced_deadline() {
            consider(at);
        }
        t
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
mod tests {
    use super::*;

    fn proxy() -> Session {
        let mut s = Session::new(SessionConfig::new(Role::Proxy, 7, "minrtt")).unwrap();
        s.attach_path(Instant::ZERO, 0).unwrap();
        s
    }

    fn open(s: &mut Session, cseq: u64, flow: u64) {
        let f = Frame::OpenFlow {
            cseq,
            flow,
            user: IpAddr::from([10, 0, 0, 1]),
            dst: Destination::Addr(std::net::SocketAddr::from(([192, 0, 2, 1], 80))),
        };
        s.on_frame(Instant::ZERO, 0, f).unwrap();
    }

    /// A passenger's connection open for hours must not make the proxy remember every flow id
    /// closed after it one by one.
    #[test]
    fn closed_ids_stay_few_behind_a_long_lived_flow() {
        let mut s = proxy();
        open(&mut s, 0, 1);
        for flow in 2..5_000 {
            open(&mut s, flow - 1, flow);
            s.forget_flow(Instant::ZERO, flow);
        }
        assert!(s.closed_above.is_empty(), "{}", s.closed_above.len());
        assert!(!s.is_closed(1), "flow 1 is open");
        assert!(s.is_closed(2) && s.is_closed(4_999));
        assert!(!s.is_closed(5_000), "not seen yet");
        s.forget_flow(Instant::ZERO, 1);
        assert!(s.is_closed(1));
    }

    /// A fresh proxy session meets a relay whose flow ids start high (it talked to an earlier
    /// proxy session): the ids below are never seen, and what the proxy remembers stays bounded.
    #[test]
    fn closed_ids_stay_bounded_above_a_gap_that_never_fills() {
        let mut s = proxy();
        let base = 1_000_000;
        for i in 0..(MAX_CLOSED_ABOVE as u64 + 5_000) {
            open(&mut s, i, base + i);
            s.forget_flow(Instant::ZERO, base + i);
        }
        assert!(s.closed_above.len() <= MAX_CLOSED_ABOVE);
        assert!(s.is_closed(base) && s.is_closed(base + 20_000));
        assert!(s.is_closed(17), "ids below the skipped gap count as closed");
        assert!(!s.is_closed(base + 30_000), "not seen yet");
    }

    /// The relay reset a flow before its OpenFlow reached the proxy (the frames took different
    /// paths): the late OpenFlow must not connect to the destination.
    #[test]
    fn a_reset_ahead_of_its_open_keeps_the_flow_from_connecting() {
        let mut s = proxy();
        let reset = Frame::Reset {
            cseq: 1,
            flow: 5,
            reason: ResetReason::PeerReset,
        };
        s.on_frame(Instant::ZERO, 0, reset).unwrap();
        open(&mut s, 0, 5);
        while let Some(e) = s.poll_event() {
            assert!(
                !matches!(e, Event::FlowRequested { .. }),
                "late open went through: {e:?}"
            );
        }
        assert_eq!(s.open_flows(), 0);
        // The next flow is unaffected.
        open(&mut s, 2, 6);
        assert!(matches!(
            s.poll_event(),
            Some(Event::FlowRequested { flow: 6, .. })
        ));
    }

    #[test]
    fn ooo_fills_only_gaps() {
        let mut m = BTreeMap::new();
        insert_ooo(&mut m, 10, b"abcde"); // 10..15
        insert_ooo(&mut m, 20, b"uvw"); // 20..23
        insert_ooo(&mut m, 8, b"XXabcdefghijklmnoX"); // 8..26
        let joined: Vec<(u64, String)> = m
            .iter()
            .map(|(k, v)| (*k, String::from_utf8(v.clone()).unwrap()))
            .collect();
        assert_eq!(
            joined,
            vec![
                (8, "XX".into()),
                (10, "abcde".into()),
                (15, "fghij".into()),
                (20, "uvw".into()),
                (23, "noX".into())
            ]
        );
    }
}
