//! The three path sets of a decision (S selected, C candidate, U unavailable), the four stage
//! kinds that may move paths between them, and the bounded trace of every move.
//!
//! A stage never touches the sets directly: it gets a [`Moves`] handle bound to its kind, which
//! refuses moves its kind may not make (paper §4.2) and records every move it does make.

use core::fmt;

use alloc::vec::Vec;

use crate::path::{PathId, PathSet, MAX_PATHS};
use crate::time::Duration;

/// Which set a path is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SetName {
    /// S: the paths the chunk will be sent on.
    Selected,
    /// C: paths that may still be selected.
    Candidate,
    /// U: paths that may not be selected (only a hard selector can revive them).
    Unavailable,
}

impl fmt::Display for SetName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SetName::Selected => "S",
            SetName::Candidate => "C",
            SetName::Unavailable => "U",
        })
    }
}

/// The four kinds of schedulerlet (paper §4.2) and the moves each may make.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StageKind {
    /// C → U.
    CandidateFilter,
    /// C → S.
    SoftSelector,
    /// S → C.
    SelectionFilter,
    /// C → S or U → S ("revive").
    HardSelector,
}

impl fmt::Display for StageKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StageKind::CandidateFilter => "candidate filter",
            StageKind::SoftSelector => "soft selector",
            StageKind::SelectionFilter => "selection filter",
            StageKind::HardSelector => "hard selector",
        })
    }
}

/// Why a path moved. Values are carried so a trace explains the numbers behind a decision.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Reason {
    /// The chunk was already sent on this path (per-chunk bitmap; never resend on it).
    AlreadyCarried,
    /// HPR: predicted time to the next handover failure is below the threshold L.
    HandoverFailureSoon {
        /// Predicted time until the failure.
        t_hof: Duration,
        /// L = RTT + E_GPS / V.
        threshold: Duration,
    },
    /// Location table: the train is inside a recorded handover zone of this path.
    InHandoverZone,
    /// minRTT: lowest smoothed RTT among paths with window room.
    LowestRtt {
        /// The path's smoothed RTT.
        srtt: Duration,
    },
    /// minRTT with `thin_bytes`: lowest smoothed RTT for a thin flow's chunk, on a path whose
    /// window is full but whose socket holds few unsent bytes.
    LowestRttThin {
        /// The path's smoothed RTT.
        srtt: Duration,
        /// Bytes already waiting unsent on the path.
        notsent_bytes: u64,
    },
    /// Round robin: next path in turn with window room.
    NextInTurn,
    /// Redundant: every path with window room.
    AllPaths,
    /// Single path: the user's assigned path.
    AssignedToUser,
    /// TPR: a tail chunk would finish later on this path than on the best other path.
    TailSlower {
        /// T⁻(i): lower bound of completion when using path i.
        t_minus: Duration,
        /// T⁺(i): upper bound of completion without path i.
        t_plus: Duration,
    },
    /// TPR: the path it turned the tail chunk away from another for can take the chunk now,
    /// and would deliver it sooner.
    TailSooner {
        /// T⁻ of this path.
        t_minus: Duration,
        /// T⁻ of the path turned away.
        t_rejected: Duration,
    },
    /// ORI: the path is idle; the chunk is duplicated onto it.
    IdleProbe {
        /// Copies (including this one) still to duplicate onto the path.
        copies_left: u32,
    },
    /// ORI with `thin_bytes`: the chunk's flow is thin (little unsent or unacknowledged), so
    /// it is copied onto every path with room.
    ThinFlow {
        /// The flow's unsent plus unacknowledged bytes.
        flow_bytes: u64,
    },
    /// BLEST: sending on the slow path would block the fast path in the send window.
    BlestWouldBlock {
        /// Bytes the fast path is expected to send during the slow path's RTT (× λ).
        fast_bytes: u64,
        /// Window space left if the chunk goes to the slow path.
        avail_bytes: u64,
    },
    /// ECF: waiting for the fastest path completes earlier than using the slower one.
    EcfWaitForFastest,
    /// STMS: the flow has no data (or no receiver credit) as far ahead as the slow path's
    /// chunk would have to go, so the chunk waits for the fast path.
    StmsNoDataAhead {
        /// Bytes the fast path is expected to deliver before a byte sent on this path arrives.
        gap_bytes: u64,
        /// Bytes from the flow's lowest unsent byte to the end of what it may send now.
        available_bytes: u64,
    },
    /// MuSher: the path's turn in the ratio round.
    RatioTurn {
        /// The path's share of the chunks, per mille.
        share_permille: u32,
    },
    /// Stale: the path's subflow is waiting out a retransmission timeout.
    RtoBackoff {
        /// The subflow's RTO backoff (consecutive timeouts without progress).
        backoff: u32,
    },
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::AlreadyCarried => f.write_str("chunk already carried on this path"),
            Reason::HandoverFailureSoon { t_hof, threshold } => {
                write!(f, "handover failure predicted in {t_hof} < L = {threshold}")
            }
            Reason::InHandoverZone => f.write_str("inside a recorded handover zone"),
            Reason::LowestRtt { srtt } => write!(f, "lowest RTT ({srtt}) with window room"),
            Reason::LowestRttThin {
                srtt,
                notsent_bytes,
            } => write!(
                f,
                "thin flow: lowest RTT ({srtt}), window full, {notsent_bytes} B waiting unsent"
            ),
            Reason::NextInTurn => f.write_str("next in round-robin turn with window room"),
            Reason::AllPaths => f.write_str("redundant: every path with window room"),
            Reason::AssignedToUser => f.write_str("the user's assigned path"),
            Reason::TailSlower { t_minus, t_plus } => {
                write!(f, "tail chunk: T- = {t_minus} > T+ = {t_plus}")
            }
            Reason::TailSooner {
                t_minus,
                t_rejected,
            } => write!(
                f,
                "tail chunk: window room and T- = {t_minus}, sooner than {t_rejected} on the path turned away"
            ),
            Reason::IdleProbe { copies_left } => {
                write!(f, "idle path: redundant copy ({copies_left} left)")
            }
            Reason::ThinFlow { flow_bytes } => {
                write!(f, "thin flow ({flow_bytes} B unsent or unacked): copy on every path")
            }
            Reason::BlestWouldBlock { fast_bytes, avail_bytes } => write!(
                f,
                "fast path would send {fast_bytes} B in the slow RTT, only {avail_bytes} B of window left"
            ),
            Reason::EcfWaitForFastest => f.write_str("waiting for the fastest path completes earlier"),
            Reason::StmsNoDataAhead { gap_bytes, available_bytes } => write!(
                f,
                "slow path's chunk belongs {gap_bytes} B ahead, only {available_bytes} B sendable"
            ),
            Reason::RatioTurn { share_permille } => {
                write!(f, "its turn in the ratio round (share {share_permille}‰)")
            }
            Reason::RtoBackoff { backoff } => {
                write!(f, "subflow waiting out a retransmission timeout (backoff {backoff})")
            }
        }
    }
}

/// One move of one path between sets.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Move {
    /// Which attempt of the poll this move belongs to (a poll may try several flows).
    pub attempt: u16,
    /// The stage that moved it (`"chunk"` for the per-chunk bitmap applied before the pipeline).
    pub stage: &'static str,
    /// The stage's kind (`None` for the per-chunk bitmap).
    pub kind: Option<StageKind>,
    /// The path moved.
    pub path: PathId,
    /// Set it left.
    pub from: SetName,
    /// Set it entered.
    pub to: SetName,
    /// Why.
    pub reason: Reason,
}

impl fmt::Display for Move {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "#{} {}: {} {}->{} ({})",
            self.attempt, self.stage, self.path, self.from, self.to, self.reason
        )
    }
}

/// The S/C/U sets of one decision. Always disjoint; their union is the live paths.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PathSets {
    selected: PathSet,
    candidates: PathSet,
    unavailable: PathSet,
    /// Paths a stage of this decision moved out of S or into U: only a hard selector brings
    /// them back ([`Moves::reselect`] does not).
    turned_away: PathSet,
}

impl PathSets {
    /// All `live` paths in C, except those in `forbidden` (which start in U).
    pub fn start(live: PathSet, forbidden: PathSet) -> Self {
        PathSets {
            selected: PathSet::EMPTY,
            candidates: live.difference(forbidden),
            unavailable: live.intersection(forbidden),
            turned_away: PathSet::EMPTY,
        }
    }
    /// S.
    pub fn selected(&self) -> PathSet {
        self.selected
    }
    /// C.
    pub fn candidates(&self) -> PathSet {
        self.candidates
    }
    /// U.
    pub fn unavailable(&self) -> PathSet {
        self.unavailable
    }
    /// S ∪ C ∪ U.
    pub fn all(&self) -> PathSet {
        self.selected.union(self.candidates).union(self.unavailable)
    }
    /// Which set holds `path`, if any.
    pub fn set_of(&self, path: PathId) -> Option<SetName> {
        if self.selected.contains(path) {
            Some(SetName::Selected)
        } else if self.candidates.contains(path) {
            Some(SetName::Candidate)
        } else if self.unavailable.contains(path) {
            Some(SetName::Unavailable)
        } else {
            None
        }
    }
    fn take(&mut self, path: PathId, from: SetName) {
        match from {
            SetName::Selected => self.selected.remove(path),
            SetName::Candidate => self.candidates.remove(path),
            SetName::Unavailable => self.unavailable.remove(path),
        }
    }
    fn put(&mut self, path: PathId, to: SetName) {
        match to {
            SetName::Selected => self.selected.insert(path),
            SetName::Candidate => self.candidates.insert(path),
            SetName::Unavailable => self.unavailable.insert(path),
        }
    }
}

/// Default bound on recorded moves per poll.
pub const DEFAULT_TRACE_CAPACITY: usize = 256;

/// A bounded record of the moves of the latest poll. Moves beyond the capacity are counted,
/// not stored.
#[derive(Clone, Debug)]
pub struct Trace {
    moves: Vec<Move>,
    capacity: usize,
    dropped: u32,
    enabled: bool,
}

impl Trace {
    /// A trace keeping at most `capacity` moves; `capacity == 0` disables recording.
    pub fn with_capacity(capacity: usize) -> Self {
        Trace {
            moves: Vec::with_capacity(capacity),
            capacity,
            dropped: 0,
            enabled: capacity > 0,
        }
    }
    /// The recorded moves, oldest first.
    pub fn moves(&self) -> &[Move] {
        &self.moves
    }
    /// Moves that did not fit.
    pub fn dropped(&self) -> u32 {
        self.dropped
    }
    pub(crate) fn clear(&mut self) {
        self.moves.clear();
        self.dropped = 0;
    }
    pub(crate) fn record(&mut self, m: Move) {
        if !self.enabled {
            return;
        }
        if self.moves.len() < self.capacity {
            self.moves.push(m);
        } else {
            self.dropped = self.dropped.saturating_add(1);
        }
    }
}

/// The paths the stages rejected (C → U) for one chunk, and the first prediction-based reason
/// behind each (HPR's predicted failure, the location table's handover zone). The scheduler
/// turns changes of the latter into [`crate::scheduler::SchedEvent`]s, whether or not the
/// trace is recording.
#[derive(Debug, Clone)]
pub(crate) struct Rejections {
    /// Every path a stage moved from C to U.
    pub(crate) any: PathSet,
    /// The paths rejected for a predicted handover.
    pub(crate) predicted: PathSet,
    /// For each path in `predicted`: the stage and its reason.
    pub(crate) why: [Option<(&'static str, Reason)>; MAX_PATHS],
}

impl Default for Rejections {
    fn default() -> Self {
        Rejections {
            any: PathSet::EMPTY,
            predicted: PathSet::EMPTY,
            why: [None; MAX_PATHS],
        }
    }
}

impl Rejections {
    pub(crate) fn clear(&mut self) {
        for p in self.predicted.iter() {
            self.why[p.index()] = None;
        }
        self.any = PathSet::EMPTY;
        self.predicted = PathSet::EMPTY;
    }

    fn note(&mut self, path: PathId, stage: &'static str, reason: Reason) {
        self.any.insert(path);
        let predicted = matches!(
            reason,
            Reason::HandoverFailureSoon { .. } | Reason::InHandoverZone
        );
        if predicted && !self.predicted.contains(path) {
            self.predicted.insert(path);
            self.why[path.index()] = Some((stage, reason));
        }
    }
}

/// A stage's handle on the sets: only the moves its kind allows, each one recorded.
#[derive(Debug)]
pub struct Moves<'a> {
    sets: &'a mut PathSets,
    trace: &'a mut Trace,
    rejections: &'a mut Rejections,
    stage: &'static str,
    kind: StageKind,
    attempt: u16,
    never: PathSet,
}

impl<'a> Moves<'a> {
    pub(crate) fn new(
        sets: &'a mut PathSets,
        trace: &'a mut Trace,
        rejections: &'a mut Rejections,
        stage: &'static str,
        kind: StageKind,
        attempt: u16,
        never: PathSet,
    ) -> Self {
        Moves {
            sets,
            trace,
            rejections,
            stage,
            kind,
            attempt,
            never,
        }
    }

    /// S.
    pub fn selected(&self) -> PathSet {
        self.sets.selected
    }
    /// C.
    pub fn candidates(&self) -> PathSet {
        self.sets.candidates
    }
    /// U.
    pub fn unavailable(&self) -> PathSet {
        self.sets.unavailable
    }

    fn do_move(&mut self, path: PathId, from: SetName, to: SetName, reason: Reason) -> bool {
        if self.sets.set_of(path) != Some(from) {
            return false;
        }
        self.sets.take(path, from);
        self.sets.put(path, to);
        if from == SetName::Selected || to == SetName::Unavailable {
            self.sets.turned_away.insert(path);
        }
        self.trace.record(Move {
            attempt: self.attempt,
            stage: self.stage,
            kind: Some(self.kind),
            path,
            from,
            to,
            reason,
        });
        true
    }

    /// Candidate filter: C → U. Returns whether the path moved.
    pub fn reject(&mut self, path: PathId, reason: Reason) -> bool {
        debug_assert_eq!(
            self.kind,
            StageKind::CandidateFilter,
            "{}: reject()",
            self.stage
        );
        let moved = self.kind == StageKind::CandidateFilter
            && self.do_move(path, SetName::Candidate, SetName::Unavailable, reason);
        if moved {
            self.rejections.note(path, self.stage, reason);
        }
        moved
    }

    /// Soft selector: C → S. Returns whether the path moved.
    pub fn select(&mut self, path: PathId, reason: Reason) -> bool {
        debug_assert_eq!(
            self.kind,
            StageKind::SoftSelector,
            "{}: select()",
            self.stage
        );
        self.kind == StageKind::SoftSelector
            && self.do_move(path, SetName::Candidate, SetName::Selected, reason)
    }

    /// Selection filter: S → C. Returns whether the path moved.
    pub fn unselect(&mut self, path: PathId, reason: Reason) -> bool {
        debug_assert_eq!(
            self.kind,
            StageKind::SelectionFilter,
            "{}: unselect()",
            self.stage
        );
        self.kind == StageKind::SelectionFilter
            && self.do_move(path, SetName::Selected, SetName::Candidate, reason)
    }

    /// Selection filter, after it unselected every selected path in favour of `path`: C → S.
    /// (TPR: the tail chunk goes to the path that delivers it sooner when that path can take it
    /// now, instead of waiting for a selector that ranks the paths otherwise.) Refused while S
    /// holds a path, and for a path some stage of this decision turned away (out of S, or into
    /// U). Returns whether the path moved.
    pub fn reselect(&mut self, path: PathId, reason: Reason) -> bool {
        debug_assert_eq!(
            self.kind,
            StageKind::SelectionFilter,
            "{}: reselect()",
            self.stage
        );
        self.kind == StageKind::SelectionFilter
            && self.sets.selected.is_empty()
            && !self.sets.turned_away.contains(path)
            && self.do_move(path, SetName::Candidate, SetName::Selected, reason)
    }

    /// Hard selector: C or U → S. A path that already carried this chunk is never revived.
    /// Returns whether the path moved.
    pub fn revive(&mut self, path: PathId, reason: Reason) -> bool {
        debug_assert_eq!(
            self.kind,
            StageKind::HardSelector,
            "{}: revive()",
            self.stage
        );
        if self.kind != StageKind::HardSelector || self.never.contains(path) {
            return false;
        }
        let from = match self.sets.set_of(path) {
            Some(SetName::Candidate) => SetName::Candidate,
            Some(SetName::Unavailable) => SetName::Unavailable,
            _ => return false,
        };
        self.do_move(path, from, SetName::Selected, reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(i: usize) -> PathId {
        PathId::new(i).unwrap()
    }

    #[test]
    fn kinds_are_enforced_in_release_semantics() {
        let mut sets = PathSets::start(PathSet::from_bits(0b111), PathSet::single(p(2)));
        let mut trace = Trace::with_capacity(8);
        let mut rej = Rejections::default();
        {
            let mut m = Moves::new(
                &mut sets,
                &mut trace,
                &mut rej,
                "f",
                StageKind::CandidateFilter,
                0,
                PathSet::single(p(2)),
            );
            assert!(m.reject(p(0), Reason::InHandoverZone));
            assert!(!m.reject(p(0), Reason::InHandoverZone), "already in U");
        }
        {
            let mut m = Moves::new(
                &mut sets,
                &mut trace,
                &mut rej,
                "h",
                StageKind::HardSelector,
                0,
                PathSet::single(p(2)),
            );
            assert!(
                !m.revive(p(2), Reason::IdleProbe { copies_left: 1 }),
                "carried paths stay out"
            );
            assert!(m.revive(p(0), Reason::IdleProbe { copies_left: 1 }));
        }
        assert_eq!(sets.selected(), PathSet::single(p(0)));
        assert_eq!(sets.all(), PathSet::from_bits(0b111));
        assert_eq!(trace.moves().len(), 2);
        assert_eq!(trace.moves()[1].from, SetName::Unavailable);
        assert_eq!(rej.any, PathSet::single(p(0)));
        assert_eq!(rej.predicted, PathSet::single(p(0)));
        assert_eq!(rej.why[0], Some(("f", Reason::InHandoverZone)));
        rej.clear();
        assert_eq!(rej.why[0], None);
        assert!(rej.any.is_empty() && rej.predicted.is_empty());
    }

    #[test]
    fn trace_is_bounded() {
        let mut t = Trace::with_capacity(1);
        let m = Move {
            attempt: 0,
            stage: "x",
            kind: None,
            path: p(0),
            from: SetName::Candidate,
            to: SetName::Unavailable,
            reason: Reason::AlreadyCarried,
        };
        t.record(m);
        t.record(m);
        assert_eq!(t.moves().len(), 1);
        assert_eq!(t.dropped(), 1);
    }
}
