//! Faults on a real loop: panics escaping each kind of phase stop it with their message and
//! site; reported faults wake `faulted()` and leave it running.

use std::cell::Cell;
use std::rc::Rc;

use super::*;
use crate::runtime::{EventLoop, Phase};
use crate::timer;

/// This file, as a panic site names it.
const HERE: &str = "src/runtime/fault/tests.rs:";

fn counter() -> (Rc<Cell<u32>>, impl FnMut() -> bool + 'static) {
    let count = Rc::new(Cell::new(0));
    let counted = count.clone();
    (count, move || {
        counted.set(counted.get() + 1);
        false
    })
}

#[tokio::test(start_paused = true)]
async fn a_panic_in_a_slot_handler_stops_the_loop_at_once_with_its_message_and_site() {
    let (panicked, mut count_panics) = counter();
    let (deltas, count_deltas) = counter();
    let mut el = EventLoop::builder()
        .slot(Phase::Network, move || {
            count_panics();
            panic!("a bug in the network phase");
        })
        .slot(Phase::Deltas, count_deltas)
        .build();

    let fault = el
        .try_run_until(std::future::pending::<()>())
        .await
        .unwrap_err();

    let Fault::Panic {
        phase,
        message,
        site,
    } = &fault
    else {
        panic!("not a panic fault: {fault:?}");
    };
    assert_eq!(*phase, Phase::Network);
    assert_eq!(message, "a bug in the network phase");
    let site = site.as_deref().expect("the site hook saw the panic");
    assert!(site.starts_with(HERE), "{site}");
    assert!(fault.to_string().contains(site), "{fault}");
    // The phases after it did not run, and the loop counted the panic.
    assert_eq!(deltas.get(), 0);
    assert_eq!(el.stats().panics, 1);
    assert_eq!(el.fault(), Some(&fault));

    // Stopped for good: a later run returns the same fault without iterating.
    let again = el.try_run_until(async { 7 }).await;
    assert_eq!(again, Err(fault));
    assert_eq!(panicked.get(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_panic_in_the_run_until_future_is_a_tasks_phase_fault() {
    let mut el = EventLoop::new();
    let fault = el
        .try_run_until(async {
            timer::pause(16).await;
            panic!("the root future broke");
        })
        .await
        .unwrap_err();
    assert!(
        matches!(&fault, Fault::Panic { phase: Phase::Tasks, message, site: Some(site) }
            if message == "the root future broke" && site.starts_with(HERE)),
        "{fault:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn guarded_panics_do_not_stop_the_loop() {
    let mut el = EventLoop::new();
    let out = el
        .try_run_until(async {
            let task = crate::runtime::spawn(async { panic!("a task's own panic") });
            timer::after(std::time::Duration::from_millis(8))
                .start(|| panic!("a timer callback's own panic"));
            assert!(task.await.unwrap_err().is_panic());
            timer::pause(16).await;
            "still running"
        })
        .await;
    assert_eq!(out, Ok("still running"));
    assert_eq!(el.stats().panics, 2);
    assert_eq!(el.fault(), None);
}

#[tokio::test(start_paused = true)]
async fn an_injected_phase_panic_is_a_deltas_phase_fault() {
    let mut el = EventLoop::new();
    let fault = el
        .try_run_until(async {
            timer::pause(8).await;
            inject_phase_panic();
            std::future::pending::<()>().await;
        })
        .await
        .unwrap_err();
    assert!(
        matches!(&fault, Fault::Panic { phase: Phase::Deltas, message, site: Some(site) }
            if message == INJECTED_PANIC && site.starts_with("src/runtime/event_loop.rs:")),
        "{fault:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_reported_fault_wakes_faulted_and_the_loop_goes_on() {
    let mut el = EventLoop::new();
    let (first, second, heard) = el
        .run_until(async {
            let waiting = crate::runtime::spawn(faulted());
            timer::pause(8).await;
            let first = report_fault("the ring died");
            let second = report_fault("and again");
            let heard = waiting.await.unwrap();
            // The loop still runs timers after the report.
            timer::pause(8).await;
            (first, second, heard)
        })
        .await;
    assert!(first && !second);
    assert_eq!(
        heard,
        Fault::Reported {
            message: "the ring died".into()
        }
    );
    assert_eq!(el.fault(), None, "a reported fault does not break the loop");
}

#[tokio::test(start_paused = true)]
#[should_panic(expected = "a panic escaped the loop's Flush phase at src/runtime/fault/tests.rs:")]
async fn run_until_turns_a_phase_panic_into_a_panic_that_names_the_phase_and_site() {
    let mut el = EventLoop::builder()
        .slot(Phase::Flush, || panic!("a bug in the flush phase"))
        .build();
    el.run_until(std::future::pending::<()>()).await;
}

#[test]
fn reporting_off_a_loop_thread_only_logs() {
    assert!(!report_fault("no loop here"));
}
