//! Cost accounting: what the session has spent, and what its running turn has spent so far.
//!
//! A run reports its cost twice over: `cost` events as it goes (the running total so far, for
//! budgets and live displays) and `finish` with the run's total. The session's total counts a
//! turn once, when it is settled: at `finish` with the run's total, or, when the run stops
//! before its `finish`, with the last running total its `cost` events gave.

use crate::universal::Cost;

/// A cost an agent may report: finite and not negative (a negative one would refill a budget).
pub(super) fn is_valid(credits: f64) -> bool {
    credits.is_finite() && credits >= 0.0
}

/// The session's spending (`docs/universal-events.md`, `turn.ended.metadata.cost`).
#[derive(Debug, Default)]
pub(super) struct Spending {
    /// Every settled turn's cost, summed.
    session: Cost,
    /// The current turn's highest running total from its `cost` events (credits); reset when a
    /// turn opens.
    turn_so_far: f64,
}

impl Spending {
    /// The spending of a session restored from its log: its total carries over.
    pub(super) fn restored(session: Cost) -> Self {
        Spending {
            session,
            turn_so_far: 0.0,
        }
    }

    /// The session's total over its settled turns.
    pub(super) fn session(&self) -> Cost {
        self.session
    }

    /// A new turn starts with nothing spent.
    pub(super) fn turn_opened(&mut self) {
        self.turn_so_far = 0.0;
    }

    /// A `cost` event: the run's running total, kept if it is finite and larger than the last.
    pub(super) fn progress(&mut self, total_cost: f64) {
        if total_cost.is_finite() && total_cost > self.turn_so_far {
            self.turn_so_far = total_cost;
        }
    }

    /// The run's `finish` with its total (none said counts as 0): the turn's cost, now part of
    /// the session's.
    pub(super) fn finished(&mut self, total_cost: Option<f64>) -> Cost {
        let cost = Cost::from_credits(total_cost.unwrap_or(0.0));
        self.session = self.session.plus(cost);
        cost
    }

    /// The run stopped before its `finish`: it still spent what its `cost` events said, which
    /// becomes the turn's cost and part of the session's.
    pub(super) fn stopped(&mut self) -> Cost {
        let spent = Cost::from_credits(self.turn_so_far);
        self.session = self.session.plus(spent);
        spent
    }

    /// True once the current turn's `cost` events reported anything.
    pub(super) fn turn_reported(&self) -> bool {
        self.turn_so_far > 0.0
    }

    /// The session's cost including what a still `running` turn has spent so far (a settled
    /// turn is already in the session's total).
    pub(super) fn with_running_turn(&self, running: bool) -> Cost {
        if running {
            self.session.plus(Cost::from_credits(self.turn_so_far))
        } else {
            self.session
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn credits(cost: Cost) -> f64 {
        cost.credits
    }

    #[test]
    fn the_running_total_only_grows_and_ignores_non_finite_values() {
        let mut spending = Spending::default();
        spending.progress(2.0);
        spending.progress(1.5);
        spending.progress(f64::NAN);
        spending.progress(f64::INFINITY);
        assert_eq!(credits(spending.with_running_turn(true)), 2.0);
        spending.progress(3.0);
        assert_eq!(credits(spending.with_running_turn(true)), 3.0);
        assert!(spending.turn_reported());
    }

    #[test]
    fn a_finished_run_counts_its_total_once_not_its_running_total() {
        let mut spending = Spending::restored(Cost::from_credits(10.0));
        spending.turn_opened();
        spending.progress(4.0);
        let turn = spending.finished(Some(5.0));
        assert_eq!(credits(turn), 5.0);
        assert_eq!(credits(spending.session()), 15.0);
        // Settled: the running total no longer adds on top.
        assert_eq!(credits(spending.with_running_turn(false)), 15.0);
    }

    #[test]
    fn negative_and_non_finite_costs_are_not_valid() {
        for bad in [-1000.0, -0.01, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert!(!is_valid(bad), "{bad}");
        }
        for good in [0.0, 0.5, 1e9] {
            assert!(is_valid(good), "{good}");
        }
    }

    #[test]
    fn a_finish_without_a_total_costs_nothing() {
        let mut spending = Spending::default();
        assert_eq!(credits(spending.finished(None)), 0.0);
        assert_eq!(credits(spending.session()), 0.0);
    }

    #[test]
    fn a_run_stopped_before_finish_costs_what_its_cost_events_said() {
        let mut spending = Spending::restored(Cost::from_credits(1.0));
        spending.turn_opened();
        spending.progress(0.25);
        let spent = spending.stopped();
        assert_eq!(credits(spent), 0.25);
        assert_eq!(spent.usd, 0.0025);
        assert_eq!(credits(spending.session()), 1.25);
    }

    #[test]
    fn a_new_turn_starts_from_zero() {
        let mut spending = Spending::default();
        spending.progress(7.0);
        spending.stopped();
        spending.turn_opened();
        assert!(!spending.turn_reported());
        assert_eq!(credits(spending.with_running_turn(true)), 7.0);
        assert_eq!(credits(spending.stopped()), 0.0);
    }
}
