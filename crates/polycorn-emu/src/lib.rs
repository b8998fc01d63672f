//! # polycorn-emu — the HSR testbed
//!
//! Network namespaces for client, relay, proxy and server; N emulated cellular paths between
//! relay and proxy, each a pair of TUN devices joined by a userspace forwarder that applies a
//! `polycorn-link` model per direction in real time.

#![warn(missing_docs)]

pub mod context;
pub mod forward;
pub mod models;
pub mod netns;
pub mod seqtrack;
pub mod testbed;
