//! [`Segments`]: a queue kept in segments of a fixed size, for a session's tail
//! ([`super::tail`]).
//!
//! Why not one `VecDeque`: a tail's length swings with a flood (a burst of uncommitted
//! events, then a few hundred), and a `VecDeque` doubles its room to follow a burst and keeps
//! it until shrunk, which moves every event held. At the x20 flood's heap peak twenty tails
//! held 2.6 MiB of `VecDeque` buffers (heaptrack); shrinking them sooner saved memory but
//! cost CPU in the moves and in refaulting the regrown buffers' pages (measured −1.3 MiB,
//! +0.2 µs per event). Here a segment is allocated when the last one is full and freed when
//! its last event goes: the room held is what the events need plus at most two segments
//! (1.6 MiB at the same peak), and no event is ever moved.

use std::collections::VecDeque;

/// Items per segment (48-byte events: 6 KiB).
pub(super) const SEGMENT: usize = 128;

/// A double-ended queue in segments of [`SEGMENT`] items. Every segment but the first and
/// the last is full (items are pushed at the back and popped at the front, or at the back
/// by a rewind), which makes finding the `i`th item arithmetic.
pub(super) struct Segments<T> {
    segments: VecDeque<VecDeque<T>>,
    len: usize,
}

impl<T> Default for Segments<T> {
    fn default() -> Self {
        Segments {
            segments: VecDeque::new(),
            len: 0,
        }
    }
}

impl<T> Segments<T> {
    pub fn len(&self) -> usize {
        self.len
    }

    /// The items the segments held have room for (what the queue costs).
    #[cfg(test)]
    pub fn room(&self) -> usize {
        self.segments.len() * SEGMENT
    }

    pub fn push_back(&mut self, item: T) {
        match self.segments.back_mut() {
            Some(last) if last.len() < SEGMENT => last.push_back(item),
            _ => {
                let mut segment = VecDeque::with_capacity(SEGMENT);
                segment.push_back(item);
                self.segments.push_back(segment);
            }
        }
        self.len += 1;
    }

    pub fn pop_front(&mut self) -> Option<T> {
        let first = self.segments.front_mut()?;
        let item = first.pop_front()?;
        if first.is_empty() {
            self.segments.pop_front();
        }
        self.len -= 1;
        Some(item)
    }

    pub fn pop_back(&mut self) -> Option<T> {
        let last = self.segments.back_mut()?;
        let item = last.pop_back()?;
        if last.is_empty() {
            self.segments.pop_back();
        }
        self.len -= 1;
        Some(item)
    }

    pub fn front(&self) -> Option<&T> {
        self.segments.front().and_then(VecDeque::front)
    }

    pub fn back(&self) -> Option<&T> {
        self.segments.back().and_then(VecDeque::back)
    }

    pub fn clear(&mut self) {
        self.segments.clear();
        self.len = 0;
    }

    /// The segment and the place in it of the `index`th item (`index < len`).
    fn locate(&self, index: usize) -> (usize, usize) {
        let first = self.segments.front().map_or(0, VecDeque::len);
        if index < first {
            (0, index)
        } else {
            let rest = index - first;
            (1 + rest / SEGMENT, rest % SEGMENT)
        }
    }

    /// The items `start..end` in order (`end` at most `len`).
    pub fn range(&self, start: usize, end: usize) -> impl Iterator<Item = &T> {
        let count = end.saturating_sub(start);
        let (segment, at) = if count == 0 {
            (self.segments.len(), 0)
        } else {
            self.locate(start)
        };
        self.segments
            .range(segment..)
            .enumerate()
            .flat_map(move |(k, s)| s.range(if k == 0 { at } else { 0 }..))
            .take(count)
    }

    /// The items `start..end` in order, to change (`end` at most `len`).
    pub fn range_mut(&mut self, start: usize, end: usize) -> impl Iterator<Item = &mut T> {
        let count = end.saturating_sub(start);
        let (segment, at) = if count == 0 {
            (self.segments.len(), 0)
        } else {
            self.locate(start)
        };
        self.segments
            .range_mut(segment..)
            .enumerate()
            .flat_map(move |(k, s)| s.range_mut(if k == 0 { at } else { 0 }..))
            .take(count)
    }

    /// Every item in order.
    #[cfg(test)]
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.range(0, self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The queue against a `VecDeque` doing the same, through bursts and drains.
    #[test]
    fn it_holds_what_a_deque_holds_in_the_room_its_items_need() {
        let mut queue = Segments::default();
        let mut model = VecDeque::new();
        let mut next = 0u64;
        let mut most_room_over = 0;
        // Pushes and pops in uneven runs; a pop at the back now and then (a rewind).
        for round in 0..200usize {
            for _ in 0..(round * 37) % 700 {
                queue.push_back(next);
                model.push_back(next);
                next += 1;
            }
            for _ in 0..(round * 53) % 650 {
                assert_eq!(queue.pop_front(), model.pop_front());
            }
            if round % 7 == 0 {
                for _ in 0..round % 130 {
                    assert_eq!(queue.pop_back(), model.pop_back());
                }
            }
            assert_eq!(queue.len(), model.len());
            assert_eq!(queue.front(), model.front());
            assert_eq!(queue.back(), model.back());
            let len = model.len();
            for (start, end) in [(0, len), (len / 3, len), (len / 2, len / 2 + 5), (len, len)] {
                let end = end.min(len);
                let got: Vec<u64> = queue.range(start, end).copied().collect();
                let want: Vec<u64> = model.range(start..end).copied().collect();
                assert_eq!(got, want, "round {round}: items {start}..{end} of {len}");
            }
            most_room_over = most_room_over.max(queue.room() - len);
        }
        assert!(
            most_room_over <= 2 * SEGMENT,
            "room over what was held: {most_room_over}"
        );
        // Changing a range changes those items and no others.
        let len = queue.len();
        for item in queue.range_mut(len / 4, len / 2) {
            *item = u64::MAX;
        }
        let changed: Vec<usize> = queue
            .iter()
            .enumerate()
            .filter(|(_, item)| **item == u64::MAX)
            .map(|(i, _)| i)
            .collect();
        assert_eq!(changed, (len / 4..len / 2).collect::<Vec<_>>());
        // Emptied, it holds no segment.
        while queue.pop_front().is_some() {}
        assert_eq!((queue.len(), queue.room()), (0, 0));
        queue.push_back(1);
        queue.clear();
        assert_eq!((queue.len(), queue.room(), queue.front()), (0, 0, None));
    }
}
