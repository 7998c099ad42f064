//! Exponential backoff with jitter, so a fleet of agents that lost the hub together does not
//! come back in lockstep.

use std::time::Duration;

use rand::Rng;

/// Doubling delays between `initial` and `max`, each drawn uniformly from `[d/2, d]`.
#[derive(Debug, Clone)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    current: Duration,
}

impl Backoff {
    /// A backoff starting at `initial`, never above `max`.
    pub fn new(initial: Duration, max: Duration) -> Self {
        let initial = initial.min(max);
        Backoff {
            initial,
            max,
            current: initial,
        }
    }

    /// The next delay; doubles the following one.
    pub fn next_delay(&mut self) -> Duration {
        let ceiling = self.current;
        self.current = (self.current * 2).min(self.max);
        let half = ceiling / 2;
        let jitter = rand::rng().random_range(0..=half.as_millis().max(1) as u64);
        half + Duration::from_millis(jitter).min(ceiling - half)
    }

    /// Back to `initial`, after a success.
    pub fn reset(&mut self) {
        self.current = self.initial;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_up_to_the_ceiling_and_stay_within_jitter_bounds() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(1000));
        for ceiling in [100u64, 200, 400, 800, 1000, 1000] {
            let d = b.next_delay();
            assert!(
                d >= Duration::from_millis(ceiling / 2) && d <= Duration::from_millis(ceiling),
                "expected a delay in [{}ms, {ceiling}ms], saw {d:?}",
                ceiling / 2
            );
        }
        b.reset();
        assert!(
            b.next_delay() <= Duration::from_millis(100),
            "reset goes back to the start"
        );
    }
}
