//! Wall-clock time for the log, behind a trait so tests can drive retention, compaction and
//! `segment.ms` rolls with a fake clock.
//!
//! Invariant: every time-dependent decision of the log (segment rolls, retention by time,
//! `min.compaction.lag.ms`, `delete.retention.ms`, transaction marker timestamps) reads the
//! clock of its [`crate::LogOptions`], never the system clock directly.

use std::fmt::Debug;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of "now" in milliseconds since the Unix epoch.
pub trait Clock: Send + Sync + Debug {
    fn now_ms(&self) -> i64;
}

/// The system clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64)
    }
}

/// A clock that only moves when told to (tests).
#[derive(Debug, Default)]
pub struct FakeClock {
    now: AtomicI64,
}

impl FakeClock {
    pub fn new(now_ms: i64) -> Self {
        FakeClock {
            now: AtomicI64::new(now_ms),
        }
    }
    pub fn set(&self, now_ms: i64) {
        self.now.store(now_ms, Ordering::SeqCst);
    }
    pub fn advance(&self, ms: i64) {
        self.now.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for FakeClock {
    fn now_ms(&self) -> i64 {
        self.now.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fake_clock_moves_only_when_told() {
        let c = FakeClock::new(1_000);
        assert_eq!(c.now_ms(), 1_000);
        c.advance(500);
        assert_eq!(c.now_ms(), 1_500);
        c.set(10);
        assert_eq!(c.now_ms(), 10);
        assert!(SystemClock.now_ms() > 1_600_000_000_000);
    }
}
