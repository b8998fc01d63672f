//! # polycorn-linkdb — handover history and handover-failure prediction
//!
//! LinkDB records every handover a train sees (carrier, source and target cell, direction of
//! travel, start time and position, RSRP at the start, outcome, interruption) with the GPS fixes
//! and radio reports around them, and predicts imminent handover failures for the scheduler's
//! HPR stage (POLYCORN, NSDI'23 §3 and §4.3).
//!
//! ## Contract
//! * **Pure core.** [`index`], [`predict`], [`risk`], [`analysis`], [`svm`] and [`validate`] do
//!   no I/O and read no clock: inputs carry `now`. The online [`predict::Predictor`] implements
//!   polycorn-sched's [`HandoverPredictor`](polycorn_sched::HandoverPredictor); the shell feeds
//!   it fixes and cell reports between scheduler polls.
//! * **One store, two engines.** [`store::Store`] speaks the same SQL to an embedded SQLite file
//!   (`sqlite:PATH`) and to PostgreSQL (`postgres://…`), with versioned migrations. Importing the
//!   same trip twice inserts nothing.
//! * **Nothing silently dropped.** Importers count every unusable row and report it with
//!   `file:line` ([`import::ImportReport`]).
//!
//! ## Map
//! * [`record`] — trips, handovers, GPS fixes, radio samples.
//! * [`import`] — the trip model (in process or `polycorn trip generate` output), WMN Lab metro
//!   CSVs (location grid × band instead of cell IDs), UCC 5G driving CSVs.
//! * [`store`] — SQLite/PostgreSQL persistence and migrations.
//! * [`index`] — per-cell statistics (EHP, mean start of the failures) and the location table.
//! * [`predict`] — the online predictors: the paper's, Kim & Cho's location table, and
//!   [`risk`], a logistic model (this project's addition).
//! * [`analysis`] — EHP, the paper's Table 1, per-cell linear-SVM separability.
//! * [`validate`] — leave-one-ride-out validation with the paper's categories.

pub mod analysis;
pub mod import;
pub mod index;
pub mod predict;
pub mod record;
pub mod risk;
pub mod store;
pub mod svm;
pub mod validate;

pub use index::{CellKey, CellStats, LinkIndex};
pub use predict::{Model, Predictor, Track};
pub use record::{
    Direction, HandoverRecord, LossRecord, Outcome, RadioSample, Sample, Source, TripData, TripMeta,
};
pub use validate::{leave_one_ride_out, ModelKind};
