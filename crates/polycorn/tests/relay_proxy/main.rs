//! Relay and proxy as an operator runs them (`polycorn relay|proxy --config`), in the testbed's
//! namespaces: client — relay — N emulated paths — proxy — server. Every transfer is checked
//! byte by byte (polycorn_net::loadgen). Root only; tests run one at a time (they share CPU).
//!
//! One test binary: [`bed`] is the harness (testbed, daemons, configurations, transfers),
//! [`support`] the helpers several topics share, and each other module one topic's tests.

#[path = "../support/prometheus.rs"]
mod prometheus;

mod bed;
mod support;

mod alerting;
mod failover;
mod modems;
mod paths;
mod reload;
mod restart;
mod security;
mod subflows;
mod systemd;
mod transfer;
