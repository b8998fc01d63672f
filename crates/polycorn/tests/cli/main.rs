//! The `polycorn` binary as a user runs it.
//!
//! One test binary: [`support`] holds what every topic uses, each other module one topic's
//! tests.

mod support;

mod basics;
mod bench;
mod linkdb;
mod soak;
mod systemd;
mod testbed;
