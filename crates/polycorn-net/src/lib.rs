//! polycorn's relay and proxy: the tokio shell around `polycorn-proto` (frames, session) and
//! `polycorn-sched` (decisions). See ARCHITECTURE.md for the layers.
//!
//! Leaf modules (sockets, TLS, config, interception, context, metrics) know nothing of the
//! session; `engine` ties one session to its subflows; `relay` and `proxy` are the two roles.

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
pub mod path;
pub mod policy;
pub mod predictor;
pub mod proxy;
pub mod proxy_addr;
pub mod random;
pub mod relay;
pub mod sockopt;
pub mod socks5;
pub mod subflow;
pub mod tls;
pub mod tuning;
pub mod units;
