//! Reusable view pieces.
pub mod cards;
pub mod chart;
pub mod clock;
pub mod format;
pub mod language;
pub mod page_data;
pub mod remote;
pub mod table;
pub mod topbar;
pub mod write;
