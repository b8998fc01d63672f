//! Where a relay's passenger connections go: the multipath session or per-connection tunnels.

use std::sync::Arc;

use crate::direct;
use crate::engine::Engine;

/// Where passenger connections go: the session (polycorn) or per-connection tunnels.
#[derive(Clone, Debug)]
pub enum Carrier {
    /// The multipath session.
    Session(Engine),
    /// Baseline tunnels.
    Direct(Arc<direct::Tunnels>),
}
