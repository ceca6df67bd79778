//! When a failed delivery is tried again: exponential backoff with jitter, up to a horizon
//! after which the delivery is given up (`failed`, listed by `GET /v1/webhooks/deliveries`).

use std::time::Duration;

/// The longest pause between two attempts.
pub const MAX_INTERVAL: Duration = Duration::from_secs(3600);

/// The retry schedule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// The pause after the first failed attempt; it doubles after each further one.
    pub base: Duration,
    /// How long after the event a delivery is still tried.
    pub horizon: Duration,
}

impl Backoff {
    /// When to try again after `failures` failed attempts (1 after the first), in epoch ms;
    /// `None` once that would be past the horizon of a delivery created at `created_at`.
    /// `jitter` in [0, 1) takes up to half the pause off, so receivers that come back are
    /// not hit by every delayed delivery at once.
    pub fn next_attempt(
        &self,
        failures: u32,
        created_at: u64,
        now: u64,
        jitter: f64,
    ) -> Option<u64> {
        let doublings = failures.saturating_sub(1).min(30);
        let pause = self
            .base
            .saturating_mul(1u32 << doublings)
            .min(MAX_INTERVAL)
            .mul_f64(1.0 - jitter.clamp(0.0, 1.0) / 2.0);
        let at = now.saturating_add(pause.as_millis() as u64);
        let deadline = created_at.saturating_add(self.horizon.as_millis() as u64);
        (at <= deadline).then_some(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_up_to_an_hour_and_stop_at_the_horizon() {
        let b = Backoff {
            base: Duration::from_secs(5),
            horizon: Duration::from_secs(86_400),
        };
        let pauses: Vec<u64> = (1..=12)
            .map(|n| b.next_attempt(n, 0, 0, 0.0).unwrap())
            .collect();
        assert_eq!(
            pauses,
            [
                5_000, 10_000, 20_000, 40_000, 80_000, 160_000, 320_000, 640_000, 1_280_000,
                2_560_000, 3_600_000, 3_600_000
            ]
        );
        // Full jitter takes half off.
        assert_eq!(b.next_attempt(1, 0, 0, 0.999_999), Some(2_500));
        // An attempt due after the horizon is not made.
        let day = 86_400_000;
        assert_eq!(b.next_attempt(20, 0, day - 1_000, 0.0), None);
        assert_eq!(b.next_attempt(20, 0, day - 3_600_000, 0.0), Some(day));
    }
}
