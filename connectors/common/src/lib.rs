//! Pieces shared by Headwater's Debezium-compatible source connectors.
//!
//! - [`name_filter`]: Debezium's include/exclude lists (comma-separated, anchored,
//!   case-insensitive regular expressions over qualified names).

pub mod name_filter;
