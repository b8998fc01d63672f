//! The schedulerlets: HRSCH's four stages and the baselines, one file each.

pub mod blest;
pub mod ecf;
pub mod hpr;
pub mod loctable;
pub mod minrtt;
pub mod musher;
pub mod ori;
pub mod redundant;
pub mod roundrobin;
pub mod single;
pub mod stale;
pub mod stms;
pub mod tpr;

pub use blest::Blest;
pub use ecf::Ecf;
pub use hpr::Hpr;
pub use loctable::LocationTable;
pub use minrtt::MinRtt;
pub use musher::Musher;
pub use ori::Ori;
pub use redundant::Redundant;
pub use roundrobin::RoundRobin;
pub use single::SinglePath;
pub use stale::Stale;
pub use stms::Stms;
pub use tpr::Tpr;
