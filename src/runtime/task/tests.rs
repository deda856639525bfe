//! The one-allocation task's drop paths: each test checks that the future and the output are
//! dropped exactly once and that every block is freed (each block holds one count of its
//! loop's `Shared`, so the count falling back to where it was means no block is left).

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Poll, Waker};

use tokio::time::Duration;

use crate::runtime::{EventLoop, JoinError, spawn};
use crate::timer;

/// Counts its drops.
struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn counter() -> (Arc<AtomicUsize>, impl Fn() -> Counted) {
    let drops = Arc::new(AtomicUsize::new(0));
    let d = drops.clone();
    (drops, move || Counted(d.clone()))
}

/// Strong counts of the loop's `Shared`: one per live task block, plus the loop's own.
fn shared_refs(el: &EventLoop) -> usize {
    Arc::strong_count(&el.context().shared) - 1
}

#[tokio::test(start_paused = true)]
async fn a_task_dropped_while_paused_drops_its_future_once_and_frees_its_block() {
    let mut el = EventLoop::new();
    let base = shared_refs(&el);
    let (drops, make) = counter();
    let guard = make();
    let handle = spawn(async move {
        let _guard = guard;
        timer::pause(1_000_000).await;
    });
    el.run_until(timer::pause(8)).await;
    assert_eq!(timer::live(), 1, "parked on its pause");
    assert_eq!(drops.load(Ordering::SeqCst), 0);
    handle.abort();
    assert_eq!(
        drops.load(Ordering::SeqCst),
        1,
        "dropped before abort returned"
    );
    assert_eq!(timer::live(), 0, "its pause left the wheel");
    let result = el.run_until(handle).await;
    assert!(result.is_err_and(|e| e.is_cancelled()));
    assert_eq!(drops.load(Ordering::SeqCst), 1, "dropped once");
    assert_eq!(shared_refs(&el), base, "no block left");
}

#[tokio::test(start_paused = true)]
async fn tasks_still_paused_when_the_loop_goes_are_dropped_and_report_cancellation() {
    let el = EventLoop::new();
    let (drops, make) = counter();
    let handles: Vec<_> = (0..3)
        .map(|_| {
            let guard = make();
            spawn(async move {
                let _guard = guard;
                timer::pause(50).await;
            })
        })
        .collect();
    // Detached too: nothing holds it but the loop.
    let guard = make();
    drop(spawn(async move {
        let _guard = guard;
        std::future::pending::<()>().await;
    }));
    drop(el);
    assert_eq!(drops.load(Ordering::SeqCst), 4, "every future dropped once");
    for handle in handles {
        assert!(handle.is_finished());
        assert_eq!(handle.await, Err(JoinError { panicked: false }));
    }
}

#[tokio::test(start_paused = true)]
async fn a_handle_dropped_before_completion_leaves_the_output_to_the_task() {
    let mut el = EventLoop::new();
    let base = shared_refs(&el);
    let (drops, make) = counter();
    let output = make();
    let handle = spawn(async move {
        timer::pause(16).await;
        output
    });
    el.run_until(timer::pause(8)).await;
    drop(handle);
    assert_eq!(drops.load(Ordering::SeqCst), 0, "still running");
    el.run_until(timer::pause(30)).await;
    assert_eq!(
        drops.load(Ordering::SeqCst),
        1,
        "the unwanted output dropped once"
    );
    assert_eq!(shared_refs(&el), base, "no block left");
}

#[tokio::test(start_paused = true)]
async fn a_handle_dropped_after_completion_drops_the_output_it_never_took() {
    let mut el = EventLoop::new();
    let base = shared_refs(&el);
    let (drops, make) = counter();
    let output = make();
    let handle = spawn(async move { output });
    el.run_until(timer::pause(8)).await;
    assert!(handle.is_finished());
    assert_eq!(drops.load(Ordering::SeqCst), 0, "kept for the handle");
    drop(handle);
    assert_eq!(
        drops.load(Ordering::SeqCst),
        1,
        "dropped with the handle, once"
    );
    assert_eq!(shared_refs(&el), base, "no block left");
}

#[tokio::test(start_paused = true)]
async fn an_awaited_output_is_moved_out_once() {
    let mut el = EventLoop::new();
    let base = shared_refs(&el);
    let (drops, make) = counter();
    let output = make();
    let mut handle = spawn(async move {
        timer::pause(8).await;
        output
    });
    let got = el.run_until(&mut handle).await.expect("the output");
    assert_eq!(drops.load(Ordering::SeqCst), 0, "moved out, not dropped");
    drop(got);
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    // Polled again: the output was handed out already.
    assert!(
        el.run_until(&mut handle)
            .await
            .is_err_and(|e| e.is_cancelled())
    );
    assert_eq!(shared_refs(&el), base + 1, "the handle keeps the block");
    drop(handle);
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    assert_eq!(shared_refs(&el), base, "no block left");
}

#[tokio::test(start_paused = true)]
async fn a_panic_inside_the_future_drops_it_once_and_reports_the_panic() {
    let mut el = EventLoop::new();
    let base = shared_refs(&el);
    let (drops, make) = counter();
    let guard = make();
    let handle = spawn(async move {
        let _guard = guard;
        timer::pause(8).await;
        panic!("on purpose");
    });
    let result = el.run_until(handle).await;
    assert!(result.is_err_and(|e| e.is_panic()));
    assert_eq!(
        drops.load(Ordering::SeqCst),
        1,
        "the future's state dropped once"
    );
    assert_eq!(el.stats().panics, 1);
    assert_eq!(shared_refs(&el), base, "no block left");
}

#[tokio::test(start_paused = true)]
async fn a_panic_while_dropping_a_panicked_task_is_contained() {
    struct PanicsOnDrop;
    impl Drop for PanicsOnDrop {
        fn drop(&mut self) {
            if !std::thread::panicking() {
                panic!("in drop, on purpose");
            }
        }
    }
    let mut el = EventLoop::new();
    let base = shared_refs(&el);
    let handle = spawn(async move {
        let _bomb = PanicsOnDrop;
        timer::pause(8).await;
        panic!("on purpose");
    });
    let result = el.run_until(handle).await;
    assert!(result.is_err_and(|e| e.is_panic()));
    assert_eq!(shared_refs(&el), base, "no block left");
}

#[tokio::test(start_paused = true)]
async fn a_waker_cloned_out_of_a_task_outlives_it_harmlessly() {
    let mut el = EventLoop::new();
    let base = shared_refs(&el);
    let kept: Rc<RefCell<Option<Waker>>> = Rc::default();
    let k = kept.clone();
    let handle = spawn(std::future::poll_fn(move |cx| {
        *k.borrow_mut() = Some(cx.waker().clone());
        Poll::Ready(7)
    }));
    assert_eq!(el.run_until(handle).await, Ok(7));
    assert_eq!(shared_refs(&el), base + 1, "the waker keeps the block");
    let waker = kept.borrow_mut().take().expect("the waker");
    // Waking a finished task does nothing, from this thread and from another.
    waker.wake_by_ref();
    let elsewhere = waker.clone();
    std::thread::spawn(move || elsewhere.wake())
        .join()
        .expect("wake on another thread");
    el.run_until(timer::pause(8)).await;
    drop(waker);
    assert_eq!(shared_refs(&el), base, "freed with the last waker");
}

#[tokio::test(start_paused = true)]
async fn the_last_reference_may_go_on_another_thread() {
    let mut el = EventLoop::new();
    let base = shared_refs(&el);
    let (drops, make) = counter();
    let output = make();
    let handle = spawn(async move { output });
    let abort = handle.abort_handle();
    el.run_until(timer::pause(8)).await;
    std::thread::spawn(move || {
        assert!(abort.is_finished());
        drop(abort);
        drop(handle);
    })
    .join()
    .expect("dropped on another thread");
    assert_eq!(drops.load(Ordering::SeqCst), 1, "the output dropped once");
    assert_eq!(shared_refs(&el), base, "no block left");
}

#[test]
fn a_wake_from_another_thread_reaches_a_parked_loop() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        // A long idle wait: only the wake can end the park in time.
        let mut el = EventLoop::builder()
            .idle_wait(Duration::from_secs(30))
            .build();
        let base = shared_refs(&el);
        let slot: Arc<std::sync::Mutex<Option<Waker>>> = Arc::default();
        let fired = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (s, f) = (slot.clone(), fired.clone());
        let polls = Rc::new(Cell::new(0));
        let p = polls.clone();
        let handle = spawn(std::future::poll_fn(move |cx| {
            p.set(p.get() + 1);
            if f.load(Ordering::SeqCst) {
                return Poll::Ready("woken");
            }
            *s.lock().expect("slot") = Some(cx.waker().clone());
            Poll::Pending
        }));
        let waker_thread = std::thread::spawn(move || {
            let waker = loop {
                if let Some(waker) = slot.lock().expect("slot").take() {
                    break waker;
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            };
            fired.store(true, Ordering::SeqCst);
            // Twice: the second is deduplicated until the loop drains the first.
            waker.wake_by_ref();
            waker.wake();
        });
        let result = tokio::time::timeout(Duration::from_secs(10), el.run_until(handle))
            .await
            .expect("the remote wake reached the parked loop");
        waker_thread.join().expect("the waking thread");
        assert_eq!(result, Ok("woken"));
        assert!(polls.get() >= 2);
        assert_eq!(shared_refs(&el), base, "no block left");
    });
}

#[tokio::test(start_paused = true)]
async fn a_join_handle_awaited_on_another_thread_gets_the_output() {
    let mut el = EventLoop::new();
    let handle = spawn(async {
        timer::pause(40).await;
        String::from("done")
    });
    let (sent, got) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let result = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(handle);
        sent.send(result).expect("report");
    });
    el.run_until(timer::pause(80)).await;
    waiter.join().expect("the waiting thread");
    assert_eq!(got.recv().expect("the result"), Ok(String::from("done")));
}

/// Spawned as a task: pauses on its `Pause` once, then completes *without* dropping it, so
/// the pause goes with the future, after the task stopped being live.
struct FinishesHoldingAPause {
    pause: Option<timer::Pause>,
    polled: bool,
}

impl Future for FinishesHoldingAPause {
    type Output = ();

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<()> {
        if std::mem::replace(&mut self.polled, true) {
            return Poll::Ready(());
        }
        if let Some(pause) = self.pause.as_mut() {
            // Armed for 1000 s: this poll leaves a wheel entry that wakes this task.
            assert!(std::pin::Pin::new(pause).poll(cx).is_pending());
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[tokio::test(start_paused = true)]
async fn a_pause_dropped_with_a_finished_task_s_future_frees_the_block_once() {
    let mut el = EventLoop::new();
    let base = shared_refs(&el);
    drop(spawn(FinishesHoldingAPause {
        pause: Some(timer::pause(1_000_000)),
        polled: false,
    }));
    el.run_until(timer::pause(8)).await;
    assert_eq!(timer::live(), 0, "the pause left the wheel with the future");
    assert_eq!(shared_refs(&el), base, "the detached task's block is freed");
}

#[tokio::test(start_paused = true)]
async fn a_pause_that_outlives_its_task_keeps_the_block_until_its_entry_goes() {
    let mut el = EventLoop::new();
    let base = shared_refs(&el);
    // One pause fires into the finished task, the other is dropped before its tick.
    for drop_early in [false, true] {
        let escaped: Rc<RefCell<Option<timer::Pause>>> = Rc::default();
        let slot = escaped.clone();
        drop(spawn(async move {
            let mut pause = timer::pause(40);
            // Polled by this task: its entry wakes this task, which then finishes.
            std::future::poll_fn(|cx| {
                assert!(std::pin::Pin::new(&mut pause).poll(cx).is_pending());
                Poll::Ready(())
            })
            .await;
            *slot.borrow_mut() = Some(pause);
        }));
        el.run_until(timer::pause(8)).await;
        assert_eq!(timer::live(), 1, "the escaped pause is still armed");
        assert_eq!(
            shared_refs(&el),
            base + 1,
            "its entry keeps the finished task's block"
        );
        if drop_early {
            drop(escaped.borrow_mut().take());
        } else {
            el.run_until(timer::pause(80)).await;
        }
        assert_eq!(timer::live(), 0);
        assert_eq!(shared_refs(&el), base, "the block went with the entry");
        drop(escaped);
    }
}

#[tokio::test(start_paused = true)]
async fn a_task_with_more_pauses_than_wheel_holds_wakes_from_every_one() {
    let mut el = EventLoop::new();
    let base = shared_refs(&el);
    let n = usize::from(u16::MAX) + 3;
    let woke = Rc::new(Cell::new(0usize));
    let w = woke.clone();
    let handle = spawn(async move {
        // All created (and so pointed at this task) before the first is awaited: the last
        // few find the task's holds full.
        let pauses: Vec<timer::Pause> = (0..n).map(|_| timer::pause(8)).collect();
        for pause in pauses.into_iter().rev() {
            pause.await;
            w.set(w.get() + 1);
        }
    });
    // One iteration: the task's first poll, then this future's.
    el.run_until(std::future::ready(())).await;
    assert_eq!(timer::live(), n);
    let done = el.run_until(handle).await;
    assert_eq!(done, Ok(()));
    assert_eq!(woke.get(), n);
    assert_eq!(timer::live(), 0);
    assert_eq!(shared_refs(&el), base, "no hold and no waker left behind");
}

#[test]
fn a_task_block_is_header_then_future() {
    // The header: meta pointer, loop pointer, state, registry index, loop flags and the
    // wheel-hold tally (in what was padding).
    assert_eq!(size_of::<super::Header>(), 32);
    assert_eq!(size_of::<crate::timer::Pause>(), 12);
}

#[tokio::test(start_paused = true)]
async fn a_remote_wake_still_queued_when_the_loop_goes_keeps_nothing_alive() {
    let mut el = EventLoop::new();
    let context = el.context();
    let slot: Arc<std::sync::Mutex<Option<Waker>>> = Arc::default();
    let s = slot.clone();
    drop(spawn(std::future::poll_fn(move |cx| {
        *s.lock().expect("slot") = Some(cx.waker().clone());
        Poll::<()>::Pending
    })));
    el.run_until(timer::pause(8)).await;
    let waker = slot.lock().expect("slot").take().expect("the waker");
    // Queued for the loop's next Tasks phase, which never comes.
    std::thread::spawn(move || waker.wake())
        .join()
        .expect("wake on another thread");
    drop(el);
    assert_eq!(
        Arc::strong_count(&context.shared),
        1,
        "no task block (and so no queue entry) keeps the loop's shared half"
    );
}
