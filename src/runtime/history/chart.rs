//! The loopstats chart: one history ([`LoopSecond`]s, oldest first) as an SVG stacked-area
//! plot of where the loop thread's wall time went each second — the work parts at the bottom,
//! then stolen time, then sleep, 0–100 % of the wall time — with the second's max wheel lag
//! as a line on its own axis (ms, right), a title, titled axes and a legend.
//!
//! It draws with `plotters`' SVG backend, which writes text as SVG `<text>` (no font is read,
//! so nothing beyond the crate is needed to build or run it). It only renders to a string:
//! where the SVG goes, and on which thread, is the caller's choice; it must never run on the
//! loop thread (drawing 900 seconds takes milliseconds, not microseconds).

use std::fmt;
use std::iter;
use std::ops::Range;

use plotters::coord::Shift;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use super::LoopSecond;
use crate::runtime::Phase;

/// The picture's size in pixels.
const WIDTH: u32 = 1280;
const HEIGHT: u32 = 640;
/// The strip on the right that holds the legend.
const LEGEND_WIDTH: u32 = 250;
/// More columns than this are merged (a column per pixel or so is all a reader can see).
const MAX_COLUMNS: usize = 1200;

/// The wheel lag line's name in the legend.
pub const LAG_LABEL: &str = "max wheel lag (right axis)";

/// A phase's colour, from its row of the phase table; the lag line is black over all of them.
fn colour(phase: Phase) -> RGBColor {
    let (r, g, b) = phase.info().colour;
    RGBColor(r, g, b)
}

/// Why no chart was drawn.
#[derive(Debug)]
pub enum ChartError {
    /// There were no seconds to draw.
    Empty,
    /// The drawing library failed (it writes to a string, so this is a bug, not I/O).
    Draw(String),
}

impl fmt::Display for ChartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChartError::Empty => f.write_str("no seconds to draw: the history is empty"),
            ChartError::Draw(e) => write!(f, "cannot draw the chart: {e}"),
        }
    }
}

impl std::error::Error for ChartError {}

impl<E: std::error::Error + Send + Sync> From<DrawingAreaErrorKind<E>> for ChartError {
    fn from(e: DrawingAreaErrorKind<E>) -> ChartError {
        ChartError::Draw(e.to_string())
    }
}

/// One column of the chart: a span of uptime seconds and its shares and lag.
#[derive(Debug, Clone, Copy)]
struct Column {
    start: f64,
    end: f64,
    /// Cumulative shares in %, in [`Phase::stacked`] order: `top[i]` is the top of band `i`.
    top: [f64; Phase::COUNT],
    lag_ms: f64,
}

/// Merges `seconds` into at most [`MAX_COLUMNS`] columns (a merged column's shares are its
/// time over its wall time, its lag the worst).
fn columns(seconds: &[LoopSecond]) -> Vec<Column> {
    let per = seconds.len().div_ceil(MAX_COLUMNS).max(1);
    let chunks: Vec<&[LoopSecond]> = seconds.chunks(per).collect();
    chunks
        .iter()
        .enumerate()
        .map(|(i, chunk)| {
            let first = &chunk[0];
            let last = &chunk[chunk.len() - 1];
            // A column ends where the next begins; the last one after its wall time.
            let end = match chunks.get(i + 1) {
                Some(next) => next[0].uptime_second as f64,
                None => last.uptime_second as f64 + last.wall.as_secs_f64().round().max(1.0),
            };
            let start = first.uptime_second as f64;
            Column {
                start,
                end: end.max(start + 1.0),
                top: stacked_shares(chunk),
                lag_ms: chunk
                    .iter()
                    .map(|s| s.counts.max_wheel_lag.as_secs_f64() * 1e3)
                    .fold(0.0, f64::max),
            }
        })
        .collect()
}

/// The top of each band in % (clamped to 100: a record whose parts overrun its wall time
/// must not draw outside the plot).
fn stacked_shares(chunk: &[LoopSecond]) -> [f64; Phase::COUNT] {
    let wall: f64 = chunk.iter().map(|s| s.wall.as_secs_f64()).sum();
    let mut top = [0.0; Phase::COUNT];
    let mut sum = 0.0;
    for (i, part) in Phase::stacked().into_iter().enumerate() {
        if wall > 0.0 {
            let spent: f64 = chunk.iter().map(|s| s.spent(part).as_secs_f64()).sum();
            sum += spent / wall * 100.0;
        }
        top[i] = sum.min(100.0);
    }
    top
}

/// Band `band` as a polygon: along its top left to right, back along its bottom (the top of
/// the band below) right to left. Each column is a flat step over its span.
fn band(columns: &[Column], band: usize) -> Vec<(f64, f64)> {
    let level = |c: &Column, i: Option<usize>| i.map_or(0.0, |i| c.top[i]);
    let below = band.checked_sub(1);
    let top = columns.iter().flat_map(|c| {
        [
            (c.start, level(c, Some(band))),
            (c.end, level(c, Some(band))),
        ]
    });
    let bottom = columns
        .iter()
        .rev()
        .flat_map(|c| [(c.end, level(c, below)), (c.start, level(c, below))]);
    top.chain(bottom).collect()
}

/// The chart of `seconds` (oldest first, as a [`History`](crate::runtime::history::History)
/// or `read_csv` gives them) as an SVG document, titled `title`.
///
/// # Errors
/// [`ChartError::Empty`] for no seconds.
pub fn svg(seconds: &[LoopSecond], title: &str) -> Result<String, ChartError> {
    let (Some(first), Some(last)) = (seconds.first(), seconds.last()) else {
        return Err(ChartError::Empty);
    };
    let columns = columns(seconds);
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE)?;
        let root = root.titled(title, ("sans-serif", 28))?;
        let (plot, legend) = root.split_horizontally(WIDTH - LEGEND_WIDTH);
        draw_plot(&plot, &columns, seconds.len(), (first, last))?;
        draw_legend(&legend)?;
        root.present()?;
    }
    Ok(out)
}

/// The time of day of uptime second `x`, from the newest record's pairing of the two clocks
/// (uptime never jumps; the wall clock may have been stepped).
fn time_label(x: f64, newest: &LoopSecond) -> String {
    let offset = newest.unix_second as f64 - newest.uptime_second as f64;
    let unix = (x + offset).max(0.0) as u64;
    crate::runtime::history::time_of_day(unix)
}

/// The time axis: uptime seconds, labelled at [`ticks`].
struct TimeAxis {
    inner: RangedCoordf64,
    ticks: Vec<f64>,
}

impl TimeAxis {
    fn new(range: Range<f64>, newest: &LoopSecond) -> TimeAxis {
        TimeAxis {
            ticks: ticks(range.start, range.end, newest),
            inner: range.into(),
        }
    }
}

impl Ranged for TimeAxis {
    type ValueType = f64;
    type FormatOption = DefaultFormatting;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.inner.map(value, limit)
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> Range<f64> {
        self.inner.range()
    }
}

/// Where the time axis is labelled: on round wall-clock times (whole minutes, or 10 s
/// steps for a short history), about eight of them.
fn ticks(x0: f64, x1: f64, newest: &LoopSecond) -> Vec<f64> {
    const STEPS: [u64; 10] = [10, 30, 60, 120, 300, 600, 900, 1_800, 3_600, 7_200];
    let span = (x1 - x0).max(1.0) as u64;
    let step = STEPS
        .into_iter()
        .find(|step| span / step <= 8)
        .unwrap_or_else(|| span.div_ceil(8).next_multiple_of(3_600));
    let offset = newest.unix_second as f64 - newest.uptime_second as f64;
    let first = ((x0 + offset).max(0.0) as u64).next_multiple_of(step);
    (0..)
        .map(|i| (first + i * step) as f64 - offset)
        .take_while(|&x| x <= x1)
        .collect()
}

fn draw_plot<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    columns: &[Column],
    records: usize,
    (first, last): (&LoopSecond, &LoopSecond),
) -> Result<(), ChartError>
where
    DB::ErrorType: 'static,
{
    let x0 = columns[0].start;
    let x1 = columns[columns.len() - 1].end;
    let lag_peak = columns.iter().map(|c| c.lag_ms).fold(0.0, f64::max);
    // Headroom over the peak, and at least a millisecond so an idle loop's few µs sit low.
    let lag_top = (lag_peak * 1.15).max(1.0);
    let caption = caption(records, columns.len(), (first, last), lag_peak);
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 17))
        .margin(12)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .right_y_label_area_size(96)
        .build_cartesian_2d(TimeAxis::new(x0..x1, last), 0.0..100.0)?
        .set_secondary_coord(x0..x1, 0.0..lag_top);

    for (i, part) in Phase::stacked().into_iter().enumerate() {
        let polygon = Polygon::new(band(columns, i), colour(part).filled());
        chart.draw_series(iter::once(polygon))?;
    }
    // The grid goes over the bands so shares can be read off it.
    let label = |x: &f64| time_label(*x, last);
    chart
        .configure_mesh()
        .x_labels(10)
        .y_labels(11)
        .x_label_formatter(&label)
        .y_label_formatter(&|y| format!("{y:.0}"))
        .x_desc("time of day (UTC)")
        .y_desc("share of the loop thread's wall time (%)")
        .bold_line_style(BLACK.mix(0.18))
        .light_line_style(TRANSPARENT)
        .axis_desc_style(("sans-serif", 17))
        .label_style(("sans-serif", 15))
        .draw()?;
    chart
        .configure_secondary_axes()
        .y_desc("max wheel lag per second (ms)")
        .y_label_formatter(&|y| match lag_top {
            top if top >= 20.0 => format!("{y:.0}"),
            _ => format!("{y:.1}"),
        })
        .axis_desc_style(("sans-serif", 17))
        .label_style(("sans-serif", 15))
        .draw()?;
    // Through the middle of each column, so a one-second spike leaves that second's bands
    // visible beside the line.
    let lag = columns.iter().map(|c| ((c.start + c.end) / 2.0, c.lag_ms));
    chart.draw_secondary_series(LineSeries::new(lag, BLACK.stroke_width(1)))?;
    Ok(())
}

/// The line under the title: the date and span, how many seconds, the worst lag.
fn caption(
    records: usize,
    columns: usize,
    (first, last): (&LoopSecond, &LoopSecond),
    lag_peak: f64,
) -> String {
    let date = i64::try_from(first.unix_second)
        .ok()
        .and_then(|s| jiff::Timestamp::from_second(s).ok())
        .map_or_else(String::new, |t| t.strftime("%Y-%m-%d ").to_string());
    let merged = match columns {
        n if n < records => format!(" (merged into {n} columns)"),
        _ => String::new(),
    };
    format!(
        "{date}{}–{} UTC, uptime {}–{} s: {records} seconds recorded{merged}; worst wheel lag \
         {lag_peak:.1} ms",
        time_label(first.uptime_second as f64, last),
        time_label(last.uptime_second as f64, last),
        first.uptime_second,
        last.uptime_second,
    )
}

/// The legend, top to bottom in the order the reader sees the stack: the lag line, then the
/// bands from the top (sleep) down.
fn draw_legend<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>) -> Result<(), ChartError>
where
    DB::ErrorType: 'static,
{
    let font = ("sans-serif", 16).into_font();
    let (x, mut y) = (8, 90);
    area.draw(&Text::new(
        "legend",
        (x, y - 26),
        font.clone().style(FontStyle::Bold),
    ))?;
    area.draw(&Rectangle::new(
        [(x, y + 5), (x + 22, y + 8)],
        BLACK.filled(),
    ))?;
    area.draw(&Text::new(LAG_LABEL, (x + 30, y), font.clone()))?;
    for part in Phase::stacked().into_iter().rev() {
        y += 26;
        let swatch = [(x, y), (x + 22, y + 14)];
        area.draw(&Rectangle::new(swatch, colour(part).filled()))?;
        area.draw(&Rectangle::new(swatch, BLACK.mix(0.4)))?;
        area.draw(&Text::new(part.name(), (x + 30, y), font.clone()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn second(n: u64, timers_ms: u64) -> LoopSecond {
        let mut s = LoopSecond {
            unix_second: 1_700_000_000 + n,
            uptime_second: n,
            wall: Duration::from_secs(1),
            ..LoopSecond::default()
        };
        s.counts.max_wheel_lag = Duration::from_millis(timers_ms);
        s.add(Phase::Timers, Duration::from_millis(timers_ms));
        s.add(Phase::Sleep, Duration::from_millis(1_000 - timers_ms));
        s
    }

    #[test]
    fn bands_stack_to_the_wall_time_and_step_per_second() {
        let seconds = [second(0, 100), second(1, 500)];
        let columns = columns(&seconds);
        assert_eq!(columns.len(), 2);
        let timers = band(&columns, 0);
        // Top: 10 % over [0, 1), 50 % over [1, 2); bottom: the axis.
        assert_eq!(
            timers,
            [
                (0.0, 10.0),
                (1.0, 10.0),
                (1.0, 50.0),
                (2.0, 50.0),
                (2.0, 0.0),
                (1.0, 0.0),
                (1.0, 0.0),
                (0.0, 0.0)
            ]
        );
        let sleep = band(&columns, Phase::COUNT - 1);
        assert!(sleep.iter().take(4).all(|&(_, y)| (y - 100.0).abs() < 1e-9));
        assert_eq!(sleep[4], (2.0, 50.0), "sleep sits on the bands below");
    }

    #[test]
    fn long_histories_are_merged_into_columns_keeping_the_worst_lag() {
        let seconds: Vec<LoopSecond> = (0..3_000).map(|n| second(n, n % 7)).collect();
        let columns = columns(&seconds);
        assert_eq!(columns.len(), 1_000, "3 seconds a column");
        assert_eq!((columns[1].start, columns[1].end), (3.0, 6.0));
        assert_eq!(columns[1].lag_ms, 5.0, "the worst of 3, 4, 5 ms");
        // 3 + 4 + 5 ms of timers in 3 s of wall time: 0.4 %.
        assert!(
            (columns[1].top[0] - 0.4).abs() < 1e-9,
            "{}",
            columns[1].top[0]
        );
    }

    #[test]
    fn overrun_parts_are_clamped_and_nothing_is_empty() {
        let mut s = second(0, 900);
        s.add(Phase::Stolen, Duration::from_millis(500));
        let top = stacked_shares(&[s]);
        assert_eq!(top[Phase::COUNT - 1], 100.0);
        assert!(matches!(svg(&[], "t"), Err(ChartError::Empty)));
    }
}
