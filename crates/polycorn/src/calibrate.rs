//! `polycorn testbed calibrate`: bulk TCP downloads over each emulated carrier of a trip preset,
//! with every measurable statistic of DESIGN §6 printed beside its published value.

use anyhow::{bail, Result};
use clap::Args;

/// Options of `polycorn testbed calibrate`.
#[derive(Args, Debug, Clone)]
pub struct CalibrateArgs {
    /// Trip preset to calibrate (hsr, ktx).
    #[arg(long, default_value = "hsr")]
    pub preset: String,
}

/// Run the calibration.
pub fn run(_args: &CalibrateArgs) -> Result<()> {
    bail!("not implemented yet")
}
