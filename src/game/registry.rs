//! What a game registers with the shard: its packets (and their flood limits), its
//! disconnect hooks, how world changes look on its wire, its world, its NPC behaviours, what
//! it starts with the world, and its console commands — as a [`Game`], a plain value the
//! shard builder takes. Every game is registered this way, the demo included.
//!
//! Owns the registrations and the checks run when the shard is built: two handlers for one
//! packet id, a handler for the network's own ping, two console commands with one name, or a
//! flood limit on a packet nobody handles are [`BuildError`]s naming both sites. Must never
//! start anything: [`super::behaviours`] and the shard do, when the shard runs.

use std::fmt;
use std::future::Future;
use std::panic::Location;

use crate::net::frame::PING;
use crate::net::{Access, BadPacket, Rate};
use crate::world::{Mobile, World};

use super::behaviours::NpcSpec;
use super::context::GameContext;
use super::deltas::DeltaPackets;
use super::dispatch::Packet;
use super::npc::Npc;

/// Where a registration was made (the line that called [`Game::packet`] and the like): error
/// messages and panic logs name it.
pub(crate) type Site = &'static Location<'static>;

/// A packet handler. `Err` disconnects the sender with its reason (logged with its peer).
pub(crate) type PacketFn = dyn Fn(&mut Packet<'_>, &[u8]) -> Result<(), BadPacket>;

/// A disconnect hook: the closing connection as a [`Packet`] with no payload — its player,
/// if it logged in, is still in the world and the table while the hook runs.
pub(crate) type DisconnectFn = dyn Fn(&mut Packet<'_>);

/// A console command: the words after its name in, the answer (or why the arguments are
/// refused: nothing changed) out.
pub(crate) type CommandFn = dyn Fn(&GameContext, &[&str]) -> Result<String, String>;

/// A start hook and the line that registered it.
pub(crate) type StartHook = (Box<dyn FnOnce(&GameContext)>, Site);

/// A change to the world made before anything starts.
pub(crate) type WorldSetup = Box<dyn FnOnce(&mut World)>;

/// Makes the world a shard starts with when it has no save ([`Game::world_generator`]).
pub(crate) type WorldGenerator = dyn FnOnce() -> World;

pub(crate) struct PacketSpec {
    pub(crate) id: u8,
    pub(crate) name: &'static str,
    pub(crate) access: Access,
    pub(crate) handler: Box<PacketFn>,
    pub(crate) site: Site,
}

pub(crate) struct CommandSpec {
    pub(crate) name: &'static str,
    pub(crate) args: &'static str,
    pub(crate) help: &'static str,
    pub(crate) run: Box<CommandFn>,
    pub(crate) site: Site,
}

/// A game: everything it plugs into a shard. Build it with the chained methods, hand it to
/// the shard builder (`shardloop::shard::Shard::builder().game(..)`); nothing runs until the
/// shard does.
///
/// ```
/// use shardloop::game::{Game, Packet};
/// use shardloop::net::{Access, BadPacket};
///
/// fn wave(p: &mut Packet<'_>, _payload: &[u8]) -> Result<(), BadPacket> {
///     let (serial, at) = p.player()?;
///     p.broadcast_in_range(at, 0x91, &[&serial.0.to_be_bytes()]);
///     Ok(())
/// }
///
/// let game = Game::new("waving").packet(0x11, "wave", Access::LoggedIn, wave);
/// assert_eq!(game.name(), "waving");
/// ```
#[must_use = "a game does nothing until it is given to the shard builder"]
pub struct Game {
    name: &'static str,
    pub(crate) packets: Vec<PacketSpec>,
    pub(crate) rates: Vec<(u8, Rate, Site)>,
    pub(crate) npcs: Vec<NpcSpec>,
    pub(crate) starts: Vec<StartHook>,
    pub(crate) setups: Vec<WorldSetup>,
    pub(crate) commands: Vec<CommandSpec>,
    pub(crate) disconnects: Vec<(Box<DisconnectFn>, Site)>,
    pub(crate) deltas: Option<(DeltaPackets, Site)>,
    pub(crate) generator: Option<(Box<WorldGenerator>, Site)>,
}

impl Game {
    /// An empty game called `name` (in logs and errors).
    pub fn new(name: &'static str) -> Game {
        Game {
            name,
            packets: Vec::new(),
            rates: Vec::new(),
            npcs: Vec::new(),
            starts: Vec::new(),
            setups: Vec::new(),
            commands: Vec::new(),
            disconnects: Vec::new(),
            deltas: None,
            generator: None,
        }
    }

    /// The game's name, given to [`Game::new`]: how build errors and logs name it.
    #[must_use]
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Handles packet `id` (client → server) with `handler`, in the Network phase, for
    /// connections `access` allows. Two handlers for one id, in this game or another, stop
    /// the shard's build with an error naming both lines.
    #[track_caller]
    pub fn packet(
        mut self,
        id: u8,
        name: &'static str,
        access: Access,
        handler: impl Fn(&mut Packet<'_>, &[u8]) -> Result<(), BadPacket> + 'static,
    ) -> Game {
        self.packets.push(PacketSpec {
            id,
            name,
            access,
            handler: Box::new(handler),
            site: Location::caller(),
        });
        self
    }

    /// Runs `hook` whenever a connection closes — logout, a fault, the peer hanging up — in
    /// the Network or Flush phase, before the engine takes the connection's player out of the
    /// world: `p.player()` still answers for a logged-in one. Every game's hooks run, in
    /// registration order; none replaces another, and one that panics is logged with its
    /// line while the rest still run.
    #[track_caller]
    pub fn on_disconnect(mut self, hook: impl Fn(&mut Packet<'_>) + 'static) -> Game {
        self.disconnects.push((Box::new(hook), Location::caller()));
        self
    }

    /// What players are sent when a mobile in range moves or speaks: the game's packets
    /// ([`DeltaPackets`]). The engine picks who sees each change and sends it once per loop
    /// iteration; without this, world changes send nothing. One game per shard may set it (a
    /// second is a build error naming both lines); a later call in the same game replaces
    /// the earlier one.
    #[track_caller]
    pub fn deltas(mut self, packets: DeltaPackets) -> Game {
        self.deltas = Some((packets, Location::caller()));
        self
    }

    /// Makes the world the shard starts with when there is no save yet (the first start, or
    /// a new data directory): e.g. the game's map, towns and spawners. Runs once, before
    /// [`Game::setup_world`] and anything else; after a save exists the shard loads that
    /// instead. Without a generator a shard starts empty ([`World::new`] with the
    /// `world.generate.seed` of the configuration). One game per shard may set it (a second
    /// is a build error naming both lines); a later call in the same game replaces it.
    #[track_caller]
    pub fn world_generator(mut self, generate: impl FnOnce() -> World + 'static) -> Game {
        self.generator = Some((Box::new(generate), Location::caller()));
        self
    }

    /// Limits packet `id` to `rate` per connection: beyond it the packet is dropped, far
    /// beyond it the sender is disconnected (`docs/protocol.md`, flood limits).
    #[track_caller]
    pub fn rate_limit(mut self, id: u8, rate: Rate) -> Game {
        self.rates.push((id, rate, Location::caller()));
        self
    }

    /// Runs `behaviour` for every NPC that `applies` to, while its sector is awake: started
    /// (as a task on the loop) when the NPC's sector wakes or the NPC appears in an awake
    /// one, its future dropped when the sector falls asleep or the NPC is removed. An NPC in
    /// a sleeping sector costs nothing. A behaviour that panics stops for that NPC (until it
    /// next wakes), is logged with this line and the NPC, and counted; the loop goes on.
    #[track_caller]
    pub fn npc_behaviour<F, Fut>(
        mut self,
        name: &'static str,
        applies: impl Fn(&Mobile) -> bool + 'static,
        behaviour: F,
    ) -> Game
    where
        F: Fn(Npc) -> Fut + 'static,
        Fut: Future<Output = ()> + 'static,
    {
        self.npcs.push(NpcSpec {
            name,
            applies: Box::new(applies),
            start: Box::new(move |npc| Box::pin(behaviour(npc))),
            site: Location::caller(),
        });
        self
    }

    /// Runs `start` on the loop when the shard starts, after the world is loaded: start
    /// world-level timers and tasks here and hand them to [`GameContext::keep`] (or spawn
    /// with [`GameContext::spawn`]) so that stopping the shard stops them.
    #[track_caller]
    pub fn on_start(mut self, start: impl FnOnce(&GameContext) + 'static) -> Game {
        self.starts.push((Box::new(start), Location::caller()));
        self
    }

    /// Changes the world once it is loaded (or generated), before anything starts: put the
    /// game's NPCs and items in. The world it sees may come from a save that already has
    /// them — make it idempotent (look before you add), or every restart adds them again.
    pub fn setup_world(mut self, setup: impl FnOnce(&mut World) + 'static) -> Game {
        self.setups.push(Box::new(setup));
        self
    }

    /// Adds console command `name` (matched case-insensitively) with its argument synopsis
    /// and one line of help, both shown by `help`. It runs on the loop thread: it may read
    /// and change the world, and must never block. A name the shard or another game already
    /// uses stops the build with an error.
    #[track_caller]
    pub fn command(
        mut self,
        name: &'static str,
        args: &'static str,
        help: &'static str,
        run: impl Fn(&GameContext, &[&str]) -> Result<String, String> + 'static,
    ) -> Game {
        self.commands.push(CommandSpec {
            name,
            args,
            help,
            run: Box::new(run),
            site: Location::caller(),
        });
        self
    }
}

impl fmt::Debug for Game {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Game")
            .field("name", &self.name)
            .field("packets", &self.packets.len())
            .field("npc_behaviours", &self.npcs.len())
            .field("commands", &self.commands.len())
            .finish_non_exhaustive()
    }
}

/// Why a shard with these games cannot be built. Each names the games and lines involved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BuildError {
    /// Two handlers for one packet id.
    DuplicatePacket {
        /// The packet id (client → server).
        id: u8,
        /// The handler registered first.
        first: Registered,
        /// The handler that clashed with it.
        second: Registered,
    },
    /// A handler for the ping id, which the network answers itself.
    ReservedPacket {
        /// The reserved id ([`crate::net::frame::PING`]).
        id: u8,
        /// The registration that claimed it.
        at: Registered,
    },
    /// Two console commands with one name (case-insensitively), or a game command named like
    /// one of the shard's own (`first.game` is then `"shard"`).
    DuplicateCommand {
        /// The command's name, as the second registration spelled it.
        name: &'static str,
        /// The command registered first.
        first: Registered,
        /// The command that clashed with it.
        second: Registered,
    },
    /// A flood limit on a packet id that no game handles.
    RateWithoutHandler {
        /// The packet id the limit names.
        id: u8,
        /// The `rate_limit` registration.
        at: Registered,
    },
    /// Two games each say how world changes go on the wire.
    DuplicateDeltas {
        /// The game that registered its encoding first.
        first: Registered,
        /// The game that registered one too.
        second: Registered,
    },
    /// Two games each bring the world a shard starts with.
    DuplicateWorldGenerator {
        /// The game that registered its generator first.
        first: Registered,
        /// The game that registered one too.
        second: Registered,
    },
}

/// One registration, as errors name it: its game, its name, its line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registered {
    /// The game that registered it (`Game::new`'s name; `"shard"` for the shard's own).
    pub game: &'static str,
    /// What was registered: a packet's or command's name, or the kind (`"rate limit"`,
    /// `"deltas"`, `"world generator"`).
    pub name: &'static str,
    /// The line that registered it; `None` for the shard's own commands.
    pub site: Option<Site>,
}

impl fmt::Display for Registered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "'{}' of {} (", self.name, self.game)?;
        match self.site {
            Some(site) => write!(f, "{site})"),
            None => f.write_str("built in)"),
        }
    }
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::DuplicatePacket { id, first, second } => write!(
                f,
                "packet 0x{id:02x} has two handlers: {first} and {second}; give one of them \
                 another id"
            ),
            BuildError::ReservedPacket { id, at } => write!(
                f,
                "packet 0x{id:02x} is the network's ping, answered before any game sees it: \
                 {at} cannot handle it"
            ),
            BuildError::DuplicateCommand {
                name,
                first,
                second,
            } => write!(
                f,
                "console command '{name}' is registered twice: {first} and {second}"
            ),
            BuildError::RateWithoutHandler { id, at } => write!(
                f,
                "a flood limit on packet 0x{id:02x} ({at}) but no game handles that packet"
            ),
            BuildError::DuplicateDeltas { first, second } => write!(
                f,
                "two games encode world changes: {first} and {second}; one game per shard \
                 says what moves and speech look like on the wire"
            ),
            BuildError::DuplicateWorldGenerator { first, second } => write!(
                f,
                "two games generate the starting world: {first} and {second}; one game per \
                 shard brings the world"
            ),
        }
    }
}

impl std::error::Error for BuildError {}

/// Every game of a shard, checked: what the shard wires in when it runs.
pub struct Games {
    pub(crate) games: Vec<Game>,
    /// How world changes go on the wire: the one game's that set them, or none.
    pub(crate) deltas: DeltaPackets,
    /// The world when there is no save: the one game's generator, or none (an empty world).
    pub(crate) generator: Option<Box<WorldGenerator>>,
}

impl Games {
    /// Checks `games` together, with the shard's own console commands `built_in`.
    pub fn check(games: Vec<Game>, built_in: &[&'static str]) -> Result<Games, BuildError> {
        let mut packets: Vec<(u8, Registered)> = Vec::new();
        let mut commands: Vec<(String, Registered)> = built_in
            .iter()
            .map(|&name| (name.to_ascii_lowercase(), builtin(name)))
            .collect();
        for game in &games {
            for p in &game.packets {
                let this = registered(game.name, p.name, p.site);
                if p.id == PING {
                    return Err(BuildError::ReservedPacket { id: p.id, at: this });
                }
                if let Some((_, first)) = packets.iter().find(|(id, _)| *id == p.id) {
                    return Err(BuildError::DuplicatePacket {
                        id: p.id,
                        first: first.clone(),
                        second: this,
                    });
                }
                packets.push((p.id, this));
            }
            for c in &game.commands {
                let key = c.name.to_ascii_lowercase();
                let this = registered(game.name, c.name, c.site);
                if let Some((_, first)) = commands.iter().find(|(name, _)| *name == key) {
                    return Err(BuildError::DuplicateCommand {
                        name: c.name,
                        first: first.clone(),
                        second: this,
                    });
                }
                commands.push((key, this));
            }
        }
        for game in &games {
            for &(id, _, site) in &game.rates {
                if !packets.iter().any(|(handled, _)| *handled == id) {
                    let at = registered(game.name, "rate limit", site);
                    return Err(BuildError::RateWithoutHandler { id, at });
                }
            }
        }
        let mut deltas: Option<(DeltaPackets, Registered)> = None;
        for game in &games {
            if let Some((packets, site)) = game.deltas {
                let this = registered(game.name, "deltas", site);
                if let Some((_, first)) = deltas {
                    return Err(BuildError::DuplicateDeltas {
                        first,
                        second: this,
                    });
                }
                deltas = Some((packets, this));
            }
        }
        let deltas = deltas.map(|(packets, _)| packets).unwrap_or_default();
        let mut games = games;
        let mut generator: Option<(Box<WorldGenerator>, Registered)> = None;
        for game in &mut games {
            if let Some((generate, site)) = game.generator.take() {
                let this = registered(game.name, "world generator", site);
                if let Some((_, first)) = generator {
                    return Err(BuildError::DuplicateWorldGenerator {
                        first,
                        second: this,
                    });
                }
                generator = Some((generate, this));
            }
        }
        Ok(Games {
            games,
            deltas,
            generator: generator.map(|(generate, _)| generate),
        })
    }
}

fn registered(game: &'static str, name: &'static str, site: Site) -> Registered {
    Registered {
        game,
        name,
        site: Some(site),
    }
}

fn builtin(name: &'static str) -> Registered {
    Registered {
        game: "shard",
        name,
        site: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(_: &mut Packet<'_>, _: &[u8]) -> Result<(), BadPacket> {
        Ok(())
    }

    #[test]
    fn two_handlers_for_one_id_name_both_lines() {
        let a = Game::new("a").packet(0x10, "emote", Access::LoggedIn, ok);
        let b = Game::new("b").packet(0x10, "wave", Access::LoggedIn, ok);
        let err = Games::check(vec![a, b], &[]).err().expect("refused");
        let text = err.to_string();
        assert!(text.starts_with("packet 0x10 has two handlers"), "{text}");
        assert!(
            text.contains("'emote' of a (src/game/registry.rs:"),
            "{text}"
        );
        assert!(
            text.contains("'wave' of b (src/game/registry.rs:"),
            "{text}"
        );
    }

    #[test]
    fn ping_commands_and_stray_limits_are_refused() {
        let ping = Game::new("p").packet(PING, "ping", Access::Always, ok);
        assert!(matches!(
            Games::check(vec![ping], &[]),
            Err(BuildError::ReservedPacket { id: PING, .. })
        ));
        let cmd = Game::new("c").command("Status", "", "mine", |_, _| Ok(String::new()));
        let err = Games::check(vec![cmd], &["status"]).err().expect("refused");
        assert!(
            err.to_string().contains("'status' of shard (built in)"),
            "{err}"
        );
        let rate = Rate {
            per_sec: 1,
            burst: 1,
        };
        let stray = Game::new("r").rate_limit(0x20, rate);
        assert!(matches!(
            Games::check(vec![stray], &[]),
            Err(BuildError::RateWithoutHandler { id: 0x20, .. })
        ));
    }

    #[test]
    fn two_world_generators_are_refused_naming_both_games() {
        let a = Game::new("square").world_generator(|| World::new(1));
        let b = Game::new("island").world_generator(|| World::new(2));
        let err = Games::check(vec![a, b], &[]).err().expect("refused");
        assert!(
            matches!(err, BuildError::DuplicateWorldGenerator { .. }),
            "{err}"
        );
        let text = err.to_string();
        assert!(
            text.contains("of square") && text.contains("of island"),
            "{text}"
        );
        let one = Games::check(
            vec![Game::new("square").world_generator(|| World::new(3))],
            &[],
        );
        let generate = one.expect("one generator builds").generator.expect("kept");
        assert_eq!(generate().seed(), 3);
    }

    #[test]
    fn distinct_registrations_pass() {
        let a = Game::new("a")
            .packet(0x10, "emote", Access::LoggedIn, ok)
            .rate_limit(
                0x10,
                Rate {
                    per_sec: 2,
                    burst: 4,
                },
            )
            .command("cry", "", "", |_, _| Ok(String::new()));
        let b = Game::new("b").packet(0x11, "wave", Access::LoggedIn, ok);
        assert!(Games::check(vec![a, b], &["help"]).is_ok());
    }
}
