//! Bad input: calls from the wrong thread, a zero tick, absurd delays. Each fails loudly with
//! advice, or saturates — never undefined behaviour, never a silent loss.

use std::any::Any;
use std::thread;

use shardloop::{EventLoop, spawn, timer};
use tokio::time::Duration;

fn message(payload: Box<dyn Any + Send>) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default()
}

fn off_thread_panic(f: impl FnOnce() + Send + 'static) -> String {
    message(
        thread::spawn(f)
            .join()
            .expect_err("must panic off the loop thread"),
    )
}

#[test]
fn timer_calls_off_the_loop_thread_panic_with_advice() {
    for msg in [
        off_thread_panic(|| drop(timer::pause(5))),
        off_thread_panic(|| drop(timer::pause_for(Duration::from_millis(5)))),
        off_thread_panic(|| {
            let _ = timer::after(Duration::ZERO).start(|| {});
        }),
        off_thread_panic(|| {
            let _ = timer::every(Duration::from_millis(8)).start(|| {});
        }),
        off_thread_panic(|| {
            let _ = timer::now();
        }),
        off_thread_panic(|| {
            let _ = timer::current();
        }),
        off_thread_panic(|| drop(timer::dump())),
        off_thread_panic(|| drop(spawn(async {}))),
    ] {
        assert!(msg.contains("event loop's thread"), "{msg}");
        assert!(
            msg.contains("LoopContext::post"),
            "says what to do instead: {msg}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn token_methods_off_the_loop_thread_panic_but_pauses_and_handles_drop_quietly() {
    let _el = EventLoop::new();
    let token = timer::after(Duration::from_secs(1)).start(|| {});
    let msg = off_thread_panic(move || {
        let _ = token.running();
    });
    assert!(msg.contains("TimerToken::next"), "{msg}");
    let msg = off_thread_panic(move || {
        let _ = token.cancel();
    });
    assert!(msg.contains("TimerToken::cancel"), "{msg}");
    // Pause and JoinHandle are Send, and dropping them elsewhere is harmless.
    let pause = timer::pause(1000);
    let handle = spawn(async { 1 });
    thread::spawn(move || {
        drop(pause);
        drop(handle);
    })
    .join()
    .expect("dropping a Pause or JoinHandle off the loop thread does not panic");
    assert!(token.running());
}

#[tokio::test]
#[should_panic(expected = "tick must be greater than zero")]
async fn a_zero_tick_is_refused_at_build() {
    let _ = EventLoop::builder().tick(Duration::ZERO).build();
}

#[tokio::test(start_paused = true)]
async fn absurd_delays_saturate() {
    let mut el = EventLoop::new();
    let t = timer::after(Duration::MAX)
        .every(Duration::MAX)
        .start(|| {});
    assert!(t.running());
    let p = timer::pause(u64::MAX);
    el.run_until(timer::pause(16)).await;
    assert!(t.running());
    drop(p);
    assert!(t.cancel());
}
