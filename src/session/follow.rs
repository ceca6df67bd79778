//! Reading a session's log: the one cursor every door uses ([`Follow`], from
//! [`super::SessionManager::follow`]).
//!
//! A follower holds a position (the sequence of the last event it read) and reads what is
//! committed after it, a page at a time: first the past (replay), then, once it has caught up,
//! each event as soon as it is visible (live), from the same cursor, so a reader never sees a
//! gap or a duplicate. Only committed events are ever returned (the store shows an event once
//! it is durable enough to survive a crash, see [`crate::store`]). A slow reader holds nothing
//! but its position and one page, whatever the log's length; a reader that is far behind reads
//! from the database, a live one from the store's in-memory tail.
//!
//! While the store cannot be written (it is *degraded*: a full disk, a lost database), a live
//! follower that has read everything committed gets [`SessionError::StoreUnavailable`] from
//! [`Follow::next`] instead of waiting: nothing will be committed until the store recovers,
//! and a door must tell its client so (an SSE `error` event and a closed stream, an ACP or
//! WebSocket prompt's error) rather than leave it waiting in silence. Its position stays where
//! it was, so a reader that comes back (`Last-Event-ID`, `id@sequence`) misses nothing.
//!
//! Doors never read the store themselves: polling, SSE, ACP prompts and `session/load`, the
//! WebSocket door and the terminal client all read through this cursor, and learn how a turn
//! ended from [`super::TurnTracker`].

use std::sync::Arc;

use tokio::sync::watch;

use super::SessionError;
use crate::store::{wait_after, EventStore, PageRead, StoredEvent};
use crate::universal::{EventData, UniversalEvent};

/// An event as the log holds it: its sequence, type and JSON text (serialized once, when it
/// was appended), the agent's raw line apart. Doors serve [`LoggedEvent::json`] as it is, and
/// decode only what they project ([`LoggedEvent::data`], [`LoggedEvent::decode`]).
pub type LoggedEvent = StoredEvent;

/// Events read from the log at once unless the follower asks for another page size.
pub const DEFAULT_PAGE: usize = 256;

/// A cursor on one session's committed log.
///
/// [`Follow::next`] is cancel-safe: dropped while it waits (a `select!` with a keep-alive
/// timer, a closed connection), the cursor has not moved and the next call resumes there.
pub struct Follow {
    store: Arc<dyn EventStore>,
    session_id: Arc<str>,
    after: u64,
    page: usize,
    rx: watch::Receiver<u64>,
    /// How pages are read ([`Follow::with_raw`], [`Follow::streaming`]).
    how: PageRead,
    /// The store's health (`None` inside: it writes), for a store that can degrade.
    health: Option<watch::Receiver<Option<Arc<str>>>>,
}

impl Follow {
    /// A cursor on `session_id`'s log after sequence `after` (0: from the start).
    pub(super) fn new(
        store: Arc<dyn EventStore>,
        session_id: &str,
        after: u64,
    ) -> Result<Follow, SessionError> {
        let rx = store.subscribe(session_id).map_err(|e| match e {
            crate::store::StoreError::UnknownSession(id) => SessionError::NotFound(id),
            other => SessionError::from(other),
        })?;
        let health = store.health();
        Ok(Follow {
            store,
            session_id: session_id.into(),
            after,
            page: DEFAULT_PAGE,
            rx,
            how: PageRead::EXACT,
            health,
        })
    }

    /// Reads up to `page` events at a time (at least 1).
    pub fn with_page(mut self, page: usize) -> Follow {
        self.page = page.max(1);
        self
    }

    /// Whether the reader serves the agent's raw lines (the default). One that never does
    /// (SSE and polling without `includeRaw`, the ACP and WebSocket doors) passes `false`: its
    /// events may come without them (`raw: None`), which spares a database reading them
    /// ([`PageRead::raw`]).
    pub fn with_raw(mut self, raw: bool) -> Follow {
        self.how.raw = raw;
        self
    }

    /// For a reader that streams page after page (SSE, the transcript, the ACP and WebSocket
    /// doors) rather than asking for a page of a size: a page read from the database may end
    /// early where the database's chunk ends, so the next does not read it again
    /// ([`PageRead::exact`]). Never an empty page while events follow.
    pub fn streaming(mut self) -> Follow {
        self.how.exact = false;
        self
    }

    /// The session this cursor reads.
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// The sequence of the last event read (where the next read starts after).
    pub fn position(&self) -> u64 {
        self.after
    }

    /// The sequence of the last committed event of the log (0 for an empty log).
    pub fn last_sequence(&self) -> Result<u64, SessionError> {
        Ok(self.store.last_sequence(&self.session_id)?)
    }

    /// The committed events after the cursor, up to a page, without waiting (empty when the
    /// reader has caught up); the cursor moves past them.
    pub fn poll(&mut self) -> Result<Vec<LoggedEvent>, SessionError> {
        self.poll_at_most(self.page)
    }

    /// [`Follow::poll`] with a page of at most `limit` events.
    pub fn poll_at_most(&mut self, limit: usize) -> Result<Vec<LoggedEvent>, SessionError> {
        let page = self
            .store
            .read_page(&self.session_id, self.after, limit.max(1), self.how)?;
        if let Some(last) = page.last() {
            self.after = last.sequence;
        }
        Ok(page)
    }

    /// The next committed events after the cursor (a page), waiting for some when the reader
    /// has caught up. `None` once the log is gone (the session was deleted, or the store
    /// closed): nothing will follow. [`SessionError::StoreUnavailable`] when the reader has
    /// caught up while the store cannot be written, or once it degrades while the reader
    /// waits: nothing can follow until it recovers (the cursor stays; call again to go on).
    pub async fn next(&mut self) -> Result<Option<Vec<LoggedEvent>>, SessionError> {
        loop {
            let page = self.poll()?;
            if !page.is_empty() {
                return Ok(Some(page));
            }
            if let Some(why) = self.store_trouble() {
                return Err(SessionError::StoreUnavailable(why));
            }
            let Some(health) = self.health.as_mut() else {
                if !self.wait().await {
                    return Ok(None);
                }
                continue;
            };
            // Both cancel-safe: the cursor has not moved.
            tokio::select! {
                more = wait_after(&mut self.rx, self.after) => if !more {
                    return Ok(None);
                },
                changed = health.changed() => if changed.is_err() {
                    // The store is gone: only the log's end can come now.
                    self.health = None;
                },
            }
        }
    }

    /// Why the store cannot be written now, if it cannot.
    fn store_trouble(&self) -> Option<String> {
        let health = self.health.as_ref()?;
        let why = health.borrow().as_deref().map(str::to_owned);
        why
    }

    /// Waits until the log holds an event after the cursor. False once the log is gone.
    pub async fn wait(&mut self) -> bool {
        wait_after(&mut self.rx, self.after).await
    }

    /// The events after the cursor up to sequence `until` (a page at most; empty once the
    /// cursor is there): a replay of the log as it was at some moment, without waiting.
    pub fn poll_until(&mut self, until: u64) -> Result<Vec<LoggedEvent>, SessionError> {
        if self.after >= until {
            return Ok(Vec::new());
        }
        let limit = usize::try_from(until - self.after)
            .unwrap_or(usize::MAX)
            .min(self.page);
        self.poll_at_most(limit)
    }
}

impl StoredEvent {
    /// The event's payload, parsing only its `data` (what a door projects).
    pub fn data(&self) -> Result<EventData, SessionError> {
        self.decode_data().map_err(|e| {
            SessionError::Store(crate::store::StoreError::Backend(format!(
                "a stored event is not valid: event {}: {e}",
                self.sequence
            )))
        })
    }

    /// The whole event, raw line included (the terminal's `--json`, tests).
    pub fn event(&self) -> Result<UniversalEvent, SessionError> {
        Ok(self.decode()?)
    }

    /// An `item.delta`'s item id and text, borrowed from the stored text (copied only when
    /// the text holds an escape); `None` for other events (or text laid out otherwise: the
    /// caller then decodes it with [`StoredEvent::data`]). Deltas are most of a streamed
    /// answer: a door that only forwards their text need not build each one's payload.
    pub fn item_delta(&self) -> Option<ItemDeltaText<'_>> {
        if self.event_type != "item.delta" {
            return None;
        }
        serde_json::from_str(self.data_json()?).ok()
    }
}

/// The parts of an `item.delta` a door forwards, borrowed ([`StoredEvent::item_delta`]).
#[derive(Debug, serde::Deserialize)]
pub struct ItemDeltaText<'a> {
    #[serde(borrow)]
    pub item_id: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    pub delta: std::borrow::Cow<'a, str>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{MemoryStore, SessionRecord};
    use crate::universal::{EventDraft, ItemDeltaData};

    fn delta(text: &str) -> EventDraft {
        EventDraft::synthetic(EventData::ItemDelta(ItemDeltaData {
            item_id: "itm_1".into(),
            native_item_id: None,
            delta: text.into(),
        }))
    }

    fn store_with(n: usize) -> Arc<dyn EventStore> {
        let store: Arc<dyn EventStore> = Arc::new(MemoryStore::new());
        store
            .create(&SessionRecord::new(
                "s",
                "mock",
                serde_json::json!({}),
                "",
                0,
            ))
            .unwrap();
        let mut drafts: Vec<_> = (0..n).map(|i| delta(&i.to_string())).collect();
        if !drafts.is_empty() {
            store.append("s", &mut drafts, "t".into(), None).unwrap();
        }
        store
    }

    fn text(event: &LoggedEvent) -> String {
        match event.data().unwrap() {
            EventData::ItemDelta(d) => d.delta,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn item_delta_borrows_the_text_and_matches_the_decoded_payload() {
        let store = store_with(0);
        let mut drafts = vec![
            delta("plain 1:23;"),
            delta("quote \" and\nline é"),
            EventDraft::synthetic(EventData::Error(Box::new(crate::universal::ErrorData {
                message: "m".into(),
                code: None,
                details: None,
            }))),
        ];
        store.append("s", &mut drafts, "t".into(), None).unwrap();
        let events = store.read("s", 0, 10).unwrap();
        let plain = events[0].item_delta().unwrap();
        assert_eq!((&*plain.item_id, &*plain.delta), ("itm_1", "plain 1:23;"));
        assert!(matches!(plain.delta, std::borrow::Cow::Borrowed(_)));
        let escaped = events[1].item_delta().unwrap();
        assert_eq!(escaped.delta, text(&events[1]));
        assert!(events[2].item_delta().is_none());
    }

    #[tokio::test]
    async fn replays_in_pages_then_follows_live_without_gap_or_duplicate() {
        let store = store_with(5);
        let mut follow = Follow::new(store.clone(), "s", 0).unwrap().with_page(2);
        let mut seen = Vec::new();
        while seen.len() < 5 {
            let page = follow.next().await.unwrap().unwrap();
            assert!(page.len() <= 2);
            seen.extend(page.iter().map(|e| e.sequence));
        }
        assert_eq!(seen, vec![1, 2, 3, 4, 5]);
        assert_eq!(follow.position(), 5);
        let waiting = tokio::spawn(async move {
            let page = follow.next().await.unwrap().unwrap();
            (page.iter().map(text).collect::<Vec<_>>(), follow.position())
        });
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        store
            .append("s", &mut vec![delta("live")], "t".into(), None)
            .unwrap();
        assert_eq!(waiting.await.unwrap(), (vec!["live".to_owned()], 6));
    }

    #[tokio::test]
    async fn a_cancelled_wait_leaves_the_cursor_where_it_was() {
        let store = store_with(1);
        let mut follow = Follow::new(store.clone(), "s", 1).unwrap();
        let timed_out =
            tokio::time::timeout(std::time::Duration::from_millis(10), follow.next()).await;
        assert!(timed_out.is_err());
        assert_eq!(follow.position(), 1);
        store
            .append("s", &mut vec![delta("b")], "t".into(), None)
            .unwrap();
        let page = follow.next().await.unwrap().unwrap();
        assert_eq!(page[0].sequence, 2);
    }

    #[tokio::test]
    async fn poll_until_stops_at_the_mark_and_never_waits() {
        let store = store_with(7);
        let mut follow = Follow::new(store, "s", 2).unwrap().with_page(3);
        let mut seen = Vec::new();
        loop {
            let page = follow.poll_until(6).unwrap();
            if page.is_empty() {
                break;
            }
            seen.extend(page.iter().map(|e| e.sequence));
        }
        assert_eq!(seen, vec![3, 4, 5, 6]);
        assert_eq!(follow.position(), 6);
        assert_eq!(follow.last_sequence().unwrap(), 7);
        assert_eq!(follow.poll().unwrap().len(), 1);
        assert!(follow.poll().unwrap().is_empty());
    }

    #[tokio::test]
    async fn an_unknown_session_is_not_found_and_a_deleted_log_ends_the_follow() {
        let store = store_with(0);
        assert!(matches!(
            Follow::new(store.clone(), "nope", 0),
            Err(SessionError::NotFound(id)) if id == "nope"
        ));
        let mut follow = Follow::new(store.clone(), "s", 0).unwrap();
        let waiting = tokio::spawn(async move { follow.next().await.unwrap() });
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        assert!(store.delete_session("s").unwrap());
        assert!(waiting.await.unwrap().is_none());
    }
}
