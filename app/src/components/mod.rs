//! Reusable view pieces.
pub mod chart;
pub mod format;
