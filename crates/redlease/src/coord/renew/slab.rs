//! The kept-alive leases, in chunks of slots.
//!
//! A lease's id names its slot (the low 32 bits) and the slot's
//! generation (the high 32, never 0, so no id is 0), so an id outlives
//! its lease harmlessly: a slot taken again answers only to its new id. Lanes apply a batch's
//! answers in slot order, which walks the slots forwards: with 100,000
//! leases the table is far larger than the processor's caches, and leases
//! visited in hash order cost a cache miss each.
//!
//! Slots come in chunks of [`CHUNK`], allocated as needed and never moved:
//! a table that grows wastes at most one chunk, where a vector that
//! doubles keeps up to as many empty slots as full ones.

use super::Entry;

/// Slots per chunk.
const CHUNK: usize = 128;

/// Leases by id; see the module docs.
#[derive(Default)]
pub(super) struct Slab {
    chunks: Vec<Box<[Slot]>>,
    /// Slots used so far (free or not): the next new slot's index.
    used: usize,
    /// Slots free to take again.
    free: Vec<u32>,
    len: usize,
}

struct Slot {
    generation: u32,
    entry: Option<Entry>,
}

/// The generation after `g`, skipping 0.
fn next(g: u32) -> u32 {
    g.checked_add(1).unwrap_or(1)
}

/// Where lease `id` lives.
pub(super) fn slot_of(id: u64) -> usize {
    (id & u64::from(u32::MAX)) as usize
}

impl Slab {
    /// Stores `entry`; returns its id.
    pub(super) fn insert(&mut self, entry: Entry) -> u64 {
        let index = match self.free.pop() {
            Some(index) => index as usize,
            None => {
                if self.used == self.chunks.len() * CHUNK {
                    let chunk = (0..CHUNK).map(|_| Slot {
                        generation: 1,
                        entry: None,
                    });
                    self.chunks.push(chunk.collect());
                }
                self.used += 1;
                self.used - 1
            }
        };
        let index32 = u32::try_from(index).expect("fewer than 2^32 leases");
        self.len += 1;
        let slot = &mut self.chunks[index / CHUNK][index % CHUNK];
        slot.entry = Some(entry);
        u64::from(slot.generation) << 32 | u64::from(index32)
    }

    /// Lease `id`'s slot, if it is still that lease's.
    fn slot_mut(&mut self, id: u64) -> Option<&mut Slot> {
        let index = slot_of(id);
        self.chunks
            .get_mut(index / CHUNK)
            .map(|chunk| &mut chunk[index % CHUNK])
            .filter(|s| u64::from(s.generation) == id >> 32)
    }

    pub(super) fn get(&self, id: &u64) -> Option<&Entry> {
        let index = slot_of(*id);
        let slot = &self.chunks.get(index / CHUNK)?[index % CHUNK];
        match u64::from(slot.generation) == *id >> 32 {
            true => slot.entry.as_ref(),
            false => None,
        }
    }

    pub(super) fn get_mut(&mut self, id: &u64) -> Option<&mut Entry> {
        self.slot_mut(*id)?.entry.as_mut()
    }

    pub(super) fn remove(&mut self, id: &u64) -> Option<Entry> {
        let slot = self.slot_mut(*id)?;
        let entry = slot.entry.take()?;
        slot.generation = next(slot.generation);
        self.free.push(slot_of(*id) as u32);
        self.len -= 1;
        Some(entry)
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn clear(&mut self) {
        let slots = self.chunks.iter_mut().flat_map(|chunk| chunk.iter_mut());
        for (index, slot) in slots.enumerate() {
            if slot.entry.take().is_some() {
                slot.generation = next(slot.generation);
                self.free.push(index as u32);
            }
        }
        self.len = 0;
    }
}
