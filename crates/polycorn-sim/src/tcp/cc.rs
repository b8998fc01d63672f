//! Congestion control: the algorithm choice and the controller of one subflow.

use super::ack::AckEvent;
use super::bbr::Bbr;
use super::cubic::Cubic;
use super::{Duration, Instant, TcpConfig};

/// Which congestion controller a subflow runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum CongestionControl {
    /// CUBIC (RFC 9438) with HyStart, as Linux `tcp_cubic.c`.
    #[default]
    Cubic,
    /// BBR v1, as Linux `tcp_bbr.c` (with its ACK-aggregation allowance, without the
    /// long-term policer model).
    Bbr,
}

impl CongestionControl {
    /// The names it is known by (Linux's `net.ipv4.tcp_congestion_control` names).
    pub const NAMES: &'static str = "cubic, bbr";

    /// The controller Linux names `name`, if the model has it.
    pub fn from_name(name: &str) -> Option<CongestionControl> {
        match name {
            "cubic" => Some(CongestionControl::Cubic),
            "bbr" => Some(CongestionControl::Bbr),
            _ => None,
        }
    }
}

/// The controller of one subflow (enum dispatch: no allocation, no trait objects).
#[derive(Clone, Debug)]
pub(crate) enum Cc {
    Cubic(Cubic),
    Bbr(Bbr),
}

impl Cc {
    pub(crate) fn new(cfg: &TcpConfig) -> Cc {
        match cfg.cc {
            CongestionControl::Cubic => Cc::Cubic(Cubic::new(cfg)),
            CongestionControl::Bbr => Cc::Bbr(Bbr::new(cfg)),
        }
    }
    /// Congestion window in segments.
    pub(crate) fn cwnd(&self) -> u32 {
        match self {
            Cc::Cubic(c) => c.cwnd(),
            Cc::Bbr(b) => b.cwnd(),
        }
    }
    /// Slow-start threshold in segments (`u32::MAX` when unset).
    pub(crate) fn ssthresh(&self) -> u32 {
        match self {
            Cc::Cubic(c) => c.ssthresh(),
            Cc::Bbr(_) => u32::MAX,
        }
    }
    /// Pacing rate in bytes per second, when the controller paces.
    pub(crate) fn pacing_rate(&self) -> Option<u64> {
        match self {
            Cc::Cubic(c) => c.pacing_rate(),
            Cc::Bbr(b) => Some(b.pacing_rate()),
        }
    }
    /// Does the controller own the window entirely (Linux `cong_control`: BBR)? Such
    /// controllers skip `tcp_cwnd_restart`.
    pub(crate) fn owns_window(&self) -> bool {
        matches!(self, Cc::Bbr(_))
    }
    pub(crate) fn on_ack(&mut self, ev: &AckEvent) {
        match self {
            Cc::Cubic(c) => c.on_ack(ev),
            Cc::Bbr(b) => b.on_ack(ev),
        }
    }
    /// Fast recovery begins (`tcp_init_cwnd_reduction`: ssthresh; the window itself follows
    /// the sender's proportional rate reduction unless the controller owns it).
    pub(crate) fn on_enter_recovery(&mut self, now: Instant) {
        match self {
            Cc::Cubic(c) => c.on_loss(now),
            Cc::Bbr(b) => b.save_cwnd(false),
        }
    }
    /// A tail-loss probe repaired a loss: reduce once (CWR entered and left at once).
    pub(crate) fn on_cwr(&mut self) {
        match self {
            Cc::Cubic(c) => c.on_cwr(),
            Cc::Bbr(b) => b.save_cwnd(false),
        }
    }
    /// Set the window in segments (proportional rate reduction); ignored by controllers that
    /// own their window.
    pub(crate) fn set_cwnd(&mut self, segments: u32) {
        if let Cc::Cubic(c) = self {
            c.set_cwnd(segments);
        }
    }
    /// The retransmission timer fired (`tcp_enter_loss`); `in_flight` after marking all lost;
    /// `from_open`: the first timeout since the state was Open (ssthresh is recomputed).
    pub(crate) fn on_rto(&mut self, in_flight: u32, from_open: bool) {
        match self {
            Cc::Cubic(c) => c.on_rto(in_flight, from_open),
            Cc::Bbr(b) => b.on_rto(in_flight, from_open),
        }
    }
    /// A segment goes out with nothing in flight, `idle` after the last one
    /// (`CA_EVENT_TX_START`).
    pub(crate) fn on_tx_start(&mut self, now: Instant, idle: Duration, app_limited: bool) {
        match self {
            Cc::Cubic(c) => c.on_tx_start(now, idle),
            Cc::Bbr(b) => b.on_tx_start(now, app_limited),
        }
    }
    /// `tcp_cwnd_restart`: slow start after `idle` with retransmission timeout `rto`.
    pub(crate) fn restart_after_idle(&mut self, idle: Duration, rto: Duration, iw: u32) {
        if let Cc::Cubic(c) = self {
            c.restart_after_idle(idle, rto, iw);
        }
    }
}
