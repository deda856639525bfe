//! Player presence: which sectors are active, and telling the game logic which mobiles woke
//! up or fell asleep as sectors activate, deactivate, or mobiles move between them.
//!
//! Owns the activation side of `World`. Must never start behaviour itself: it only calls the
//! activity hook the game logic installed.

use super::entity::Mobile;
use super::location::Location;
use super::model::{Activity, World};
use super::sector::{ACTIVE_RANGE, SectorId};
use super::serial::Serial;

impl World {
    /// A player arrived at `at`: the sectors within [`ACTIVE_RANGE`] of its sector count one
    /// more player; mobiles in sectors that became active wake up. Call once per player
    /// position (and [`deactivate_around`](Self::deactivate_around) with the same location
    /// when it leaves). Does nothing off the maps.
    pub fn activate_around(&mut self, at: Location) {
        let Some(center) = SectorId::of(&at) else {
            return;
        };
        for sector in center.around(ACTIVE_RANGE) {
            if self.sectors.enter(sector) {
                self.notify_sector(sector, Activity::Woke);
            }
        }
    }

    /// A player left `at`: undoes one [`activate_around`](Self::activate_around); mobiles in
    /// sectors that no player is near any more fall asleep.
    pub fn deactivate_around(&mut self, at: Location) {
        let Some(center) = SectorId::of(&at) else {
            return;
        };
        for sector in center.around(ACTIVE_RANGE) {
            if self.sectors.leave(sector) {
                self.notify_sector(sector, Activity::Slept);
            }
        }
    }

    /// `at` is in an active sector.
    pub fn is_active(&self, at: &Location) -> bool {
        SectorId::of(at).is_some_and(|s| self.sectors.is_active(s))
    }

    /// How many sectors are active.
    pub fn active_sectors(&self) -> usize {
        self.sectors.active_count()
    }

    /// The mobiles in active sectors, sorted by serial.
    pub fn active_mobiles(&self) -> Vec<Serial> {
        let mut serials: Vec<Serial> = self
            .sectors
            .active()
            .flat_map(|sector| self.sectors.mobiles(sector).iter().copied())
            .collect();
        serials.sort_unstable();
        serials
    }

    /// Installs the hook told about every mobile waking or falling asleep (replacing any).
    pub fn set_activity_hook(&mut self, hook: impl FnMut(Activity, &Mobile) + 'static) {
        self.hook = Some(Box::new(hook));
    }

    /// Removes the activity hook.
    pub fn clear_activity_hook(&mut self) {
        self.hook = None;
    }

    /// Moves a mobile's sector membership from `from` to `to` (its `location` field already
    /// says where it is) and tells the hook if that woke it up or put it to sleep.
    pub(super) fn relocate_mobile(&mut self, serial: Serial, from: &Location, to: &Location) {
        let (old, new) = (SectorId::of(from), SectorId::of(to));
        if old == new {
            return;
        }
        let was_active = old.is_some_and(|s| self.sectors.is_active(s));
        if let Some(sector) = old {
            self.sectors.remove_mobile(sector, serial);
        }
        if let Some(sector) = new {
            self.sectors.add_mobile(sector, serial);
        }
        let is_active = new.is_some_and(|s| self.sectors.is_active(s));
        if was_active != is_active {
            let activity = if is_active {
                Activity::Woke
            } else {
                Activity::Slept
            };
            self.notify(serial, activity);
        }
    }

    fn notify(&mut self, serial: Serial, activity: Activity) {
        if let (Some(hook), Some(mobile)) = (self.hook.as_mut(), self.mobiles.get(&serial)) {
            hook(activity, mobile);
        }
    }

    fn notify_sector(&mut self, sector: SectorId, activity: Activity) {
        let Some(hook) = self.hook.as_mut() else {
            return;
        };
        for serial in self.sectors.mobiles(sector) {
            if let Some(mobile) = self.mobiles.get(serial) {
                hook(activity, mobile);
            }
        }
    }
}
