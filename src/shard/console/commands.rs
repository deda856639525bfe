//! The shard's console commands: the state they answer from ([`Shell`], on the loop thread)
//! and the table of commands, one [`Spec`] and one method each.
//!
//! Adding a command is one entry in [`COMMANDS`] and one method on [`Shell`]; `help`, lookup
//! and the error lines come from [`super::language`]. Commands run on the loop thread: they
//! may read the world, and must never block (saves, rollups and prunes are requests that run
//! elsewhere; the log says when they are done).

use std::cell::RefCell;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Duration;

use tokio::sync::Notify;

use super::Printer;
use super::language::{self, Args, Spec, duration};
use super::loopstats::{self, CsvWriter};
use crate::game::Players;
use crate::net::Net;
use crate::persist::archive::upload::Uploader;
use crate::persist::archive::{self, Archiver};
use crate::persist::{Autosave, Cadence, Request, Saver};
use crate::runtime;
use crate::shard::StartedGames;
use crate::shard::status::StatusState;
use crate::shard::whole_seconds;
use crate::timer;
use crate::world::World;

/// Every console command, in the order `help` lists them.
pub(in crate::shard) const COMMANDS: &[Spec<Shell>] = &[
    Spec {
        name: "help",
        args: "",
        help: "list the commands",
        run: Shell::help,
    },
    Spec {
        name: "status",
        args: "",
        help: "verdict, uptime, entity counts, listeners, live timers, saves, last loop: line",
        run: Shell::status,
    },
    Spec {
        name: "netstats",
        args: "",
        help: "connections, hosts, refusals, bans, timeouts, flood drops, unsent output",
        run: Shell::net_stats,
    },
    Spec {
        name: "dumptimers",
        args: "",
        help: "live timers grouped by the line that started them",
        run: Shell::dump_timers,
    },
    Spec {
        name: "loopstats",
        args: "[csv [PATH]]",
        help: "the last minute of the loop profile (phase shares, worst seconds and \
               offenders) and the counters since start; `csv` writes the 15-minute history \
               to PATH (default <data_dir>/loopstats-<UTC time>.csv) and its chart beside it",
        run: Shell::loop_stats,
    },
    Spec {
        name: "save",
        args: "",
        help: "save the world now",
        run: Shell::save,
    },
    Spec {
        name: "savefrequency",
        args: "<every> [warning]",
        help: "autosave cadence, e.g. `savefrequency 30m 1m` (kept across restarts in \
               <data_dir>/autosave.toml)",
        run: Shell::save_frequency,
    },
    Spec {
        name: "autosave",
        args: "[on|off]",
        help: "show the autosave schedule, or turn it on/off until restart",
        run: Shell::autosave,
    },
    Spec {
        name: "archive",
        args: "",
        help: "roll backups up into hourly/daily/monthly archives now",
        run: Shell::archive,
    },
    Spec {
        name: "archivestatus",
        args: "",
        help: "archives per kind (count, bytes), the last rollup, the next",
        run: Shell::archive_status,
    },
    Spec {
        name: "prunearchives",
        args: "",
        help: "apply archive retention (and archive.prune's max_age) now",
        run: Shell::prune_archives,
    },
    Spec {
        name: "shutdown",
        args: "",
        help: "finish the current iteration, save the world and stop cleanly",
        run: Shell::shutdown,
    },
];

/// What the console's commands can see. Lives on the loop thread.
pub(in crate::shard) struct Shell {
    pub(in crate::shard) world: Rc<RefCell<World>>,
    pub(in crate::shard) net: Net,
    pub(in crate::shard) players: Rc<RefCell<Players>>,
    pub(in crate::shard) games: Rc<StartedGames>,
    pub(in crate::shard) status: Rc<StatusState>,
    pub(in crate::shard) shutdown: Rc<Notify>,
    pub(in crate::shard) saver: Saver,
    pub(in crate::shard) autosave: Autosave,
    pub(in crate::shard) archiver: Option<Archiver>,
    pub(in crate::shard) offsite: Option<Uploader>,
    pub(in crate::shard) data_dir: PathBuf,
    /// The addresses the listeners are bound to (a configured port 0 resolved), and the
    /// backend serving them.
    pub(in crate::shard) listening: Vec<SocketAddr>,
    pub(in crate::shard) backend: &'static str,
    /// Where answers that come later (`loopstats csv`) are printed; set once the console
    /// runs.
    pub(in crate::shard) printer: Rc<std::cell::OnceCell<Printer>>,
    pub(in crate::shard) loop_csv: CsvWriter,
    pub(in crate::shard) cadence_file: super::cadence_file::CadenceFile,
}

impl Shell {
    /// The answer to one typed line: a game's command, or one of [`COMMANDS`].
    pub(in crate::shard) fn answer(&self, line: &str) -> Option<String> {
        let words: Vec<&str> = line.split_whitespace().collect();
        let (name, rest) = words.split_first()?;
        let games = &self.games;
        match games
            .commands
            .iter()
            .find(|c| c.name.eq_ignore_ascii_case(name))
        {
            Some(command) => Some(match run_game_command(command, &games.context, rest) {
                Ok(answer) => answer,
                Err(reason) => language::ConsoleError::BadArguments {
                    command: command.name,
                    reason,
                }
                .to_string(),
            }),
            None => language::answer(COMMANDS, self, line),
        }
    }

    fn help(&self, args: Args<'_>) -> Result<String, String> {
        args.none()?;
        let mut text = language::help(COMMANDS);
        for c in &self.games.commands {
            let usage = match c.args {
                "" => c.name.to_owned(),
                args => format!("{} {args}", c.name),
            };
            text.push_str(&format!("  {usage:<28} {}\n", c.help));
        }
        Ok(text)
    }

    fn status(&self, args: Args<'_>) -> Result<String, String> {
        args.none()?;
        Ok(self.status_report())
    }

    fn net_stats(&self, args: Args<'_>) -> Result<String, String> {
        args.none()?;
        let (n, limits) = (self.net.stats(), self.net.limits());
        let mib = |bytes: usize| bytes as f64 / f64::from(1 << 20);
        let (full, charge) = self.net.full_sockets();
        let ipv4_prefix_cap = limits
            .max_per_ipv4_prefix
            .map_or_else(|| "off".to_owned(), |cap| cap.to_string());
        let connect_rate = limits.connect_rate.map_or_else(
            || "no connect rate".to_owned(),
            |rate| {
                format!(
                    "connect rate {rate}, ban {}",
                    humantime::format_duration(limits.connect_ban)
                )
            },
        );
        Ok(format!(
            "open      {} connections from {} hosts, {} not logged in (max {}, {} per host, {} \
             per IPv6 /{}, {} per IPv4 /{}, {} not logged in), {} accepted since start\n\
             refused   {} over max_connections, {} over max_per_ip, {} over \
             max_per_ipv6_prefix, {} over max_per_ipv4_prefix, {} over max_prelogin, {} over \
             connect_rate, {} banned, {} shed out of descriptors\n\
             bans      {} sources banned now, {} since start ({connect_rate}); {} connects \
             untracked (table full)\n\
             closed    {} ({} faults): {} login timeout, {} evicted before login, {} idle \
             timeout, {} flood, {} outbound budget, {} send buffer overflow, {} send soft limit\n\
             flood     {} packets dropped over their rate\n\
             outbound  {:.1} MiB of a {:.0} MiB budget: {:.1} MiB unsent, {} full sockets at \
             {} KiB of kernel buffers each\n\
             traffic   {} packets in, {} bytes in, {} bytes out; {} writes left to the next \
             iteration past a Flush phase's cap or time budget ({} phases stopped by the \
             budget)",
            n.connections,
            n.hosts,
            n.prelogin,
            limits.max_connections,
            limits.max_per_ip,
            limits.max_per_ipv6_prefix,
            limits.ipv6_prefix,
            ipv4_prefix_cap,
            limits.ipv4_prefix,
            limits.max_prelogin,
            n.accepted,
            n.refused,
            n.refused_per_ip,
            n.refused_per_ipv6_prefix,
            n.refused_per_ipv4_prefix,
            n.refused_prelogin,
            n.refused_rate,
            n.refused_banned,
            n.shed,
            n.banned,
            n.bans,
            n.rate_untracked,
            n.disconnects,
            n.faults,
            n.login_timeouts,
            n.prelogin_evictions,
            n.idle_timeouts,
            n.flood_disconnects,
            n.outbound_evictions,
            n.send_overflows,
            n.send_soft_overflows,
            n.flood_dropped,
            mib(self.net.outbound_bytes()),
            mib(limits.outbound_budget),
            mib(self.net.unsent_bytes()),
            full,
            charge / 1024,
            n.packets_in,
            n.bytes_in,
            n.bytes_out,
            n.flushes_deferred,
            n.flush_budget_stops,
        ))
    }

    fn dump_timers(&self, args: Args<'_>) -> Result<String, String> {
        args.none()?;
        Ok(timer::dump().to_string())
    }

    fn loop_stats(&self, args: Args<'_>) -> Result<String, String> {
        let path = match args.words() {
            [] => return Ok(loop_report()),
            [csv] if csv.eq_ignore_ascii_case("csv") => loopstats::default_path(&self.data_dir),
            [csv, path] if csv.eq_ignore_ascii_case("csv") => PathBuf::from(path),
            _ => return Err("usage: loopstats [csv [PATH]]".into()),
        };
        if !runtime::profiling() {
            return Err(PROFILE_OFF.into());
        }
        let printer = self
            .printer
            .get()
            .cloned()
            .ok_or("the console is not running")?;
        self.loop_csv
            .start(|| runtime::with_history(Clone::clone), path, printer)
    }

    fn save(&self, args: Args<'_>) -> Result<String, String> {
        args.none()?;
        Ok(match self.saver.request() {
            Request::Started => "saving the world now; the log says when it is on disk".into(),
            Request::Queued => "a save is writing; one more will start as soon as it ends".into(),
        })
    }

    fn save_frequency(&self, args: Args<'_>) -> Result<String, String> {
        let (every, warning) = parse_frequency(args.words())?;
        Ok(self.set_frequency(every, warning))
    }

    fn autosave(&self, args: Args<'_>) -> Result<String, String> {
        let Some(on) = parse_switch(args.words())? else {
            return Ok(self.autosave_report());
        };
        self.autosave.set_enabled(on);
        Ok(format!(
            "autosave {} until restart (autosave.enabled decides at start)\n{}",
            if on { "on" } else { "off" },
            self.autosave_report()
        ))
    }

    fn archive(&self, args: Args<'_>) -> Result<String, String> {
        args.none()?;
        Ok(self.with_archiver(|a| match a.request() {
            Request::Started => "archive rollup started; the log says what it wrote".into(),
            Request::Queued => "a rollup is running; one more will follow it".into(),
        }))
    }

    fn archive_status(&self, args: Args<'_>) -> Result<String, String> {
        args.none()?;
        Ok(self.with_archiver(|a| {
            let local = archive::archiver::status(a, self.autosave.next(), jiff::Timestamp::now());
            match &self.offsite {
                Some(offsite) => format!("{local}\n{}", offsite.status()),
                None => local,
            }
        }))
    }

    fn prune_archives(&self, args: Args<'_>) -> Result<String, String> {
        args.none()?;
        Ok(self.with_archiver(|a| match a.prune() {
            Request::Started => "pruning archives; the log says what it deleted".into(),
            Request::Queued => "a rollup is running; it prunes too, and one more follows".into(),
        }))
    }

    fn shutdown(&self, args: Args<'_>) -> Result<String, String> {
        args.none()?;
        self.shutdown.notify_one();
        Ok("shutting down: finishing the current iteration, then the shutdown hooks".into())
    }
}

// What the commands above share.
impl Shell {
    fn with_archiver(&self, f: impl FnOnce(&Archiver) -> String) -> String {
        match &self.archiver {
            Some(archiver) => f(archiver),
            None => "archives are off (archive.enabled = false)".into(),
        }
    }

    fn set_frequency(&self, every: Duration, warning: Option<Duration>) -> String {
        let warning = warning.unwrap_or(self.autosave.cadence().warning);
        let cadence = match Cadence::new(every, warning) {
            Ok(c) => c,
            Err(e) => return format!("error: savefrequency: {e}; nothing changed"),
        };
        self.autosave.set_cadence(cadence);
        let printer = self.printer.get().cloned();
        let path = self
            .cadence_file
            .keep(self.data_dir.clone(), cadence, printer);
        format!(
            "{}; kept across restarts in {} (written off the loop; a failure is said here)",
            self.autosave_report(),
            path.display()
        )
    }

    fn autosave_report(&self) -> String {
        let cadence = self.autosave.cadence();
        let warning = match cadence.warning.is_zero() {
            true => "no warning".to_owned(),
            false => format!(
                "players warned {} before",
                humantime::format_duration(cadence.warning)
            ),
        };
        let next = match self.autosave.next() {
            Some(at) => format!("next at {at}"),
            None if !self.autosave.enabled() => "off".to_owned(),
            None => "next not scheduled yet".to_owned(),
        };
        format!(
            "autosave every {} ({warning}), {next}",
            humantime::format_duration(cadence.every)
        )
    }

    fn status_report(&self) -> String {
        let stats = runtime::stats();
        let world = self.world.borrow();
        let last = match (&*self.status.last.borrow(), self.status.interval) {
            (Some(line), _) => line.to_string(),
            (None, Some(every)) => format!(
                "no loop: line yet (one every {})",
                humantime::format_duration(every)
            ),
            (None, None) => "loop: lines are off (server.loop_stats_interval = 0)".into(),
        };
        let net = self.net.stats();
        let listening = match self.listening.as_slice() {
            [] => "nothing (network.listen is empty)".to_owned(),
            addrs => {
                let addrs: Vec<String> = addrs.iter().map(ToString::to_string).collect();
                format!("{} ({})", addrs.join(", "), self.backend)
            }
        };
        format!(
            "verdict   {}\nuptime    {}\nworld     {} items, {} mobiles, {} spawners\n\
             listening {listening}\n\
             players   {} logged in, {} connections ({} accepted, {} refused, {} faults)\n\
             timers    {} live; NPC behaviours running: {}\n\
             saves     {} since start{}; {}\n\
             log       {} lines dropped (the log sink could not keep up)\nlast      {last}",
            stats.verdict,
            humantime::format_duration(whole_seconds(self.status.started.elapsed())),
            world.item_count(),
            world.mobile_count(),
            world.spawner_count(),
            self.players.borrow().len(),
            net.connections,
            net.accepted,
            net.refused_total(),
            net.faults,
            timer::live(),
            self.behaviours_report(),
            self.saver.finished(),
            if self.saver.is_writing() {
                ", one writing now"
            } else {
                ""
            },
            self.autosave_report(),
            crate::logs::dropped(),
        )
    }
}

/// Runs a game's command with its panics caught: a bug in one command answers with an error
/// line (and is logged with the line that registered it, and counted), the shard goes on.
fn run_game_command(
    command: &crate::game::CommandSpec,
    context: &crate::game::GameContext,
    words: &[&str],
) -> Result<String, String> {
    runtime::catch(|| (command.run)(context, words)).unwrap_or_else(|why| {
        runtime::count_panic();
        tracing::error!(
            command = command.name,
            registered_at = %command.site,
            "a console command panicked: {why}"
        );
        Err(format!("the command panicked ({why}); see the log"))
    })
}

impl Shell {
    /// `bark 3, crier 1` (or `none`).
    fn behaviours_report(&self) -> String {
        let stats = self.games.context.behaviour_stats();
        if stats.is_empty() {
            return "none".into();
        }
        let parts: Vec<String> = stats
            .iter()
            .map(|s| format!("{} {}", s.name, s.running))
            .collect();
        parts.join(", ")
    }
}

const PROFILE_OFF: &str = "the loop profile is not in this build (built without its default cargo feature loop-profiling)";

/// `loopstats`: the last minute of the profile, then the counters since start.
fn loop_report() -> String {
    let minute = if runtime::profiling() {
        runtime::with_history(|h| h.summary(60)).to_string()
    } else {
        PROFILE_OFF.to_owned()
    };
    format!(
        "{minute}

since start:
{}",
        runtime::stats()
    )
}

/// `savefrequency`'s arguments: the cadence and, optionally, the warning.
fn parse_frequency(words: &[&str]) -> Result<(Duration, Option<Duration>), String> {
    match words {
        [every] => Ok((duration(every)?, None)),
        [every, warning] => Ok((duration(every)?, Some(duration(warning)?))),
        _ => Err("usage: savefrequency <every> [warning], e.g. `savefrequency 30m 1m`".into()),
    }
}

/// `autosave`'s argument: none (show), `on` or `off`.
fn parse_switch(words: &[&str]) -> Result<Option<bool>, String> {
    match words {
        [] => Ok(None),
        [switch] if switch.eq_ignore_ascii_case("on") => Ok(Some(true)),
        [switch] if switch.eq_ignore_ascii_case("off") => Ok(Some(false)),
        _ => Err("expected `on` or `off`".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_has_one_name() {
        assert_eq!(language::duplicate_name(COMMANDS), None);
        let help = language::help(COMMANDS);
        for spec in COMMANDS {
            assert!(help.contains(spec.name), "{help}");
        }
    }

    /// `loopstats` with the profile: the last minute's summary; compiled out: the reason,
    /// then the loop's counters either way.
    #[tokio::test]
    async fn loopstats_says_whether_this_build_has_the_profile() {
        let mut el = crate::EventLoop::new();
        let report = el.run_until(async { loop_report() }).await;
        assert_eq!(
            report.starts_with(PROFILE_OFF),
            !runtime::profiling(),
            "{report}"
        );
        assert!(report.contains("since start:"), "{report}");
    }

    #[test]
    fn save_commands_take_their_arguments_and_refuse_bad_ones() {
        let min = |m: u64| Duration::from_secs(60 * m);
        assert_eq!(parse_frequency(&["30m", "1m"]), Ok((min(30), Some(min(1)))));
        assert_eq!(parse_frequency(&["2h"]), Ok((min(120), None)));
        for bad in [&[][..], &["soon"], &["1h", "1m", "1s"]] {
            assert!(parse_frequency(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_switch(&["OFF"]), Ok(Some(false)));
        assert_eq!(parse_switch(&[]), Ok(None));
        assert!(
            parse_switch(&["maybe"])
                .unwrap_err()
                .contains("`on` or `off`")
        );
    }
}
