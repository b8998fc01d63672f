//! The schedulerlet interface: a name, a kind, and `apply(ctx, moves)`; optional hooks with
//! no-op defaults for the few stages that keep state.

use core::fmt;

use crate::flow::{FlowId, UserId};
use crate::path::{PathId, PathSet, PathState, MAX_PATHS};
use crate::predict::HandoverPredictor;
use crate::sets::{Moves, StageKind};
use crate::time::Instant;

/// Read-only view of every path, indexed by [`PathId`].
#[derive(Clone, Copy)]
pub struct PathView<'a> {
    pub(crate) paths: &'a [Option<PathState>; MAX_PATHS],
}

impl fmt::Debug for PathView<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.paths.iter().flatten().map(|p| p.id))
            .finish()
    }
}

impl<'a> PathView<'a> {
    /// The state of `path`.
    ///
    /// # Panics
    /// If `path` is not configured. Stages only see configured paths in S/C/U, so this is a bug.
    pub fn get(&self, path: PathId) -> &'a PathState {
        self.paths[path.index()]
            .as_ref()
            .expect("path in a set but not configured")
    }
    /// The state of `path`, if configured.
    pub fn try_get(&self, path: PathId) -> Option<&'a PathState> {
        self.paths[path.index()].as_ref()
    }
    /// Paths of `set` whose window has room.
    pub fn with_room(&self, set: PathSet) -> PathSet {
        set.iter().filter(|p| self.get(*p).has_room()).collect()
    }
}

/// The chunk being placed and the flow it belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkView {
    /// Owner of the flow.
    pub user: UserId,
    /// The flow.
    pub flow: FlowId,
    /// First sequence number of the chunk.
    pub offset: u64,
    /// Sequence space of the chunk: data bytes, plus one if it carries the FIN.
    pub seq_len: u64,
    /// Whether this is a reinjection of a chunk sent before.
    pub reinjection: bool,
    /// Paths that already carried this chunk (never used again for it).
    pub carried_on: PathSet,
    /// Whether the flow's FIN or RST has been seen: every remaining chunk is a tail chunk.
    pub tail: bool,
    /// Bytes of the flow not yet sent, including this chunk and pending reinjections.
    pub remaining_bytes: u64,
    /// Bytes of the flow sent but not yet cumulatively acknowledged.
    pub unacked_bytes: u64,
    /// Flow-control window left at the receiver (credit beyond the cumulative ack);
    /// `u64::MAX` when the flow is not credit-limited.
    pub window_bytes: u64,
    /// Sequence just past the data the flow may send now: what the source gave, within the
    /// receiver's credit (the FIN not counted). For a chunk of new data, `offset` is the
    /// flow's lowest unsent byte, so `data_end - offset` bounds how far ahead of it a chunk
    /// can be placed ([`Schedulerlet::place_ahead`]).
    pub data_end: u64,
}

impl ChunkView {
    /// Bytes of the chunk's flow still in play: not yet sent (this chunk included) plus sent
    /// and not yet acknowledged. A flow is *thin* (`minrtt(thin_bytes)`, `ori(thin_bytes)`)
    /// while this is at most the stage's `thin_bytes`.
    pub fn flow_bytes(&self) -> u64 {
        self.remaining_bytes.saturating_add(self.unacked_bytes)
    }
}

/// Train context shared by the stages.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TrainContext {
    /// Train speed from the recent GPS trajectory, m/s; `None` until known.
    pub speed_mps: Option<f64>,
    /// When `speed_mps` was measured.
    pub speed_at: Instant,
}

/// Everything a stage may read while deciding.
#[derive(Clone, Copy)]
pub struct StageCtx<'a> {
    /// The decision time.
    pub now: Instant,
    /// Live (connected) paths: exactly S ∪ C ∪ U.
    pub live: PathSet,
    /// All path states.
    pub paths: PathView<'a>,
    /// The chunk being placed.
    pub chunk: ChunkView,
    /// Train context (speed).
    pub train: TrainContext,
    /// Handover predictor (LinkDB in production; fakes in tests).
    pub predictor: &'a dyn HandoverPredictor,
}

impl fmt::Debug for StageCtx<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StageCtx")
            .field("now", &self.now)
            .field("live", &self.live)
            .field("chunk", &self.chunk)
            .field("train", &self.train)
            .finish_non_exhaustive()
    }
}

/// Path events a stage may want to hear about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathEvent {
    /// A retransmission timeout fired on the path.
    Rto,
    /// The path was reset or removed; its in-flight data was reinjected.
    Reset,
}

/// One modular step of a multipath scheduler (paper §4.2).
///
/// Required: [`name`](Schedulerlet::name), [`kind`](Schedulerlet::kind) and
/// [`apply`](Schedulerlet::apply). `apply` may only make the moves its kind allows; the
/// [`Moves`] handle enforces this and records every move for the trace.
pub trait Schedulerlet: Send + fmt::Debug {
    /// Short name as used in pipeline specs (`"minrtt"`).
    fn name(&self) -> &'static str;
    /// Which moves the stage makes.
    fn kind(&self) -> StageKind;
    /// Parameters that differ from the stage's defaults, as `key=value` pairs in spec syntax
    /// (`"tau=4,displace=0"`), so the canonical spec names the stage that actually runs.
    /// Default: none.
    fn params(&self) -> alloc::string::String {
        alloc::string::String::new()
    }
    /// Move paths between the sets for the chunk in `ctx`.
    fn apply(&mut self, ctx: &StageCtx<'_>, moves: &mut Moves<'_>);
    /// The pipeline chose `sent_on` (the final S, not empty) for the chunk of `ctx`, a chunk
    /// of new data starting at the flow's lowest unsent byte: how many bytes ahead of that
    /// byte the chunk should go instead. The driver then sends the first never-sent bytes at
    /// or after `offset + ahead` (which must lie below [`ChunkView::data_end`]), leaving the
    /// bytes in between to be sent in order later. The largest answer of all stages counts.
    /// Default: 0, in order.
    fn place_ahead(&mut self, _ctx: &StageCtx<'_>, _sent_on: PathSet) -> u64 {
        0
    }
    /// The chunk of `ctx` was sent on `sent_on` (the final S). Default: nothing.
    fn on_sent(&mut self, _ctx: &StageCtx<'_>, _sent_on: PathSet) {}
    /// An event on `path`. Default: nothing.
    fn on_path_event(&mut self, _now: Instant, _path: PathId, _event: PathEvent) {}
    /// The flow closed; drop any per-flow state. Default: nothing.
    fn on_flow_closed(&mut self, _flow: FlowId) {}
    /// The user has no flows left; drop any per-user state. Default: nothing.
    fn on_user_closed(&mut self, _user: UserId) {}
}
