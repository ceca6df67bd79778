//! The daemon's Prometheus metrics (`GET /metrics`, `docs/metrics.md`): one registry for the
//! process, counted where things happen and sampled where they are state.
//!
//! Counters are bumped at the engine's existing points with an atomic add each (a turn's end,
//! an append's batch, a commit, an agent process's spawn and reaping, a webhook delivery, an
//! HTTP response); nothing is counted per event on a lock. States that the engine already
//! keeps (sessions by status, pending questions, warm spares, store health) are read once per
//! scrape by whoever serves it ([`Metrics::encode`] after setting the gauges), not kept twice.
//! No label carries a session id: a label's values stay few whatever the load.
//!
//! A leaf module: it depends on nothing else in the crate, so every layer may count.

use std::sync::atomic::AtomicU64;
use std::sync::LazyLock;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// The `Content-Type` of [`Metrics::encode`]'s text (Prometheus text format 0.0.4).
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// `{agent, status}` of a turn.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TurnLabels {
    pub agent: &'static str,
    pub status: &'static str,
}

/// `{agent}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AgentLabel {
    pub agent: &'static str,
}

/// `{status}` of a session.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StatusLabel {
    pub status: &'static str,
}

/// `{result}` of a webhook delivery attempt: `delivered`, `retried` or `failed`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: &'static str,
}

/// `{route, status}` of an HTTP response: the matched route template (`/v1/sessions/{id}`),
/// never the raw path, so ids do not become label values.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    pub route: String,
    pub status: u16,
}

/// Every metric the daemon exports.
pub struct Metrics {
    registry: Registry,
    /// Turns ended, by agent and `turn.ended` status.
    pub turns: Family<TurnLabels, Counter>,
    /// Events appended to the log (counted per append, by the batch's size).
    pub events_appended: Counter,
    /// Sessions by status (set at scrape).
    pub sessions: Family<StatusLabel, Gauge>,
    /// Credits spent by ended turns, by agent.
    pub cost_credits: Family<AgentLabel, Counter<f64, AtomicU64>>,
    /// 1 while the store cannot write (set at scrape).
    pub store_degraded: Gauge,
    /// Time of each commit of the durable stores' writer (retries included).
    pub store_commit_seconds: Histogram,
    /// Agent processes started and not yet reaped (warm spares included).
    pub agent_processes: Gauge,
    /// Warm agent processes waiting for a turn (set at scrape).
    pub warm_spares: Gauge,
    /// Questions waiting for an answer (set at scrape).
    pub questions_pending: Gauge,
    /// Permission requests waiting for a reply (set at scrape).
    pub permissions_pending: Gauge,
    /// Webhook delivery attempts by result.
    pub webhook_deliveries: Family<ResultLabel, Counter>,
    /// Webhook deliveries waiting (pending) in the outbox (set at scrape).
    pub webhook_outbox_pending: Gauge,
    /// HTTP responses by route template and status code.
    pub http_requests: Family<RouteLabels, Counter>,
}

impl Metrics {
    fn new() -> Metrics {
        let mut registry = Registry::default();
        let turns = Family::<TurnLabels, Counter>::default();
        registry.register(
            "codebuffd_turns",
            "Turns ended, by agent and status",
            turns.clone(),
        );
        let events_appended = Counter::default();
        registry.register(
            "codebuffd_events_appended",
            "Events appended to the event log",
            events_appended.clone(),
        );
        let sessions = Family::<StatusLabel, Gauge>::default();
        registry.register("codebuffd_sessions", "Sessions by status", sessions.clone());
        let cost_credits = Family::<AgentLabel, Counter<f64, AtomicU64>>::default();
        registry.register(
            "codebuffd_cost_credits",
            "Codebuff credits spent by ended turns, by agent (1 credit = 1 US cent)",
            cost_credits.clone(),
        );
        let store_degraded = Gauge::default();
        registry.register(
            "codebuffd_store_degraded",
            "1 while the event store cannot write (full disk, lost database), else 0",
            store_degraded.clone(),
        );
        // 50 µs … about 13 s: a group commit takes well under a millisecond, a synced one a
        // few, a retried one seconds.
        let store_commit_seconds = Histogram::new(exponential_buckets(0.000_05, 4.0, 10));
        registry.register(
            "codebuffd_store_commit_seconds",
            "Time of each commit of the event store's writer",
            store_commit_seconds.clone(),
        );
        let agent_processes = Gauge::default();
        registry.register(
            "codebuffd_agent_processes",
            "Agent processes running (turns and warm spares)",
            agent_processes.clone(),
        );
        let warm_spares = Gauge::default();
        registry.register(
            "codebuffd_warm_spares",
            "Warm agent processes waiting for a turn",
            warm_spares.clone(),
        );
        let questions_pending = Gauge::default();
        registry.register(
            "codebuffd_questions_pending",
            "Questions of the agents waiting for an answer",
            questions_pending.clone(),
        );
        let permissions_pending = Gauge::default();
        registry.register(
            "codebuffd_permissions_pending",
            "Permission requests of the agents waiting for a reply",
            permissions_pending.clone(),
        );
        let webhook_deliveries = Family::<ResultLabel, Counter>::default();
        registry.register(
            "codebuffd_webhook_deliveries",
            "Webhook delivery attempts by result (delivered, retried, failed)",
            webhook_deliveries.clone(),
        );
        let webhook_outbox_pending = Gauge::default();
        registry.register(
            "codebuffd_webhook_outbox_pending",
            "Webhook deliveries waiting in the outbox (not yet delivered or given up)",
            webhook_outbox_pending.clone(),
        );
        let http_requests = Family::<RouteLabels, Counter>::default();
        registry.register(
            "codebuffd_http_requests",
            "HTTP responses by route template and status code",
            http_requests.clone(),
        );
        Metrics {
            registry,
            turns,
            events_appended,
            sessions,
            cost_credits,
            store_degraded,
            store_commit_seconds,
            agent_processes,
            warm_spares,
            questions_pending,
            permissions_pending,
            webhook_deliveries,
            webhook_outbox_pending,
            http_requests,
        }
    }

    /// Counts a turn's end.
    pub fn turn_ended(&self, agent: &'static str, status: &'static str, credits: f64) {
        self.turns
            .get_or_create(&TurnLabels { agent, status })
            .inc();
        if credits.is_finite() && credits > 0.0 {
            self.cost_credits
                .get_or_create(&AgentLabel { agent })
                .inc_by(credits);
        }
    }

    /// Counts a webhook delivery attempt.
    pub fn webhook_delivery(&self, result: &'static str) {
        self.webhook_deliveries
            .get_or_create(&ResultLabel { result })
            .inc();
    }

    /// Counts an HTTP response.
    pub fn http_request(&self, route: &str, status: u16) {
        let labels = RouteLabels {
            route: route.to_owned(),
            status,
        };
        // The common case (a route seen before) reads under the family's read lock only.
        if let Some(counter) = self.http_requests.get(&labels) {
            counter.inc();
            return;
        }
        self.http_requests.get_or_create(&labels).inc();
    }

    /// Sets the session gauges: every status appears (0 when no session has it), so a
    /// dashboard's series do not vanish.
    pub fn set_sessions(&self, counts: &[(&'static str, i64)]) {
        for (status, count) in counts {
            self.sessions
                .get_or_create(&StatusLabel { status })
                .set(*count);
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut text = String::with_capacity(8 * 1024);
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut text, &self.registry);
        text
    }
}

/// The process's metrics.
pub fn metrics() -> &'static Metrics {
    static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);
    &METRICS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_names_every_metric_with_its_type_and_labels() {
        let m = Metrics::new();
        m.turn_ended("mock", "completed", 2.5);
        m.turn_ended("mock", "completed", 0.5);
        m.events_appended.inc_by(7);
        m.http_request("/v1/sessions/{id}", 200);
        m.http_request("/v1/sessions/{id}", 200);
        m.set_sessions(&[("idle", 2), ("running", 0)]);
        m.store_commit_seconds.observe(0.001);
        let text = m.encode();
        for line in [
            "# TYPE codebuffd_turns_total counter",
            "codebuffd_turns_total{agent=\"mock\",status=\"completed\"} 2",
            "codebuffd_cost_credits_total{agent=\"mock\"} 3.0",
            "codebuffd_events_appended_total 7",
            "codebuffd_http_requests_total{route=\"/v1/sessions/{id}\",status=\"200\"} 2",
            "codebuffd_sessions{status=\"idle\"} 2",
            "codebuffd_sessions{status=\"running\"} 0",
            "# TYPE codebuffd_store_commit_seconds histogram",
            "codebuffd_store_commit_seconds_count 1",
            "codebuffd_store_degraded 0",
        ] {
            assert!(text.lines().any(|l| l == line), "no `{line}` in\n{text}");
        }
    }
}
