//! `headwater-transforms`: Kafka Connect's single message transforms and predicates, and
//! Debezium's transforms, as pure functions over records (no I/O, no hidden state that changes
//! results between calls; schema caches only avoid rebuilding the same output schema).
//!
//! - [`chain`]: the `transforms=`/`predicates=` chain configuration, validation and execution;
//! - [`registry`]: the explicit list of transform and predicate classes (Java class names and
//!   short aliases);
//! - [`kafka`]: the `org.apache.kafka.connect.transforms.*` classes and predicates;
//! - [`debezium`]: the `io.debezium.transforms.*` classes;
//! - [`java_regex`] / [`java_time`]: Java regex and `SimpleDateFormat` semantics the transforms
//!   need.
//!
//! Depends on `headwater-api` only.

pub mod chain;
pub mod debezium;
pub mod java_regex;
pub mod java_time;
pub mod kafka;
pub mod registry;
pub mod util;

pub use chain::{build, validate, TransformChain};
pub use util::Target;
