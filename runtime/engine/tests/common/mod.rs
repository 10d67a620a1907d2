//! Helpers shared by the engine's integration tests.
#![allow(dead_code)]

use std::time::Duration;

/// Polls `check` every 25 ms for up to 10 s; panics when it never holds.
pub async fn wait_for(mut check: impl FnMut() -> bool) {
    for _ in 0..400 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("condition not reached in 10 s");
}

/// Polls a future to completion on the current runtime from a sync closure.
pub fn futures_lite_block<F: std::future::Future>(f: F) -> F::Output {
    tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(f))
}
