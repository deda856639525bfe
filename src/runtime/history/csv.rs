//! The history as CSV: one header row, then one row per second, oldest first. Every column is
//! listed, in order, in [`COLUMNS`] — built from the phase table and the counts table — and
//! in `docs/loopstats-csv.md`, which a test keeps equal.
//! Durations are whole microseconds (truncated); an offender's two columns are both empty when
//! that kind of work did not run in the second.
//!
//! [`read_csv`] is for the offline chart: it takes a file someone hands it, so it bounds every
//! line ([`MAX_LINE_BYTES`]) and the row count ([`MAX_ROWS`]) before it keeps anything, and
//! refuses anything it did not write with the line, the column and the reason.

use std::collections::BTreeSet;
use std::fmt;
use std::io::{self, BufRead, Read, Write};
use std::sync::Mutex;
use std::time::Duration;

use super::{LoopSecond, Offender, Offenders, Site};
use crate::runtime::Phase;
use crate::runtime::telemetry::{SECONDS, Value};

/// A CSV column: its header name and what it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Column {
    /// Its name in the header row.
    pub name: &'static str,
    /// What it holds, as `docs/loopstats-csv.md` says it.
    pub doc: &'static str,
}

const fn col(name: &'static str, doc: &'static str) -> Column {
    Column { name, doc }
}

/// The columns before the phases.
const HEAD: [Column; 3] = [
    col(
        "unix_s",
        "wall-clock start of the second, seconds since the Unix epoch (UTC)",
    ),
    col(
        "uptime_s",
        "the loop's uptime at the start of the second, whole seconds",
    ),
    col(
        "wall_us",
        "wall time the row covers (about 1 000 000; more when work ran past the second)",
    ),
];

/// The column after the phases: the measured share of stolen time.
const RUN_QUEUE: Column = col(
    "run_queue_us",
    "the part of stolen_us measured as run-queue wait (schedstat)",
);

/// The offenders' columns, last: two per kind of work.
const OFFENDERS: [Column; 8] = [
    col(
        "worst_timer_us",
        "the longest timer callback; empty when none ran",
    ),
    col(
        "worst_timer_site",
        "where that timer was created, file:line:column",
    ),
    col(
        "worst_task_us",
        "the longest task poll; empty when none ran",
    ),
    col(
        "worst_task_site",
        "where that task was spawned, file:line:column",
    ),
    col(
        "worst_posted_us",
        "the longest posted closure; empty when none ran",
    ),
    col(
        "worst_posted_site",
        "where that closure was posted, file:line:column",
    ),
    col(
        "worst_handler_us",
        "the longest packet handler; empty when none ran",
    ),
    col(
        "worst_handler_packet",
        "that handler's packet id, hexadecimal (0x02)",
    ),
];

const COLUMN_COUNT: usize = HEAD.len() + Phase::COUNT + 1 + SECONDS.len() + OFFENDERS.len();

/// Every column, in order: the head, one per [`Phase`] (from the phase table), run-queue
/// wait, one per value of [`SECONDS`] (from the counts table), the offenders.
pub const COLUMNS: [Column; COLUMN_COUNT] = columns();

const fn columns() -> [Column; COLUMN_COUNT] {
    let mut out = [col("", ""); COLUMN_COUNT];
    let mut n = 0;
    let mut i = 0;
    while i < HEAD.len() {
        out[n] = HEAD[i];
        (n, i) = (n + 1, i + 1);
    }
    i = 0;
    while i < Phase::COUNT {
        let phase = Phase::ALL[i].info();
        out[n] = col(phase.column, phase.doc);
        (n, i) = (n + 1, i + 1);
    }
    out[n] = RUN_QUEUE;
    n += 1;
    i = 0;
    while i < SECONDS.len() {
        out[n] = col(SECONDS[i].column, SECONDS[i].doc);
        (n, i) = (n + 1, i + 1);
    }
    i = 0;
    while i < OFFENDERS.len() {
        out[n] = OFFENDERS[i];
        (n, i) = (n + 1, i + 1);
    }
    out
}

/// The most rows [`read_csv`] takes: a day of seconds and then some (a ring holds 900).
pub const MAX_ROWS: usize = 100_000;

/// The longest line [`read_csv`] takes, in bytes: a row is a few hundred at most.
pub const MAX_LINE_BYTES: usize = 4096;

/// Distinct source file names the readers of one process keep for sites, and the longest.
/// A [`Site`] holds a `&'static str`, so a read file name is leaked once per process and
/// shared after that; these bound the leak at 256 KiB whatever the files say.
const MAX_SITE_FILES: usize = 1024;
const MAX_SITE_FILE_BYTES: usize = 256;

/// Writes `seconds` (oldest first) as CSV: the header, then one row each.
///
/// # Errors
/// Those of `out`.
pub fn write_csv<'a>(
    seconds: impl IntoIterator<Item = &'a LoopSecond>,
    out: impl Write,
) -> io::Result<()> {
    let mut out = io::BufWriter::new(out);
    let names: Vec<&str> = COLUMNS.iter().map(|c| c.name).collect();
    writeln!(out, "{}", names.join(","))?;
    for second in seconds {
        write_row(second, &mut out)?;
    }
    out.flush()
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

fn write_row(s: &LoopSecond, out: &mut impl Write) -> io::Result<()> {
    write!(
        out,
        "{},{},{}",
        s.unix_second,
        s.uptime_second,
        micros(s.wall)
    )?;
    for phase in Phase::ALL {
        write!(out, ",{}", micros(s.spent(phase)))?;
    }
    write!(out, ",{}", micros(s.run_queue_wait))?;
    for row in &SECONDS {
        write!(out, ",{}", (row.get)(&s.counts).as_number())?;
    }
    let w = &s.worst;
    for offender in [w.timer, w.task, w.posted] {
        match offender {
            Some(o) => write!(out, ",{},{}", micros(o.took), SiteField(o.site))?,
            None => write!(out, ",,")?,
        }
    }
    match w.handler {
        Some(o) => writeln!(out, ",{},0x{:02x}", micros(o.took), o.site),
        None => writeln!(out, ",,"),
    }
}

/// A site as a CSV field: quoted when the file name holds a comma or a quote; a control
/// character (a line break) would break the one-row-per-line rule, so it becomes `?`.
struct SiteField(Site);

impl fmt::Display for SiteField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = self.0.to_string().replace(char::is_control, "?");
        if text.contains([',', '"']) {
            write!(f, "\"{}\"", text.replace('"', "\"\""))
        } else {
            f.write_str(&text)
        }
    }
}

/// Why a CSV was refused: where, and what was wrong.
#[derive(Debug)]
pub enum CsvError {
    /// Reading failed.
    Io(io::Error),
    /// Line `line` (1-based) is wrong; `column` (1-based, with its name) when one field is.
    Bad {
        /// The line, counted from 1 (the header is line 1).
        line: usize,
        /// The column, counted from 1, and its name, when one field is at fault.
        column: Option<(usize, &'static str)>,
        /// What is wrong with it.
        reason: String,
    },
}

impl fmt::Display for CsvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CsvError::Io(e) => write!(f, "cannot read: {e}"),
            CsvError::Bad {
                line,
                column: Some((column, name)),
                reason,
            } => write!(f, "line {line}, column {column} ({name}): {reason}"),
            CsvError::Bad {
                line,
                column: None,
                reason,
            } => write!(f, "line {line}: {reason}"),
        }
    }
}

impl std::error::Error for CsvError {}

fn bad(line: usize, reason: impl Into<String>) -> CsvError {
    CsvError::Bad {
        line,
        column: None,
        reason: reason.into(),
    }
}

/// Reads what [`write_csv`] wrote: the header (exactly [`COLUMNS`]), then rows with
/// non-decreasing `uptime_s`. An empty file, a line over [`MAX_LINE_BYTES`], more than
/// [`MAX_ROWS`] rows, a missing, extra or malformed field are refused, naming the line (and
/// the column).
///
/// # Errors
/// [`CsvError`], naming where.
pub fn read_csv(input: impl Read) -> Result<Vec<LoopSecond>, CsvError> {
    read_rows(input, MAX_ROWS)
}

/// [`read_csv`] with a row limit of `max_rows`.
pub(super) fn read_rows(input: impl Read, max_rows: usize) -> Result<Vec<LoopSecond>, CsvError> {
    let mut lines = Lines::new(input);
    let Some(header) = lines.next_line()? else {
        return Err(bad(1, "empty: expected the header row"));
    };
    check_header(&header)?;
    let mut seconds = Vec::new();
    while let Some(text) = lines.next_line()? {
        let line = lines.number;
        if seconds.len() == max_rows {
            return Err(bad(line, format!("more than {max_rows} rows")));
        }
        let second = parse_row(&text, line)?;
        if let Some(previous) = seconds.last().map(|s: &LoopSecond| s.uptime_second)
            && second.uptime_second < previous
        {
            return Err(bad(
                line,
                format!(
                    "uptime_s {} is before the previous row's {previous}: rows go oldest first",
                    second.uptime_second
                ),
            ));
        }
        seconds.push(second);
    }
    Ok(seconds)
}

/// Lines of at most [`MAX_LINE_BYTES`], counted from 1, without their `\n` or `\r\n`.
struct Lines<R> {
    input: io::BufReader<R>,
    number: usize,
    buf: Vec<u8>,
}

impl<R: Read> Lines<R> {
    fn new(input: R) -> Self {
        Lines {
            input: io::BufReader::new(input),
            number: 0,
            buf: Vec::with_capacity(MAX_LINE_BYTES + 1),
        }
    }

    fn next_line(&mut self) -> Result<Option<String>, CsvError> {
        self.buf.clear();
        self.number += 1;
        // One byte over the limit tells a too-long line from one exactly at it.
        let limit = (MAX_LINE_BYTES + 2) as u64;
        let read = (&mut self.input)
            .take(limit)
            .read_until(b'\n', &mut self.buf)
            .map_err(CsvError::Io)?;
        if read == 0 {
            return Ok(None);
        }
        if self.buf.last() == Some(&b'\n') {
            self.buf.pop();
            if self.buf.last() == Some(&b'\r') {
                self.buf.pop();
            }
        }
        if self.buf.len() > MAX_LINE_BYTES {
            let reason = format!("longer than {MAX_LINE_BYTES} bytes");
            return Err(bad(self.number, reason));
        }
        match std::str::from_utf8(&self.buf) {
            Ok(text) => Ok(Some(text.to_owned())),
            Err(e) => Err(bad(self.number, format!("not UTF-8 ({e})"))),
        }
    }
}

fn check_header(header: &str) -> Result<(), CsvError> {
    let found: Vec<&str> = header.split(',').collect();
    for (i, column) in COLUMNS.iter().enumerate() {
        match found.get(i) {
            Some(name) if name.trim() == column.name => {}
            Some(name) => {
                return Err(bad(
                    1,
                    format!(
                        "header column {} should be {:?}, found {:?}: not a loopstats CSV",
                        i + 1,
                        column.name,
                        name.chars().take(40).collect::<String>()
                    ),
                ));
            }
            None => {
                let reason = format!(
                    "header has {} columns, expected {}",
                    found.len(),
                    COLUMNS.len()
                );
                return Err(bad(1, reason));
            }
        }
    }
    if found.len() > COLUMNS.len() {
        let reason = format!(
            "header has {} columns, expected {}",
            found.len(),
            COLUMNS.len()
        );
        return Err(bad(1, reason));
    }
    Ok(())
}

/// Splits a row into fields: commas separate, a field may be quoted (`""` is a quote).
fn split_fields(text: &str, line: usize) -> Result<Vec<String>, CsvError> {
    let mut fields = vec![String::new()];
    let mut chars = text.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        let field = fields.last_mut().expect("one field at least");
        match (c, quoted) {
            ('"', false) if field.is_empty() => quoted = true,
            ('"', true) if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            ('"', true) => {
                quoted = false;
                if chars.peek().is_some_and(|&next| next != ',') {
                    return Err(bad(
                        line,
                        format!("text after a closing quote in field {}", fields.len()),
                    ));
                }
            }
            (',', false) => {
                if fields.len() == COLUMNS.len() {
                    let reason = format!("more than {} fields", COLUMNS.len());
                    return Err(bad(line, reason));
                }
                fields.push(String::new());
            }
            (c, _) => field.push(c),
        }
    }
    if quoted {
        return Err(bad(
            line,
            format!("unclosed quote in field {}", fields.len()),
        ));
    }
    if fields.len() < COLUMNS.len() {
        let reason = format!("{} fields, expected {}", fields.len(), COLUMNS.len());
        return Err(bad(line, reason));
    }
    Ok(fields)
}

/// The fields of one row, taken in column order, each parse naming its column on error.
struct Fields {
    fields: std::vec::IntoIter<String>,
    index: usize,
    line: usize,
}

impl Fields {
    fn take(&mut self) -> (String, usize) {
        let index = self.index;
        self.index += 1;
        (self.fields.next().unwrap_or_default(), index)
    }

    fn error(&self, index: usize, reason: String) -> CsvError {
        CsvError::Bad {
            line: self.line,
            column: Some((index + 1, COLUMNS[index].name)),
            reason,
        }
    }

    fn count(&mut self) -> Result<u64, CsvError> {
        let (text, index) = self.take();
        parse_u64(&text).map_err(|reason| self.error(index, reason))
    }

    fn micros(&mut self) -> Result<Duration, CsvError> {
        self.count().map(Duration::from_micros)
    }

    /// An offender: `took` in µs and a site, both empty or both present.
    fn offender<S>(
        &mut self,
        site: fn(&str) -> Result<S, String>,
    ) -> Result<Option<Offender<S>>, CsvError> {
        let (took, took_index) = self.take();
        let (text, site_index) = self.take();
        match (took.is_empty(), text.is_empty()) {
            (true, true) => Ok(None),
            (false, false) => {
                let took = parse_u64(&took).map_err(|r| self.error(took_index, r))?;
                let site = site(&text).map_err(|r| self.error(site_index, r))?;
                Ok(Some(Offender {
                    took: Duration::from_micros(took),
                    site,
                }))
            }
            (true, false) => Err(self.error(took_index, "empty, but the site is not".into())),
            (false, true) => Err(self.error(site_index, "empty, but the duration is not".into())),
        }
    }
}

fn parse_u64(text: &str) -> Result<u64, String> {
    if text.is_empty() {
        return Err("empty, expected a whole number".into());
    }
    text.parse::<u64>().map_err(|_| {
        let shown: String = text.chars().take(40).collect();
        format!("{shown:?} is not a whole number 0..={}", u64::MAX)
    })
}

fn parse_row(text: &str, line: usize) -> Result<LoopSecond, CsvError> {
    let mut f = Fields {
        fields: split_fields(text, line)?.into_iter(),
        index: 0,
        line,
    };
    let mut s = LoopSecond {
        unix_second: f.count()?,
        uptime_second: f.count()?,
        wall: f.micros()?,
        ..LoopSecond::default()
    };
    for phase in Phase::ALL {
        s.parts[phase as usize] = f.micros()?;
    }
    s.run_queue_wait = f.micros()?;
    for row in &SECONDS {
        let n = f.count()?;
        let value = if row.kind.is_time() {
            Value::Time(Duration::from_micros(n))
        } else {
            Value::Number(n)
        };
        (row.set)(&mut s.counts, value);
    }
    s.worst = Offenders {
        timer: f.offender(parse_site)?,
        task: f.offender(parse_site)?,
        posted: f.offender(parse_site)?,
        handler: f.offender(parse_packet)?,
    };
    Ok(s)
}

/// `file:line:column`; the file name may itself hold colons, so the numbers are taken from
/// the right.
fn parse_site(text: &str) -> Result<Site, String> {
    let mut parts = text.rsplitn(3, ':');
    let (Some(column), Some(line), Some(file)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(format!("{:?} is not file:line:column", shorten(text)));
    };
    let number = |t: &str| {
        t.parse::<u32>()
            .map_err(|_| format!("{:?} is not file:line:column", shorten(text)))
    };
    Ok(Site {
        line: number(line)?,
        column: number(column)?,
        file: intern(file)?,
    })
}

fn parse_packet(text: &str) -> Result<u8, String> {
    text.strip_prefix("0x")
        .and_then(|hex| u8::from_str_radix(hex, 16).ok())
        .ok_or_else(|| format!("{:?} is not a packet id 0x00..=0xff", shorten(text)))
}

fn shorten(text: &str) -> String {
    text.chars().take(40).collect()
}

/// The one `&'static str` for a file name, leaked the first time it is seen (bounded by
/// [`MAX_SITE_FILES`] and [`MAX_SITE_FILE_BYTES`]).
fn intern(file: &str) -> Result<&'static str, String> {
    static FILES: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());
    if file.is_empty() || file.len() > MAX_SITE_FILE_BYTES {
        return Err(format!(
            "a site's file name must be 1 to {MAX_SITE_FILE_BYTES} bytes, this one is {}",
            file.len()
        ));
    }
    // A panic elsewhere while holding the lock leaves the set intact: take it anyway.
    let mut files = FILES.lock().unwrap_or_else(|poison| poison.into_inner());
    if let Some(known) = files.get(file) {
        return Ok(known);
    }
    if files.len() == MAX_SITE_FILES {
        return Err(format!(
            "more than {MAX_SITE_FILES} distinct source files in sites"
        ));
    }
    let leaked: &'static str = Box::leak(file.to_owned().into_boxed_str());
    files.insert(leaked);
    Ok(leaked)
}
