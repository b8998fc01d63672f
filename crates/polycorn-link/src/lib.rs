//! # polycorn-link — link and trip models for the HSR testbed
//!
//! Pure and seeded: no clock, no I/O beyond parsing text handed in by the caller; every call
//! takes the current time in integer microseconds (`*_us`); the same inputs and seed give the
//! same outputs.
//!
//! ## Map
//! * [`trace`] — mahimahi delivery-opportunity traces (parse, validate with file:line errors,
//!   write), one-way delay series, outage lists.
//! * [`loss`] — seeded bursty loss (Gilbert–Elliott).
//! * [`link`] — one direction of one emulated path: droptail queue, delivery opportunities,
//!   delay, loss, outages; `enqueue` / `advance(now)`; mahimahi-format event log.
//! * [`throughput`] — per-second throughput logs (e.g. ucc5g) as capacity traces.
//! * [`trip`] — the HSR trip model: train trajectory, cells per carrier, handovers and their
//!   failures, per-carrier capacity and delay; produces per-path traces, a context log and the
//!   ground truth.
//! * [`trip_links`] — a trip's paths as link configurations, both directions (what the
//!   emulator and the simulator drive).
//!
//! ## Driving a link
//! ```
//! use polycorn_link::{DelaySeries, DeliveryTrace, EnqueueOutcome, Link, LinkConfig};
//! // Opportunities at 1, 1, 2 and 5 ms (looping every 5 ms), 10 ms one-way delay.
//! let trace = DeliveryTrace::parse("example.down", "1\n1\n2\n5\n").unwrap();
//! let mut link = Link::new(LinkConfig {
//!     delay: DelaySeries::constant(10_000),
//!     ..LinkConfig::new(trace)
//! })
//! .unwrap();
//! assert_eq!(link.enqueue(0, 7, 3000), EnqueueOutcome::Enqueued);
//! // A 3000-byte packet needs both 1 ms opportunities, which are spread over that millisecond
//! // (0.5 ms and 1 ms): served at 1 ms, delivered at 11 ms.
//! assert_eq!(link.next_event_us(), Some(500));
//! assert_eq!(link.poll_delivered(10_999), None);
//! assert_eq!(link.poll_delivered(11_000), Some((7, 11_000)));
//! assert_eq!(link.next_event_us(), None);
//! ```

#![warn(missing_docs)]

pub mod link;
pub mod loss;
pub mod throughput;
pub mod trace;
pub mod trip;
pub mod trip_links;
pub mod window;

pub use link::{
    DropReason, EnqueueOutcome, Link, LinkConfig, LinkError, LinkStats, OutageMode, QueueLimit,
};
pub use loss::{LossError, LossModel, LossProcess};
pub use trace::{DelaySeries, DeliveryTrace, Outages, TraceError, TraceErrorKind};
