//! The console through a running loop: commands answered in order, bad input answered with
//! one error line and no effect on the loop, a closed input harmless.

use std::io::{Cursor, Write};
use std::sync::{Arc, Mutex};

use shardloop::admin::{self, Command, MAX_LINE};
use shardloop::{EventLoop, timer};

#[derive(Clone, Default)]
struct Screen(Arc<Mutex<Vec<u8>>>);

impl Write for Screen {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Screen {
    fn lines(&self) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

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

#[tokio::test]
async fn commands_and_bad_input_get_one_answer_each_in_order() {
    let mut el = EventLoop::new();
    let mut input = b"status\nfoo bar\n\xff\xfe\n".to_vec();
    input.extend(std::iter::repeat_n(b'a', MAX_LINE + 10));
    input.extend_from_slice(b"\n\nLoopStats\nshutdown\n");
    let screen = Screen::default();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    admin::start(Cursor::new(input), screen.clone(), move |cmd| {
        s.lock().unwrap().push(cmd);
        format!("ok {cmd:?}")
    })
    .expect("threads start");
    run_until_lines(&mut el, &screen, 6).await;
    let lines = screen.lines();
    assert_eq!(lines[0], "ok Status");
    assert!(lines[1].contains("unknown command 'foo bar'"), "{lines:?}");
    assert!(lines[2].contains("not valid UTF-8"), "{lines:?}");
    assert!(lines[3].contains("longer than 64 KiB"), "{lines:?}");
    assert_eq!(lines[4], "ok LoopStats");
    assert_eq!(lines[5], "ok Shutdown");
    assert_eq!(
        *seen.lock().unwrap(),
        vec![Command::Status, Command::LoopStats, Command::Shutdown]
    );
    assert_eq!(el.stats().panics, 0);
}

#[tokio::test(start_paused = true)]
async fn a_closed_input_leaves_the_loop_running() {
    let mut el = EventLoop::new();
    let screen = Screen::default();
    admin::start(std::io::empty(), screen.clone(), |_| {
        unreachable!("no input")
    })
    .expect("threads start");
    el.run_until(timer::pause(1000)).await;
    assert!(screen.lines().is_empty());
    assert_eq!(el.stats().panics, 0);
}
