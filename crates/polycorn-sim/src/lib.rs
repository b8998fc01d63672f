//! polycorn's deterministic simulator: the production relay and proxy logic (the same
//! `polycorn-proto` sessions and `polycorn-sched` pipelines) over `polycorn-link` links and a
//! modelled TCP subflow per path, run in virtual time on one thread per ride.
//!
//! - [`tcp`]: the TCP subflow model (segments, congestion control, loss recovery, RTO, send
//!   buffer, and a `TCP_INFO`-equivalent sample).

pub mod tcp;
