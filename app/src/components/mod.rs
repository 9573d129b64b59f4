//! Reusable view pieces.
pub mod chart;
pub mod format;
pub mod remote;
pub mod topbar;
