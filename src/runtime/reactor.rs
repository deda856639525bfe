//! The loop thread's own reactor: one `epoll` for the descriptors the loop itself reads.
//!
//! tokio's reactor cannot be waited on from outside tokio's park, so a loop whose sockets
//! live there must park through tokio, and pay tokio's driver turn on every wake. The
//! descriptors registered here (the network backend's sockets, the park's timerfd and
//! doorbell) are in an `epoll` the loop owns, so the loop can block in it directly
//! (`park.rs`, the own wait) and a packet or a post costs one return from `epoll_wait`.
//!
//! **Who turns it.** Only the loop thread, at three places, all in `park.rs`: the own wait
//! (`epoll_wait` with no timeout: the park's timerfd bounds it), a park through tokio (the
//! `epoll` descriptor is itself registered with tokio's reactor, which reports it readable
//! when any descriptor in it has an event, and the park then turns it without blocking), and
//! an iteration that does not park (a turn without blocking, as tokio's `yield_now` turns
//! tokio's). Every turn is followed by a loop iteration, which is what lets a turn raise its
//! sources quietly (`context::Turning`). Two more calls drive only the driver (below): a park
//! through tokio before it blocks ([`Reactor::drive_now`]), and the park of a loop that is
//! going ([`Reactor::finish_driver`]).
//!
//! **Readiness** is edge-triggered (`EPOLLET`): the kernel queues an event whenever a
//! descriptor becomes readable or writable again, and the turn sets the source's
//! [`Readiness`] bits and wakes its waker. The owner clears a bit only when the kernel said
//! "would block" (or a read came back short, see `net/epoll.rs`); since events are only
//! handled by a turn on this same thread, nothing can set a bit between the owner's system
//! call and its clearing, so no edge is lost.
//!
//! **Tokens.** An event carries a slot index and the slot's generation; a slot freed and
//! reused meanwhile has another generation, so an event for a source that is gone wakes
//! nothing. Two values are kept for the park's own descriptors ([`PARK_TIMER`],
//! [`PARK_DOORBELL`]), which the turn reports instead of dispatching.
//!
//! **A driver.** A completion-based backend (io_uring) does not wait for readiness: it hands
//! work to the kernel and reaps what the kernel finished, and both need a system call the
//! loop thread makes. Such a backend installs itself as the reactor's [`Driver`] (one per
//! reactor) and registers its own descriptor as a source, so an event of it ends a park like
//! a socket's. Every turn then drives it twice: before `epoll_wait`, so that work queued by
//! the iteration that is about to park reaches the kernel first (a turn that leaves work
//! queued does not block), and after it, to reap what the wait brought. The driver needs no
//! task of tokio's, which lets a loop on io_uring park in its own wait.
//!
//! This module must never decide when to park or for how long (the loop does) and never
//! reads or writes a socket (its owner does).

use std::cell::{Cell, RefCell};
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::rc::{Rc, Weak};
use std::task::Waker;

use super::context::{LoopId, Turning};

/// `epoll` data of the park's timerfd.
pub(crate) const PARK_TIMER: u64 = 0;
/// `epoll` data of the park's doorbell `eventfd`.
pub(crate) const PARK_DOORBELL: u64 = 1;
/// Slot indexes start here: the values below are the park's.
const FIRST_SLOT: u64 = 2;

/// Passes a driver gets to hand the kernel what is queued when its loop goes: a full
/// submission queue (1,024 entries for io_uring) is 32 batches.
const FINISHING_PASSES: usize = 64;

/// Events taken per `epoll_wait`; a turn that fills them asks again (without blocking).
const EVENTS_PER_WAIT: usize = 256;

thread_local! {
    /// This thread's reactor while anything holds it.
    static THREAD_REACTOR: RefCell<Weak<Reactor>> = const { RefCell::new(Weak::new()) };
}

/// A completion-based backend driven by the reactor's turns (see "A driver" in the module
/// docs).
pub(crate) trait Driver {
    /// Completes what the kernel finished, waking the sources concerned, and, if `submit`,
    /// hands the kernel a bounded batch of what was queued (and completes what that batch
    /// finished at once).
    fn drive(&self, submit: bool) -> Drove;
}

/// What a [`Driver`] pass left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Drove {
    /// Nothing for the thread to see now: it may block.
    Idle,
    /// The thread must not block now: work is left queued, something completed (its wake
    /// raised the loop's signal quietly, after the park last looked at it), or the driver
    /// started a loop timer (the park must choose its deadline again).
    Busy,
    /// Nothing is in flight and nobody but the reactor holds the driver: the reactor lets go
    /// of it (the backend's next user installs a new one).
    Done,
}

/// What one turn found besides its sources.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Turn {
    /// The park's timerfd expired.
    pub(crate) timer: bool,
    /// The park's doorbell was rung.
    pub(crate) doorbell: bool,
    /// Sources whose waker this turn woke.
    pub(crate) sources: usize,
}

/// The thread's `epoll` and the sources registered in it.
pub(crate) struct Reactor {
    epoll: OwnedFd,
    slots: RefCell<Vec<Slot>>,
    free: RefCell<Vec<u32>>,
    /// Sources registered now.
    live: Cell<usize>,
    /// A park's own wait holds [`PARK_TIMER`] and [`PARK_DOORBELL`]: one per reactor, so
    /// that no other park can take its edges.
    park_taken: Cell<bool>,
    /// The backend driven by every turn, if one is installed. It holds the reactor in turn
    /// (through its descriptor's registration); the cycle ends when the driver says
    /// [`Drove::Done`], when the thread's last loop goes ([`Reactor::finish_driver`]), or
    /// when a new backend's driver replaces it ([`Reactor::set_driver`]).
    driver: RefCell<Option<Rc<dyn Driver>>>,
}

struct Slot {
    generation: u32,
    source: Option<Rc<Source>>,
}

/// A registered descriptor's readiness and the waker its events wake.
struct Source {
    readiness: Readiness,
    waker: Waker,
}

/// The readable and writable bits of one source, set by turns and cleared by its owner.
#[derive(Default)]
pub(crate) struct Readiness(Cell<u8>);

const READABLE: u8 = 1;
const WRITABLE: u8 = 2;
/// The peer closed its side, or the socket failed: sticky, so that a read that drained the
/// last bytes (and cleared [`READABLE`]) still goes to the kernel next time and reads the
/// close, which came with those bytes and brings no later event.
const READ_CLOSED: u8 = 4;
/// The socket hung up or failed: sticky for writes likewise.
const WRITE_CLOSED: u8 = 8;

impl Readiness {
    fn set(&self, bits: u8) {
        self.0.set(self.0.get() | bits);
    }

    fn clear(&self, bits: u8) {
        self.0.set(self.0.get() & !bits);
    }
}

impl Reactor {
    /// This thread's reactor, created if nobody holds one.
    pub(crate) fn for_this_thread() -> io::Result<Rc<Reactor>> {
        if let Some(reactor) = THREAD_REACTOR.with(|r| r.borrow().upgrade()) {
            return Ok(reactor);
        }
        let reactor = Rc::new(Reactor::new()?);
        THREAD_REACTOR.with(|r| *r.borrow_mut() = Rc::downgrade(&reactor));
        Ok(reactor)
    }

    fn new() -> io::Result<Reactor> {
        // SAFETY: epoll_create1 has no memory-safety preconditions; the result is checked.
        let epoll = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if epoll < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Reactor {
            // SAFETY: a fresh descriptor that nothing else owns.
            epoll: unsafe { OwnedFd::from_raw_fd(epoll) },
            slots: RefCell::new(Vec::new()),
            free: RefCell::new(Vec::new()),
            live: Cell::new(0),
            park_taken: Cell::new(false),
            driver: RefCell::new(None),
        })
    }

    /// The `epoll` descriptor (readable while any event waits in it).
    pub(crate) fn fd(&self) -> RawFd {
        self.epoll.as_raw_fd()
    }

    /// Whether any source is registered, or a driver installed.
    pub(crate) fn has_sources(&self) -> bool {
        self.live.get() > 0 || self.driver.borrow().is_some()
    }

    /// Adds a park's own timerfd and doorbell, readable, edge-triggered, as [`PARK_TIMER`]
    /// and [`PARK_DOORBELL`]. Fails if another park holds them (a second loop parking outside
    /// tokio on this thread): that loop then parks through tokio. [`Reactor::release_park`]
    /// gives them back.
    pub(crate) fn take_for_park(&self, timer: RawFd, doorbell: RawFd) -> io::Result<()> {
        if self.park_taken.get() {
            return Err(io::Error::other(
                "another loop's park waits in this thread's reactor",
            ));
        }
        let readable = libc::EPOLLIN as u32 | EDGE;
        self.ctl(libc::EPOLL_CTL_ADD, timer, readable, PARK_TIMER)?;
        if let Err(e) = self.ctl(libc::EPOLL_CTL_ADD, doorbell, readable, PARK_DOORBELL) {
            let _ = self.ctl(libc::EPOLL_CTL_DEL, timer, 0, 0);
            return Err(e);
        }
        self.park_taken.set(true);
        Ok(())
    }

    /// Removes a park's timerfd and doorbell (its own wait is gone).
    pub(crate) fn release_park(&self, timer: RawFd, doorbell: RawFd) {
        let _ = self.ctl(libc::EPOLL_CTL_DEL, timer, 0, 0);
        let _ = self.ctl(libc::EPOLL_CTL_DEL, doorbell, 0, 0);
        self.park_taken.set(false);
    }

    /// This thread's reactor, if something holds one.
    pub(crate) fn existing() -> Option<Rc<Reactor>> {
        THREAD_REACTOR
            .try_with(|r| r.borrow().upgrade())
            .ok()
            .flatten()
    }

    /// Makes `driver` the backend every turn drives, in place of any other. (A backend offers
    /// one driver per thread while it lives and lets it go when it dies, so the one replaced
    /// is a dead backend's, kept only by its last sockets.)
    pub(crate) fn set_driver(&self, driver: Rc<dyn Driver>) {
        let replaced = self.driver.borrow_mut().replace(driver);
        drop(replaced); // outside the borrow: its drop may deregister its descriptor
    }

    /// Lets go of the driver: the thread's last loop, whose turns drove it, is going, and
    /// nothing else would hand the kernel what its sockets queued last (the goodbyes of a
    /// shard that stops). So the driver first runs until nothing is left queued, at most
    /// [`FINISHING_PASSES`] passes, without waiting for anything. What else holds the backend
    /// keeps it; when that goes, the backend closes.
    pub(crate) fn finish_driver(&self) {
        let driver = self.driver.borrow_mut().take();
        if let Some(driver) = &driver {
            for _ in 0..FINISHING_PASSES {
                if driver.drive(true) != Drove::Busy {
                    break;
                }
            }
        }
        drop(driver); // outside the borrow: the backend's drop deregisters its descriptor
    }

    /// Drives the installed driver outside a turn (a park through tokio, before it blocks):
    /// true if the thread must not block ([`Drove::Busy`]). `for_loop` as for
    /// [`Reactor::turn`].
    pub(crate) fn drive_now(&self, for_loop: LoopId) -> bool {
        let _turning = Turning::enter(for_loop);
        self.drive(true)
    }

    /// Drives the installed driver, if any ([`Driver::drive`]): true if the thread must not
    /// block.
    fn drive(&self, submit: bool) -> bool {
        let Some(driver) = self.driver.borrow().clone() else {
            return false;
        };
        match driver.drive(submit) {
            Drove::Idle => false,
            Drove::Busy => true,
            Drove::Done => {
                let done = {
                    let mut slot = self.driver.borrow_mut();
                    let same = slot.as_ref().is_some_and(|d| Rc::ptr_eq(d, &driver));
                    if same { slot.take() } else { None }
                };
                drop(driver);
                drop(done); // outside the borrow: the backend's drop deregisters its descriptor
                false
            }
        }
    }

    /// Registers `fd` for both directions (and hang-ups), edge-triggered: from now on every
    /// event sets its readiness and wakes `waker`. Both bits start set, so the first read or
    /// write goes to the kernel, which says whether to wait.
    pub(crate) fn register(self: &Rc<Self>, fd: RawFd, waker: Waker) -> io::Result<Registration> {
        let source = Rc::new(Source {
            readiness: Readiness(Cell::new(READABLE | WRITABLE)),
            waker,
        });
        let index = match self.free.borrow_mut().pop() {
            Some(index) => index,
            None => {
                let mut slots = self.slots.borrow_mut();
                slots.push(Slot {
                    generation: 0,
                    source: None,
                });
                // Below 2^32 - FIRST_SLOT, so that a slot's token never reaches its generation.
                u32::try_from(slots.len() - 1)
                    .ok()
                    .filter(|&i| u64::from(i) + FIRST_SLOT <= u64::from(u32::MAX))
                    .ok_or_else(|| io::Error::other("too many sources in one reactor"))?
            }
        };
        let generation = {
            let mut slots = self.slots.borrow_mut();
            let slot = &mut slots[index as usize];
            slot.source = Some(source.clone());
            slot.generation
        };
        let interest = (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP) as u32 | EDGE;
        if let Err(e) = self.ctl(libc::EPOLL_CTL_ADD, fd, interest, token(index, generation)) {
            self.release(index);
            return Err(e);
        }
        self.live.set(self.live.get() + 1);
        Ok(Registration {
            reactor: self.clone(),
            source,
            fd,
            index,
        })
    }

    /// Takes the events waiting, blocking up to `timeout_ms` (-1: until one comes) for the
    /// first: sets each source's readiness and wakes its waker, and reports the park's own.
    /// `for_loop` is the loop whose park turns (see [`Turning`]). An error is returned
    /// only if nothing was dispatched: a turn that woke sources reports them.
    pub(crate) fn turn(&self, timeout_ms: libc::c_int, for_loop: LoopId) -> io::Result<Turn> {
        let _turning = Turning::enter(for_loop);
        let mut turn = Turn::default();
        // Not zeroed: the kernel writes the first `n`, and only those are read.
        let mut events = [const { MaybeUninit::<libc::epoll_event>::uninit() }; EVENTS_PER_WAIT];
        // The driver's queued work goes to the kernel before the thread blocks.
        let mut timeout = if self.drive(true) {
            turn.sources += 1;
            0
        } else {
            timeout_ms
        };
        loop {
            // SAFETY: `events` has room for the count asked for; the descriptor is ours.
            let n = unsafe {
                libc::epoll_wait(
                    self.epoll.as_raw_fd(),
                    events.as_mut_ptr().cast(),
                    EVENTS_PER_WAIT as libc::c_int,
                    timeout,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted || turn != Turn::default() {
                    // A signal, or a failure after a full batch: the caller looks at its
                    // queues (and what this turn woke) and comes back.
                    break;
                }
                return Err(e);
            }
            let n = n as usize;
            // SAFETY: epoll_wait initialised the first `n` entries.
            let ready = unsafe { std::slice::from_raw_parts(events.as_ptr().cast(), n) };
            self.dispatch(ready, &mut turn);
            if n < EVENTS_PER_WAIT {
                break;
            }
            timeout = 0;
        }
        // What the wait brought the driver (its descriptor's event, or completions of the
        // work handed over before it) is reaped now, not one iteration later. Nothing more is
        // submitted: one batch per turn, the next after an iteration.
        if self.drive(false) {
            turn.sources += 1;
        }
        Ok(turn)
    }

    /// Sets the readiness of the sources `events` name and wakes them (the caller is
    /// [`Turning`]).
    fn dispatch(&self, events: &[libc::epoll_event], turn: &mut Turn) {
        for event in events {
            let (data, flags) = (event.u64, event.events);
            match data {
                PARK_TIMER => turn.timer = true,
                PARK_DOORBELL => turn.doorbell = true,
                _ => {
                    let Some(source) = self.source(data) else {
                        continue;
                    };
                    source.readiness.set(bits_of(flags));
                    source.waker.wake_by_ref();
                    turn.sources += 1;
                }
            }
        }
    }

    /// The live source `data` names, if its slot still holds the generation it names.
    fn source(&self, data: u64) -> Option<Rc<Source>> {
        let index = usize::try_from((data & 0xffff_ffff).checked_sub(FIRST_SLOT)?).ok()?;
        let generation = (data >> 32) as u32;
        let slots = self.slots.borrow();
        let slot = slots.get(index)?;
        (slot.generation == generation)
            .then(|| slot.source.clone())
            .flatten()
    }

    fn release(&self, index: u32) {
        let mut slots = self.slots.borrow_mut();
        let slot = &mut slots[index as usize];
        slot.source = None;
        slot.generation = slot.generation.wrapping_add(1);
        self.free.borrow_mut().push(index);
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, events: u32, data: u64) -> io::Result<()> {
        let mut event = libc::epoll_event { events, u64: data };
        // SAFETY: both descriptors are live (the caller owns `fd`); `event` is valid.
        let rc = unsafe { libc::epoll_ctl(self.epoll.as_raw_fd(), op, fd, &mut event) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

const EDGE: u32 = libc::EPOLLET as u32;

/// The `epoll` data of slot `index` at `generation`.
fn token(index: u32, generation: u32) -> u64 {
    (u64::from(generation) << 32) | (u64::from(index) + FIRST_SLOT)
}

/// The readiness bits an event's flags give: a hang-up or an error sets both, so that the
/// owner's next read and write each go to the kernel and learn of it.
fn bits_of(flags: u32) -> u8 {
    let mut bits = 0;
    if flags & libc::EPOLLIN as u32 != 0 {
        bits |= READABLE;
    }
    if flags & libc::EPOLLOUT as u32 != 0 {
        bits |= WRITABLE;
    }
    if flags & (libc::EPOLLRDHUP | libc::EPOLLHUP | libc::EPOLLERR) as u32 != 0 {
        bits |= READ_CLOSED;
    }
    if flags & (libc::EPOLLHUP | libc::EPOLLERR) as u32 != 0 {
        bits |= WRITE_CLOSED;
    }
    bits
}

/// One descriptor registered with the thread's reactor. Dropping it removes the descriptor
/// from the `epoll` (drop it before closing the descriptor) and frees its slot.
pub(crate) struct Registration {
    reactor: Rc<Reactor>,
    source: Rc<Source>,
    fd: RawFd,
    index: u32,
}

impl Registration {
    /// Whether the descriptor may be readable (not known to be drained since its last event).
    #[must_use]
    pub(crate) fn readable(&self) -> bool {
        self.source.readiness.0.get() & (READABLE | READ_CLOSED) != 0
    }

    /// Whether the descriptor may be writable.
    #[must_use]
    pub(crate) fn writable(&self) -> bool {
        self.source.readiness.0.get() & (WRITABLE | WRITE_CLOSED) != 0
    }

    /// The kernel said the descriptor has nothing more to read: wait for its next event (a
    /// close already seen stays seen).
    pub(crate) fn clear_readable(&self) {
        self.source.readiness.clear(READABLE);
    }

    /// The kernel said the descriptor takes nothing more now: wait for its next event.
    pub(crate) fn clear_writable(&self) {
        self.source.readiness.clear(WRITABLE);
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        // Closing the descriptor would remove it too, but only once no duplicate of it is
        // open anywhere; removing it here ends its events with the registration.
        let _ = self.reactor.ctl(libc::EPOLL_CTL_DEL, self.fd, 0, 0);
        self.reactor.release(self.index);
        self.reactor.live.set(self.reactor.live.get() - 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::wake_slot::WakeCount;
    use std::io::Write;
    use std::sync::Arc;

    fn pair() -> (std::net::TcpStream, std::net::TcpStream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let client =
            std::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (server, _) = listener.accept().expect("accept");
        server.set_nonblocking(true).expect("non-blocking");
        (client, server)
    }

    /// The thread's reactor, a connected pair, and the server end registered with a counter.
    fn registered() -> (
        Rc<Reactor>,
        std::net::TcpStream,
        std::net::TcpStream,
        Arc<WakeCount>,
        Registration,
    ) {
        let reactor = Reactor::for_this_thread().expect("reactor");
        let (client, server) = pair();
        let (waker, count) = WakeCount::waker();
        let reg = reactor
            .register(server.as_raw_fd(), waker)
            .expect("register");
        (reactor, client, server, count, reg)
    }

    #[test]
    fn an_event_after_a_clear_sets_the_bit_again_and_wakes() {
        let (reactor, mut client, _server, count, reg) = registered();
        assert!(reg.readable() && reg.writable(), "both start set");
        reg.clear_readable();
        reg.clear_writable();
        // The registration itself queues the writable edge.
        let first = reactor.turn(10_000, 0).expect("turn");
        assert!(first.sources >= 1 && reg.writable() && !reg.readable());
        let woken = count.count();
        client.write_all(b"x").expect("write");
        let second = reactor.turn(10_000, 0).expect("turn");
        assert_eq!(second.sources, 1);
        assert!(reg.readable(), "data sets the readable bit");
        assert_eq!(count.count(), woken + 1);
        // Nothing new: a turn without blocking finds nothing (edge-triggered).
        assert_eq!(reactor.turn(0, 0).expect("turn"), Turn::default());
    }

    #[test]
    fn an_event_of_a_dropped_registration_wakes_nothing() {
        let (reactor, mut client, server, count, reg) = registered();
        reactor.turn(10_000, 0).expect("turn");
        drop(reg);
        assert!(!reactor.has_sources());
        let woken = count.count();
        client.write_all(b"x").expect("write");
        assert_eq!(reactor.turn(50, 0).expect("turn").sources, 0);
        assert_eq!(count.count(), woken);
        // The freed slot is reused under a new generation.
        let again = reactor
            .register(server.as_raw_fd(), WakeCount::waker().0)
            .expect("register");
        assert_eq!(again.index, 0);
    }

    /// A driver that answers from a script, recording each pass's `submit`.
    struct Scripted {
        answers: RefCell<Vec<Drove>>,
        passes: RefCell<Vec<bool>>,
    }

    impl Scripted {
        fn install(reactor: &Reactor, answers: &[Drove]) -> Rc<Scripted> {
            let driver = Rc::new(Scripted {
                // Popped from the end.
                answers: RefCell::new(answers.iter().rev().copied().collect()),
                passes: RefCell::new(Vec::new()),
            });
            reactor.set_driver(driver.clone());
            driver
        }
    }

    impl Driver for Scripted {
        fn drive(&self, submit: bool) -> Drove {
            self.passes.borrow_mut().push(submit);
            self.answers.borrow_mut().pop().unwrap_or(Drove::Idle)
        }
    }

    /// Work the driver still has queued when the loop is about to block keeps the turn from
    /// blocking: the driver is driven before the wait, which then takes nothing, and after it.
    #[test]
    fn a_driver_with_work_left_keeps_a_turn_from_blocking() {
        let reactor = Reactor::for_this_thread().expect("reactor");
        let driver = Scripted::install(&reactor, &[Drove::Busy]);
        assert!(reactor.has_sources(), "a driver is a source");
        let began = std::time::Instant::now();
        // A minute, unless the driver's answer cuts it short.
        let turn = reactor.turn(60_000, 0).expect("turn");
        assert!(began.elapsed() < std::time::Duration::from_secs(30));
        assert_eq!(turn.sources, 1, "the busy pass counts as a source woken");
        assert_eq!(
            *driver.passes.borrow(),
            [true, false],
            "a batch before the wait; after it, completions only"
        );
        // Idle now: the next turn waits its whole timeout, driven before and after.
        let began = std::time::Instant::now();
        assert_eq!(reactor.turn(30, 0).expect("turn"), Turn::default());
        assert!(began.elapsed() >= std::time::Duration::from_millis(30));
        assert_eq!(driver.passes.borrow().len(), 4);
        // What the pass after the wait completed counts as a source woken too.
        driver
            .answers
            .borrow_mut()
            .extend([Drove::Busy, Drove::Idle]);
        assert_eq!(reactor.turn(0, 0).expect("turn").sources, 1);
    }

    /// A driver that says it is done is let go of, and a driver whose loop goes gets passes
    /// until nothing is left queued (bounded), then is let go of too.
    #[test]
    fn a_done_driver_is_let_go_and_a_finishing_one_is_driven_until_idle() {
        let reactor = Reactor::for_this_thread().expect("reactor");
        let driver = Scripted::install(&reactor, &[Drove::Done]);
        reactor.turn(0, 0).expect("turn");
        assert_eq!(driver.passes.borrow().len(), 1);
        assert_eq!(Rc::strong_count(&driver), 1, "the reactor let go");
        assert!(!reactor.has_sources());

        let finishing = Scripted::install(&reactor, &[Drove::Busy, Drove::Busy, Drove::Idle]);
        reactor.finish_driver();
        assert_eq!(
            *finishing.passes.borrow(),
            [true; 3],
            "driven while busy, then let go"
        );
        assert_eq!(Rc::strong_count(&finishing), 1);

        let endless = Scripted::install(&reactor, &[Drove::Busy; FINISHING_PASSES + 10]);
        reactor.finish_driver();
        assert_eq!(endless.passes.borrow().len(), FINISHING_PASSES, "bounded");
        assert!(!reactor.has_sources());
    }
}
