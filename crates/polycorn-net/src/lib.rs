//! polycorn's relay and proxy: the tokio shell around `polycorn-proto` (frames, session) and
//! `polycorn-sched` (decisions). See docs/src/architecture.md for the layers.
//!
//! Leaf modules (sockets, TLS, config, interception, context, metrics) know nothing of the
//! session; `engine` ties one session to its subflows; `relay` and `proxy` are the two roles.
//!
//! The modules by concern:
//!
//! * I/O: [`sockopt`] (socket options), [`subflow`] (a TLS subflow's connect and accept),
//!   [`tls`], [`intercept`] (TPROXY rules), [`socks5`], [`dns`], [`connector`] (the proxy's
//!   connections to destinations), [`proxy_addr`] (the proxy's address and its resolution).
//! * The session: [`engine`], [`tuning`] (session tunables), [`predictor`] (handover
//!   predictors), [`context`] (train context), [`modem`] (each path's
//!   serving cell and signal from ModemManager), [`policy`] (destinations), [`guard`]
//!   (what relay and proxy refuse); when the proxy asks a relay for a fresh subflow is
//!   `polycorn_proto::refresh_watch` (pure, shared with the simulator).
//! * Roles: [`relay`] with its [`path`]s and [`carrier`], carrying out
//!   `polycorn_proto::path_policy` (pure, shared with the simulator: each path's back-off,
//!   watchdog, refresh, renewal and proxy moves), [`proxy`], [`direct`] (the MPTCP and
//!   single-path baselines), [`check`] (path checks).
//! * Operations: [`config`], [`metrics`], [`activation`] (systemd sockets), [`daemon`] (a
//!   configuration file to a running relay or proxy), [`units`] (systemd units), [`live`]
//!   (settings a reload replaces), [`scrape`] (reading Prometheus text), [`random`],
//!   [`loadgen`] (checked test traffic).

pub mod activation;
pub mod carrier;
pub mod check;
pub mod config;
pub mod connector;
pub mod context;
pub mod daemon;
pub mod direct;
pub mod dns;
pub mod engine;
pub mod guard;
pub mod intercept;
pub mod live;
pub mod loadgen;
pub mod metrics;
pub mod modem;
pub mod path;
pub mod policy;
pub mod predictor;
pub mod proxy;
pub mod proxy_addr;
pub mod random;
pub mod relay;
pub mod scrape;
pub mod sockopt;
pub mod socks5;
pub mod subflow;
pub mod tls;
pub mod tuning;
pub mod units;
