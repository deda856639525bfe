//! Where things are: map ids, their sizes, and `Location` (x, y, z, map).
//!
//! Plain data. Must never know about sectors, entities or how locations are encoded on disk
//! or on the wire.

/// One of the facets of the world. `INTERNAL` holds what is nowhere (logged-out characters,
/// items inside containers): it has no size and no sectors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MapId(pub u8);

impl MapId {
    /// Map 0, 6144×4096 tiles.
    pub const FELUCCA: MapId = MapId(0);
    /// Map 1, 6144×4096 tiles (Felucca's twin).
    pub const TRAMMEL: MapId = MapId(1);
    /// Map 2, 2304×1600 tiles.
    pub const ILSHENAR: MapId = MapId(2);
    /// Map 3, 2560×2048 tiles.
    pub const MALAS: MapId = MapId(3);
    /// Map 4, 1448×1448 tiles.
    pub const TOKUNO: MapId = MapId(4);
    /// Map 5, 1280×4096 tiles.
    pub const TER_MUR: MapId = MapId(5);
    /// Nowhere: no size, no sectors (logged-out characters, items in containers).
    pub const INTERNAL: MapId = MapId(0x7F);

    /// Width and height in tiles; `None` for `INTERNAL` and unknown maps.
    pub fn size(self) -> Option<(u16, u16)> {
        match self.0 {
            0 | 1 => Some((6144, 4096)),
            2 => Some((2304, 1600)),
            3 => Some((2560, 2048)),
            4 => Some((1448, 1448)),
            5 => Some((1280, 4096)),
            _ => None,
        }
    }
}

impl Default for MapId {
    fn default() -> Self {
        MapId::INTERNAL
    }
}

/// A tile position and altitude on a map. For an item inside a container, `x`/`y` are its
/// place in the container's window and `map` is `INTERNAL`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Location {
    /// Tiles from the map's west edge (or across a container's window).
    pub x: u16,
    /// Tiles from the map's north edge (or down a container's window).
    pub y: u16,
    /// Altitude, in the client's z units; may be negative (caves, water).
    pub z: i8,
    /// The map it is on; [`MapId::INTERNAL`] for nowhere and inside containers.
    pub map: MapId,
}

impl Location {
    /// Nowhere: (0, 0, 0) on the internal map.
    pub const INTERNAL: Location = Location {
        x: 0,
        y: 0,
        z: 0,
        map: MapId::INTERNAL,
    };

    /// (`x`, `y`) at altitude `z` on `map`; not checked against the map's size
    /// ([`is_on_map`](Self::is_on_map) says).
    #[must_use]
    pub const fn new(x: u16, y: u16, z: i8, map: MapId) -> Location {
        Location { x, y, z, map }
    }

    /// On a map that has a size, inside its bounds.
    pub fn is_on_map(&self) -> bool {
        self.map
            .size()
            .is_some_and(|(w, h)| self.x < w && self.y < h)
    }

    /// Tiles between two locations on the same map (the larger of |dx| and |dy|, as the game
    /// measures range); `None` across maps.
    pub fn distance(&self, other: &Location) -> Option<u16> {
        (self.map == other.map).then(|| self.x.abs_diff(other.x).max(self.y.abs_diff(other.y)))
    }

    /// This location moved by (dx, dy), clamped to the map's bounds.
    pub fn offset_clamped(&self, dx: i32, dy: i32) -> Location {
        let (w, h) = self.map.size().unwrap_or((u16::MAX, u16::MAX));
        let clamp =
            |v: u16, d: i32, size: u16| (i32::from(v) + d).clamp(0, i32::from(size) - 1) as u16;
        Location {
            x: clamp(self.x, dx, w),
            y: clamp(self.y, dy, h),
            ..*self
        }
    }
}
