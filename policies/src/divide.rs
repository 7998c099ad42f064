//! Dividing replicas among clusters: even water-filling, Webster/Sainte-Laguë, proportional
//! removal. Plain arithmetic over slices; callers pass entries already in tie-break order, so an
//! earlier entry wins every tie.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// A cluster's place in a division: replicas it holds and how many more it can take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slot {
    /// Replicas already there.
    pub(crate) base: u64,
    /// How many more fit.
    pub(crate) room: u64,
}

/// Gives up to `total` replicas so that the resulting levels (`base + given`) are as even as the
/// rooms allow: the lowest levels rise first. Returns what each slot gets; the sum is
/// `min(total, sum of rooms)`.
pub(crate) fn water_fill(slots: &[Slot], total: u64) -> Vec<u64> {
    let given_at = |level: u64| -> u64 {
        slots
            .iter()
            .map(|s| level.saturating_sub(s.base).min(s.room))
            .fold(0u64, u64::saturating_add)
    };
    let Some(low) = slots.iter().map(|s| s.base).min() else {
        return Vec::new();
    };
    let high = slots
        .iter()
        .map(|s| s.base.saturating_add(s.room))
        .max()
        .unwrap_or(low);
    if given_at(high) <= total {
        return slots.iter().map(|s| s.room).collect();
    }
    // The highest level whose fill does not exceed `total`: given_at(low) = 0 <= total < given_at(high).
    let (mut lo, mut hi) = (low, high);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if given_at(mid) <= total {
            lo = mid
        } else {
            hi = mid
        }
    }
    let level = lo;
    let mut left = total - given_at(level);
    slots
        .iter()
        .map(|s| {
            let mut given = level.saturating_sub(s.base).min(s.room);
            // The remainder goes one each to slots that would rise at the next level, earliest first.
            if left > 0 && s.base <= level && given < s.room {
                given += 1;
                left -= 1;
            }
            given
        })
        .collect()
}

/// A weighted seat claim in a highest-averages division.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Claim {
    weight: u64,
    seats: u64,
    index: usize,
}

impl Ord for Claim {
    /// Webster's priority weight / (2 * seats + 1), compared exactly by cross-multiplication;
    /// on a tie the earlier index is greater, so it pops first.
    fn cmp(&self, other: &Self) -> Ordering {
        let mine = u128::from(self.weight) * (2 * u128::from(other.seats) + 1);
        let theirs = u128::from(other.weight) * (2 * u128::from(self.seats) + 1);
        mine.cmp(&theirs).then_with(|| other.index.cmp(&self.index))
    }
}

impl PartialOrd for Claim {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Webster/Sainte-Laguë: gives up to `total` more replicas one at a time to the slot with the
/// highest weight / (2 * replicas + 1), counting replicas already there, skipping full slots and
/// zero weights. Returns what each slot gets.
pub(crate) fn webster(slots: &[Slot], weights: &[u64], total: u64) -> Vec<u64> {
    let mut given = vec![0u64; slots.len()];
    let mut heap: BinaryHeap<Claim> = slots
        .iter()
        .zip(weights)
        .enumerate()
        .filter(|(_, (s, w))| **w > 0 && s.room > 0)
        .map(|(index, (s, w))| Claim {
            weight: *w,
            seats: s.base,
            index,
        })
        .collect();
    let mut left = total;
    while left > 0 {
        let Some(mut claim) = heap.pop() else { break };
        given[claim.index] += 1;
        left -= 1;
        claim.seats += 1;
        if given[claim.index] < slots[claim.index].room {
            heap.push(claim);
        }
    }
    given
}

/// A removal claim: the slot whose (2 * replicas - 1) / weight is highest loses the next replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Surplus {
    weight: u64,
    seats: u64,
    index: usize,
}

impl Ord for Surplus {
    fn cmp(&self, other: &Self) -> Ordering {
        let by_priority = match (self.weight, other.weight) {
            // No weight means no claim to any replica: those go first, the larger first.
            (0, 0) => self.seats.cmp(&other.seats),
            (0, _) => Ordering::Greater,
            (_, 0) => Ordering::Less,
            (w, v) => {
                let mine = (2 * u128::from(self.seats) - 1) * u128::from(v);
                let theirs = (2 * u128::from(other.seats) - 1) * u128::from(w);
                mine.cmp(&theirs)
            }
        };
        by_priority.then_with(|| other.index.cmp(&self.index))
    }
}

impl PartialOrd for Surplus {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Removes up to `total` replicas from `seats` so that what is left stays proportional to
/// `weights` (Webster's method run backwards). Returns what each slot loses; never more than it
/// has.
pub(crate) fn remove_proportional(seats: &[u64], weights: &[u64], total: u64) -> Vec<u64> {
    let held: u64 = seats.iter().sum();
    if total >= held {
        return seats.to_vec();
    }
    let mut removed = vec![0u64; seats.len()];
    let mut heap: BinaryHeap<Surplus> = seats
        .iter()
        .zip(weights)
        .enumerate()
        .filter(|(_, (s, _))| **s > 0)
        .map(|(index, (s, w))| Surplus {
            weight: *w,
            seats: *s,
            index,
        })
        .collect();
    for _ in 0..total {
        let Some(mut surplus) = heap.pop() else { break };
        removed[surplus.index] += 1;
        surplus.seats -= 1;
        if surplus.seats > 0 {
            heap.push(surplus);
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slots(spec: &[(u64, u64)]) -> Vec<Slot> {
        spec.iter().map(|&(base, room)| Slot { base, room }).collect()
    }

    #[test]
    fn water_fill_raises_the_lowest_first_and_gives_the_remainder_in_order() {
        let got = water_fill(&slots(&[(0, 10), (2, 10), (0, 10)]), 5);
        assert_eq!(
            got,
            vec![3, 0, 2],
            "expected levels 2,2,2 and the last one to the first slot: {got:?}"
        );
    }

    #[test]
    fn water_fill_respects_room_and_returns_no_more_than_fits() {
        let got = water_fill(&slots(&[(0, 1), (0, 2)]), 10);
        assert_eq!(got, vec![1, 2], "expected every room used: {got:?}");
    }

    #[test]
    fn water_fill_of_nothing_gives_nothing() {
        assert_eq!(water_fill(&slots(&[(3, 4), (0, 4)]), 0), vec![0, 0]);
        assert!(water_fill(&[], 5).is_empty());
    }

    #[test]
    fn webster_divides_exact_quotas_exactly() {
        let got = webster(&slots(&[(0, 100), (0, 100), (0, 100)]), &[3, 2, 1], 12);
        assert_eq!(got, vec![6, 4, 2], "expected 12 in 3:2:1, seen {got:?}");
    }

    #[test]
    fn webster_breaks_ties_by_order() {
        let got = webster(&slots(&[(0, 100), (0, 100), (0, 100)]), &[1, 1, 1], 4);
        assert_eq!(
            got,
            vec![2, 1, 1],
            "expected the first to win the tie, seen {got:?}"
        );
    }

    #[test]
    fn webster_differs_from_dhondt_on_small_parties() {
        // Votes 53:24:23 for 7 seats: D'Hondt gives 4:2:1, Sainte-Laguë 3:2:2.
        let got = webster(&slots(&[(0, 100), (0, 100), (0, 100)]), &[53, 24, 23], 7);
        assert_eq!(got, vec![3, 2, 2], "expected Sainte-Laguë 3:2:2, seen {got:?}");
    }

    #[test]
    fn webster_passes_a_full_slot_on_to_the_others() {
        let got = webster(&slots(&[(0, 1), (0, 100)]), &[9, 1], 5);
        assert_eq!(
            got,
            vec![1, 4],
            "expected the capped slot to take 1, seen {got:?}"
        );
    }

    #[test]
    fn remove_proportional_keeps_the_ratio() {
        let got = remove_proportional(&[6, 3], &[6, 3], 3);
        assert_eq!(got, vec![2, 1], "expected 6:3 -> 4:2, seen {got:?}");
    }

    #[test]
    fn remove_proportional_empties_unweighted_slots_first() {
        let got = remove_proportional(&[2, 4, 4], &[0, 1, 1], 3);
        assert_eq!(
            got,
            vec![2, 1, 0],
            "expected the weightless slot emptied first, seen {got:?}"
        );
    }
}
