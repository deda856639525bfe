//! Single flight: one run at a time, and at most one more queued behind it.
//!
//! Saves and archive rollups share this shape. A request while nothing runs starts a run at
//! once; a request while one runs marks one more run as queued, and any number of further
//! requests fold into that same queued run. When a run ends, its outcome is recorded and the
//! queued run (if any) starts. Runs never overlap and never pile up; because each run looks
//! at the state as it is when it *starts* (a fresh snapshot, the disk as it is), one queued
//! run covers every request made meanwhile.
//!
//! The run itself is whatever future the owner's `start` function returns for a job; it is
//! spawned on the loop (`crate::spawn`), so its order against other loop tasks is the loop's.
//! `start` is called synchronously by [`SingleFlight::request`] (or by the end of the run
//! before): what it does before returning its future happens at request time.
//!
//! Owns the running/queued state, the run counts and the last outcome. Must never block (it
//! lives on the loop thread) and never know what a run does.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

use tokio::sync::watch;

/// How a request was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// A run started now.
    Started,
    /// A run is going; another will follow it (requests made meanwhile share it).
    Queued,
}

type Start<J, T> = Box<dyn Fn(J) -> Pin<Box<dyn Future<Output = T>>>>;

/// The state machine; clones share it. Lives on the loop thread.
///
/// `J` says what a run does (a unit type when there is only one kind of run); `T` is a run's
/// outcome, kept for [`last`](Self::last) and handed to [`request_and_wait`](Self::request_and_wait).
pub(crate) struct SingleFlight<J, T> {
    shared: Rc<Shared<J, T>>,
}

impl<J, T> Clone for SingleFlight<J, T> {
    fn clone(&self) -> Self {
        SingleFlight {
            shared: self.shared.clone(),
        }
    }
}

struct Shared<J, T> {
    start: Start<J, T>,
    running: Cell<bool>,
    /// The job to run when the current run ends.
    queued: Cell<Option<J>>,
    /// Runs started so far; run n is the n-th.
    started: Cell<u64>,
    /// Runs finished so far, and the outcome of the last one.
    finished: watch::Sender<(u64, Option<T>)>,
}

impl<J: Copy + 'static, T: Clone + 'static> SingleFlight<J, T> {
    /// A single flight whose runs are the futures `start` returns.
    pub(crate) fn new<F>(start: impl Fn(J) -> F + 'static) -> SingleFlight<J, T>
    where
        F: Future<Output = T> + 'static,
    {
        SingleFlight {
            shared: Rc::new(Shared {
                start: Box::new(move |job| Box::pin(start(job))),
                running: Cell::new(false),
                queued: Cell::new(None),
                started: Cell::new(0),
                finished: watch::Sender::new((0, None)),
            }),
        }
    }

    /// Starts `job` now, or queues it behind the run that is going (replacing a job queued
    /// earlier: one queued run serves every request made meanwhile).
    pub(crate) fn request(&self, job: J) -> Request {
        if self.shared.running.get() {
            self.shared.queued.set(Some(job));
            Request::Queued
        } else {
            Shared::start(&self.shared, job);
            Request::Started
        }
    }

    /// Requests `job` and waits for the outcome of the run that serves this request: the
    /// one started now, or the one queued behind the current run.
    pub(crate) async fn request_and_wait(&self, job: J) -> T {
        let target = self.shared.started.get() + 1;
        self.request(job);
        let mut finished = self.shared.finished.subscribe();
        let seen = finished.wait_for(|(n, _)| *n >= target).await;
        let (_, outcome) = &*seen.expect("the single flight owns the sender");
        outcome.clone().expect("a finished run has an outcome")
    }

    /// Waits until no run is going or queued.
    pub(crate) async fn idle(&self) {
        let mut finished = self.shared.finished.subscribe();
        while self.shared.running.get() {
            let _ = finished.changed().await;
        }
    }

    /// A run is going now.
    pub(crate) fn is_running(&self) -> bool {
        self.shared.running.get()
    }

    /// Runs finished (whatever their outcome) since start.
    pub(crate) fn finished(&self) -> u64 {
        self.shared.finished.borrow().0
    }

    /// The outcome of the last finished run.
    pub(crate) fn last(&self) -> Option<T> {
        self.shared.finished.borrow().1.clone()
    }
}

impl<J: Copy + 'static, T: Clone + 'static> Shared<J, T> {
    fn start(this: &Rc<Self>, job: J) {
        this.running.set(true);
        this.started.set(this.started.get() + 1);
        let run = (this.start)(job);
        let this = this.clone();
        // Detached: the outcome reaches waiters through `finished`.
        drop(crate::spawn(async move {
            let outcome = run.await;
            this.finish(outcome);
        }));
    }

    fn finish(self: Rc<Self>, outcome: T) {
        self.running.set(false);
        self.finished.send_modify(|(n, last)| {
            *n += 1;
            *last = Some(outcome);
        });
        if let Some(job) = self.queued.take() {
            Shared::start(&self, job);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;
    use crate::{EventLoop, timer};

    /// What the runs of a test flight did: a line as each starts and ends, and the most that
    /// were ever going at once (recorded, and asserted after the run: the loop catches a
    /// panic in a task).
    #[derive(Default)]
    struct Seen {
        log: RefCell<Vec<String>>,
        active: Cell<u32>,
        most_active: Cell<u32>,
    }

    /// A flight whose run `n` takes 10 ms and returns `(job, n)`.
    fn flight(seen: &Rc<Seen>) -> SingleFlight<char, (char, u32)> {
        let (seen, count) = (seen.clone(), Rc::new(Cell::new(0)));
        SingleFlight::new(move |job: char| {
            count.set(count.get() + 1);
            let n = count.get();
            seen.log.borrow_mut().push(format!("start {job}{n}"));
            let seen = seen.clone();
            async move {
                seen.active.set(seen.active.get() + 1);
                seen.most_active
                    .set(seen.most_active.get().max(seen.active.get()));
                timer::pause(10).await;
                seen.active.set(seen.active.get() - 1);
                seen.log.borrow_mut().push(format!("end {job}{n}"));
                (job, n)
            }
        })
    }

    async fn on_a_loop(test: impl Future<Output = ()> + 'static) {
        EventLoop::new().run_until(test).await;
    }

    #[tokio::test(start_paused = true)]
    async fn requests_while_running_fold_into_one_queued_run() {
        let seen = Rc::new(Seen::default());
        let flight = flight(&seen);
        let inside = seen.clone();
        on_a_loop(async move {
            assert_eq!(flight.request('a'), Request::Started);
            assert!(flight.is_running());
            assert_eq!(flight.request('b'), Request::Queued);
            assert_eq!(
                flight.request('c'),
                Request::Queued,
                "the last queued job wins"
            );
            flight.idle().await;
            assert!(!flight.is_running());
            assert_eq!(flight.finished(), 2);
            assert_eq!(flight.last(), Some(('c', 2)));
            // `start` runs at request time: its log line is there before any await.
            assert_eq!(flight.request('d'), Request::Started);
            assert_eq!(
                inside.log.borrow().last().map(String::as_str),
                Some("start d3")
            );
            flight.idle().await;
        })
        .await;
        assert_eq!(seen.most_active.get(), 1, "runs never overlap");
        assert_eq!(
            *seen.log.borrow(),
            [
                "start a1", "end a1", "start c2", "end c2", "start d3", "end d3"
            ],
            "no overlap, and the queued run starts when the first ends"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn request_and_wait_returns_the_run_that_serves_the_request() {
        let flight = flight(&Rc::default());
        on_a_loop(async move {
            assert_eq!(flight.request_and_wait('a').await, ('a', 1));
            flight.request('b');
            // A run is going: this request is served by the one queued behind it.
            assert_eq!(flight.request_and_wait('c').await, ('c', 3));
            assert_eq!(flight.finished(), 3);
        })
        .await;
    }

    #[tokio::test(start_paused = true)]
    async fn idle_resolves_at_once_when_nothing_runs_and_waiters_share_the_end() {
        let flight = flight(&Rc::default());
        on_a_loop(async move {
            flight.idle().await;
            assert_eq!(flight.finished(), 0);
            assert_eq!(flight.last(), None);
            flight.request('a');
            let other = flight.clone();
            let waiter = crate::spawn(async move {
                other.idle().await;
                other.finished()
            });
            flight.idle().await;
            assert_eq!(waiter.await.unwrap(), 1, "a second waiter resolves too");
        })
        .await;
    }
}
