//! The console through a running loop: commands answered in order, bad input answered with
//! one error line and no effect on the loop, a closed input harmless.

use std::io::Cursor;

use std::cell::RefCell;

use shardloop::shard::console::{self, Args, MAX_LINE, Spec};
use shardloop::{EventLoop, timer};

mod common;
use common::capture::Capture as Screen;

/// Runs the loop (real time, bounded) until the screen has `n` lines.
async fn run_until_lines(el: &mut EventLoop, screen: &Screen, n: usize) {
    el.run_until(async {
        for _ in 0..500 {
            if screen.lines().len() >= n {
                return;
            }
            timer::pause(10).await;
        }
        panic!("console answered only {:?}", screen.lines());
    })
    .await;
}

/// The commands a test console knows: each answers "ok <name>" and is remembered.
type Seen = RefCell<Vec<&'static str>>;

fn ok(seen: &Seen, name: &'static str, args: Args<'_>) -> Result<String, String> {
    args.none()?;
    seen.borrow_mut().push(name);
    Ok(format!("ok {name}"))
}

const COMMANDS: &[Spec<Seen>] = &[
    Spec {
        name: "status",
        args: "",
        help: "",
        run: |seen, args| ok(seen, "status", args),
    },
    Spec {
        name: "loopstats",
        args: "",
        help: "",
        run: |seen, args| ok(seen, "loopstats", args),
    },
    Spec {
        name: "shutdown",
        args: "",
        help: "",
        run: |seen, args| ok(seen, "shutdown", args),
    },
];

#[tokio::test]
async fn commands_and_bad_input_get_one_answer_each_in_order() {
    let mut el = EventLoop::new();
    let mut input = b"status\nfoo bar\n\xff\xfe\n".to_vec();
    input.extend(std::iter::repeat_n(b'a', MAX_LINE + 10));
    input.extend_from_slice(b"\n\nLoopStats\nshutdown now\nshutdown\n");
    let screen = Screen::default();
    let seen = std::rc::Rc::new(Seen::default());
    let s = seen.clone();
    console::start(Cursor::new(input), screen.clone(), move |line| {
        console::language::answer(COMMANDS, &s, line)
    })
    .expect("threads start");
    run_until_lines(&mut el, &screen, 7).await;
    let lines = screen.lines();
    assert_eq!(lines[0], "ok status");
    assert!(lines[1].contains("unknown command 'foo bar'"), "{lines:?}");
    assert!(lines[2].contains("not valid UTF-8"), "{lines:?}");
    assert!(lines[3].contains("longer than 64 KiB"), "{lines:?}");
    assert_eq!(lines[4], "ok loopstats");
    assert_eq!(
        lines[5], "error: shutdown: takes no arguments; nothing changed",
        "{lines:?}"
    );
    assert_eq!(lines[6], "ok shutdown");
    assert_eq!(*seen.borrow(), ["status", "loopstats", "shutdown"]);
    assert_eq!(el.stats().panics, 0);
}

#[tokio::test(start_paused = true)]
async fn a_closed_input_leaves_the_loop_running() {
    let mut el = EventLoop::new();
    let screen = Screen::default();
    console::start(std::io::empty(), screen.clone(), |_| {
        unreachable!("no input")
    })
    .expect("threads start");
    el.run_until(timer::pause(1000)).await;
    assert!(screen.lines().is_empty());
    assert_eq!(el.stats().panics, 0);
}
