//! The kept-alive leases, in one vector.
//!
//! A lease's id names its slot (the low 32 bits) and the slot's
//! generation (the high 32), so an id outlives its lease harmlessly: a
//! slot taken again answers only to its new id. Lanes apply a batch's
//! answers in slot order, which walks this vector forwards: with 100,000
//! leases the table is far larger than the processor's caches, and
//! leases visited in hash order cost a cache miss each.

use super::Entry;

/// Leases by id; see the module docs.
#[derive(Default)]
pub(super) struct Slab {
    slots: Vec<Slot>,
    /// Slots free to take again.
    free: Vec<u32>,
    len: usize,
}

struct Slot {
    generation: u32,
    entry: Option<Entry>,
}

/// Where lease `id` lives.
pub(super) fn slot_of(id: u64) -> usize {
    (id & u64::from(u32::MAX)) as usize
}

impl Slab {
    /// Stores `entry`; returns its id.
    pub(super) fn insert(&mut self, entry: Entry) -> u64 {
        self.len += 1;
        let index = match self.free.pop() {
            Some(index) => index,
            None => {
                let index = u32::try_from(self.slots.len()).expect("fewer than 2^32 leases");
                self.slots.push(Slot {
                    generation: 0,
                    entry: None,
                });
                index
            }
        };
        let slot = &mut self.slots[index as usize];
        slot.entry = Some(entry);
        u64::from(slot.generation) << 32 | u64::from(index)
    }

    fn slot(&self, id: u64) -> Option<&Slot> {
        self.slots
            .get(slot_of(id))
            .filter(|s| u64::from(s.generation) == id >> 32)
    }

    pub(super) fn get(&self, id: &u64) -> Option<&Entry> {
        self.slot(*id)?.entry.as_ref()
    }

    pub(super) fn get_mut(&mut self, id: &u64) -> Option<&mut Entry> {
        self.slots
            .get_mut(slot_of(*id))
            .filter(|s| u64::from(s.generation) == *id >> 32)?
            .entry
            .as_mut()
    }

    pub(super) fn remove(&mut self, id: &u64) -> Option<Entry> {
        let index = slot_of(*id);
        let slot = self
            .slots
            .get_mut(index)
            .filter(|s| u64::from(s.generation) == *id >> 32)?;
        let entry = slot.entry.take()?;
        slot.generation = slot.generation.wrapping_add(1);
        self.free.push(index as u32);
        self.len -= 1;
        Some(entry)
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn clear(&mut self) {
        for (index, slot) in self.slots.iter_mut().enumerate() {
            if slot.entry.take().is_some() {
                slot.generation = slot.generation.wrapping_add(1);
                self.free.push(index as u32);
            }
        }
        self.len = 0;
    }
}
