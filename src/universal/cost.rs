//! Cost of a turn or a session **(ours)**: Codebuff reports credits; `usd = credits / 100`.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Money spent, in Codebuff credits and in US dollars. Attached to `turn.ended` (that turn's
/// cost), `session.ended` and `SessionInfo` (the session's running total).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Cost {
    pub credits: f64,
    pub usd: f64,
}

impl Cost {
    /// The cost of `credits` Codebuff credits (1 credit = 1 US cent).
    pub fn from_credits(credits: f64) -> Self {
        let credits = if credits.is_finite() { credits } else { 0.0 };
        Cost {
            credits,
            usd: credits / 100.0,
        }
    }

    /// The sum of two costs, recomputing `usd` from the credit total so rounding never drifts.
    pub fn plus(self, other: Cost) -> Cost {
        Cost::from_credits(self.credits + other.credits)
    }
}
