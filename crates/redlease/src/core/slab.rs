//! A table of values by id, in chunks of slots: the Locker's record of held
//! leases and the renewer's kept-alive ones.
//!
//! An id names its slot (the low 32 bits) and the slot's generation (the
//! high 32, never 0, so no id is 0), so an id outlives its value
//! harmlessly: a slot taken again answers only to its new id. Walking ids
//! in slot order walks the table forwards: with 100,000 leases the table
//! is far larger than the processor's caches, and values visited in hash
//! order cost a cache miss each.
//!
//! Slots come in chunks of [`CHUNK`], allocated as needed and never moved:
//! a table that grows wastes at most one chunk, where a vector that
//! doubles keeps up to as many empty slots as full ones, and a hash map
//! keeps an eighth of its buckets empty at best.

use std::num::NonZeroU64;

/// Slots per chunk.
const CHUNK: usize = 128;

/// Values by id; see the module docs.
pub(crate) struct Slab<T> {
    chunks: Vec<Box<[Slot<T>]>>,
    /// Slots used so far (free or not): the next new slot's index.
    used: usize,
    /// Slots free to take again.
    free: Vec<u32>,
    len: usize,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab {
            chunks: Vec::new(),
            used: 0,
            free: Vec::new(),
            len: 0,
        }
    }
}

struct Slot<T> {
    generation: u32,
    value: Option<T>,
}

/// Where the value of `id` lives.
pub(crate) fn slot_of(id: u64) -> usize {
    (id & u64::from(u32::MAX)) as usize
}

/// The generation after `g`, skipping 0.
fn next(g: u32) -> u32 {
    g.checked_add(1).unwrap_or(1)
}

impl<T> Slab<T> {
    /// Stores `value`; returns its id.
    pub(crate) fn insert(&mut self, value: T) -> NonZeroU64 {
        let index = match self.free.pop() {
            Some(index) => index as usize,
            None => {
                if self.used == self.chunks.len() * CHUNK {
                    let chunk = (0..CHUNK).map(|_| Slot {
                        generation: 1,
                        value: None,
                    });
                    self.chunks.push(chunk.collect());
                }
                self.used += 1;
                self.used - 1
            }
        };
        let index32 = u32::try_from(index).expect("fewer than 2^32 values");
        self.len += 1;
        let slot = &mut self.chunks[index / CHUNK][index % CHUNK];
        slot.value = Some(value);
        NonZeroU64::new(u64::from(slot.generation) << 32 | u64::from(index32))
            .expect("a generation is never 0")
    }

    /// The slot of `id`, if it still holds that id's value.
    fn slot_mut(&mut self, id: u64) -> Option<&mut Slot<T>> {
        let index = slot_of(id);
        self.chunks
            .get_mut(index / CHUNK)
            .map(|chunk| &mut chunk[index % CHUNK])
            .filter(|s| u64::from(s.generation) == id >> 32)
    }

    pub(crate) fn get(&self, id: &u64) -> Option<&T> {
        let index = slot_of(*id);
        let slot = &self.chunks.get(index / CHUNK)?[index % CHUNK];
        match u64::from(slot.generation) == *id >> 32 {
            true => slot.value.as_ref(),
            false => None,
        }
    }

    pub(crate) fn get_mut(&mut self, id: &u64) -> Option<&mut T> {
        self.slot_mut(*id)?.value.as_mut()
    }

    pub(crate) fn remove(&mut self, id: &u64) -> Option<T> {
        let slot = self.slot_mut(*id)?;
        let value = slot.value.take()?;
        slot.generation = next(slot.generation);
        self.free.push(slot_of(*id) as u32);
        self.len -= 1;
        Some(value)
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Every value, in slot order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        let slots = self.chunks.iter().flat_map(|chunk| chunk.iter());
        slots.filter_map(|slot| slot.value.as_ref())
    }

    /// Takes every value out, in slot order.
    pub(crate) fn drain(&mut self) -> Vec<T> {
        let mut values = Vec::with_capacity(self.len);
        let slots = self.chunks.iter_mut().flat_map(|chunk| chunk.iter_mut());
        for (index, slot) in slots.enumerate() {
            if let Some(value) = slot.value.take() {
                slot.generation = next(slot.generation);
                self.free.push(index as u32);
                values.push(value);
            }
        }
        self.len = 0;
        values
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_outlives_its_value_harmlessly() {
        let mut slab = Slab::default();
        let (a, b) = (slab.insert('a').get(), slab.insert('b').get());
        assert_eq!((slot_of(a), slot_of(b)), (0, 1));
        assert_eq!(slab.remove(&a), Some('a'));
        assert_eq!(slab.remove(&a), None);
        let again = slab.insert('c').get();
        assert_eq!(slot_of(again), 0, "the free slot is taken again");
        assert_ne!(again, a);
        assert_eq!(slab.get(&a), None, "the old id names nothing");
        assert_eq!(slab.get(&again), Some(&'c'));
        assert_eq!(slab.len(), 2);
        assert_eq!(slab.drain(), ['c', 'b']);
        assert_eq!((slab.len(), slab.get(&b)), (0, None));
    }

    #[test]
    fn generations_skip_0() {
        assert_eq!(next(u32::MAX), 1);
        assert_eq!(next(1), 2);
    }

    #[test]
    fn chunks_are_added_as_needed() {
        let mut slab = Slab::default();
        let ids: Vec<u64> = (0..CHUNK + 1).map(|n| slab.insert(n).get()).collect();
        assert_eq!(slab.chunks.len(), 2);
        assert!(ids
            .iter()
            .enumerate()
            .all(|(n, id)| slab.get(id) == Some(&n)));
    }
}
