//! Timers: the wheel (a pure data structure) and, on top of it, the game-facing timer API.

pub mod wheel;
