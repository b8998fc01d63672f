//! Bench outputs: raw CSV and JSON, the terminal table, and a self-contained HTML report with
//! inline SVG plots (no scripts, no network).

mod html;
mod pooled;
mod results;
mod svg;
#[cfg(test)]
pub(crate) mod tests;

pub use html::{html, write_html};
pub use pooled::pooled;
pub use results::*;
