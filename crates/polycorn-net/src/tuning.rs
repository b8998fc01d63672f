//! Session tunables shared by relay and proxy, and the subflow socket options and session
//! configuration they make.

use std::time::Duration;

use polycorn_proto::{Role, SessionConfig};

use crate::config::{Limits, ProxyConfig, RelayConfig, DEFAULT_CONGESTION, SYSTEM_CONGESTION};
use crate::subflow;

/// Session tunables shared by relay and proxy.
#[derive(Clone, Debug)]
pub struct Tuning {
    /// Per-flow window, bytes.
    pub flow_window: u64,
    /// Per-passenger window, bytes.
    pub user_window: u64,
    /// Flow limit.
    pub max_flows: usize,
    /// Hold time for outages of every path.
    pub hold_time: Duration,
    /// Congestion control for subflows and baseline tunnels (`None`: the system default).
    /// From a configuration: the one it names, [`DEFAULT_CONGESTION`] when it names none, and
    /// `None` for [`SYSTEM_CONGESTION`]; the daemons fall back to `None` where the host lacks
    /// the default.
    pub congestion: Option<String>,
    /// `TCP_RTO_MAX_MS` of subflows, ms (`None`: the kernel's). Baseline tunnels keep the
    /// kernel's.
    pub rto_max_ms: Option<u32>,
    /// Probe interval once a session has had no flow open for `idle_after` (`None`: no slower
    /// probing; see [`SessionConfig::idle_ping_interval`]).
    pub idle_probe: Option<Duration>,
    /// See [`SessionConfig::idle_after`].
    pub idle_after: Duration,
    /// The scheduler's window gain (`None`: the kernel's window as it is; see
    /// [`polycorn_sched::scheduler::SchedConfig::window_gain`]).
    pub window_gain: Option<f64>,
    /// Most bytes one session holds in its flows' buffers (see
    /// [`SessionConfig::session_buffer`]).
    pub session_buffer: u64,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            flow_window: 4 << 20,
            user_window: 16 << 20,
            max_flows: 65_536,
            hold_time: Duration::from_secs(30),
            congestion: None,
            rto_max_ms: None,
            idle_probe: Some(Duration::from_secs(crate::config::DEFAULT_IDLE_PROBE_S)),
            idle_after: Duration::from_secs(crate::config::DEFAULT_IDLE_PROBE_AFTER_S),
            window_gain: Some(polycorn_sched::scheduler::DEFAULT_WINDOW_GAIN),
            session_buffer: SessionConfig::new(Role::Relay, 0, "").session_buffer,
        }
    }
}

impl Tuning {
    /// The socket options of this side's subflows.
    pub fn subflow_sockopts(&self) -> subflow::SubflowSockopts {
        subflow::SubflowSockopts {
            congestion: self.congestion.clone(),
            rto_max_ms: self.rto_max_ms,
            mtu: None,
        }
    }

    /// A session configuration with these tunables.
    pub fn session_config(&self, role: Role, id: u64, pipeline: &str) -> SessionConfig {
        let mut c = SessionConfig::new(role, id, pipeline);
        c.flow_window = self.flow_window;
        c.user_window = self.user_window.max(self.flow_window);
        c.max_flows = self.max_flows;
        c.hold_time =
            polycorn_sched::time::Duration::from_micros(self.hold_time.as_micros() as u64);
        c.idle_ping_interval = self
            .idle_probe
            .map(|d| polycorn_sched::time::Duration::from_micros(d.as_micros() as u64));
        c.idle_after =
            polycorn_sched::time::Duration::from_micros(self.idle_after.as_micros() as u64);
        c.sched.window_gain = self.window_gain;
        c.session_buffer = self.session_buffer;
        c
    }
}

impl Tuning {
    /// The relay's tunables, from `[relay]` and `[limits]` of its configuration.
    pub fn of_relay(cfg: &RelayConfig) -> Tuning {
        let r = &cfg.relay;
        Tuning::from_settings(
            &cfg.limits,
            r.hold_time(),
            r.congestion.clone(),
            r.rto_max_ms,
            (r.idle_probe(), r.idle_probe_after()),
            r.window_gain(),
        )
    }

    /// The proxy's tunables, from `[proxy]` and `[limits]` of its configuration.
    pub fn of_proxy(cfg: &ProxyConfig) -> Tuning {
        let p = &cfg.proxy;
        Tuning::from_settings(
            &cfg.limits,
            p.hold_time(),
            p.congestion.clone(),
            p.rto_max_ms,
            (p.idle_probe(), p.idle_probe_after()),
            p.window_gain(),
        )
    }

    /// The congestion control a configuration's `congestion` asks for (see
    /// [`Tuning::congestion`]).
    pub fn congestion_of(configured: Option<&str>) -> Option<String> {
        match configured {
            None => Some(DEFAULT_CONGESTION.to_string()),
            Some(SYSTEM_CONGESTION) => None,
            Some(name) => Some(name.to_string()),
        }
    }

    fn from_settings(
        limits: &Limits,
        hold: Duration,
        cc: Option<String>,
        rto_max_ms: Option<u32>,
        idle_probe: (Option<Duration>, Duration),
        window_gain: Option<f64>,
    ) -> Tuning {
        Tuning {
            flow_window: limits.flow_window_bytes,
            user_window: limits.user_window_bytes,
            max_flows: limits.max_flows as usize,
            hold_time: hold,
            congestion: Tuning::congestion_of(cc.as_deref()),
            rto_max_ms,
            idle_probe: idle_probe.0,
            idle_after: idle_probe.1,
            window_gain,
            session_buffer: limits.session_buffer_bytes,
        }
    }
}
