//! Reading a session's log at a cursor, as every door does (`http/events.rs`): a page of
//! events after the cursor from the store, and when there is none, a wait on the log's
//! watermark. The door never writes the log.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::sync::watch;

use crate::store::{wait_after, EventStore, StoreError, StoredEvent};
use crate::universal::EventData;

/// Events read from the log at once.
const PAGE: usize = 1024;

/// A reader of one session's log.
pub struct LogCursor {
    store: Arc<dyn EventStore>,
    session_id: String,
    after: u64,
    rx: watch::Receiver<u64>,
}

impl LogCursor {
    /// A cursor on `session_id`'s log, after sequence `after`.
    pub fn new(
        store: Arc<dyn EventStore>,
        session_id: &str,
        after: u64,
    ) -> Result<LogCursor, StoreError> {
        let rx = store.subscribe(session_id)?;
        Ok(LogCursor {
            store,
            session_id: session_id.to_owned(),
            after,
            rx,
        })
    }

    /// The sequence of the last event read.
    pub fn position(&self) -> u64 {
        self.after
    }

    /// The next events after the cursor, waiting for some when there are none; `None` when the
    /// log is gone (the store was dropped).
    pub async fn next(&mut self) -> Result<Option<Vec<Arc<StoredEvent>>>, StoreError> {
        loop {
            let page = self.store.read(&self.session_id, self.after, PAGE)?;
            if let Some(last) = page.last() {
                self.after = last.sequence;
                return Ok(Some(page));
            }
            if !wait_after(&mut self.rx, self.after).await {
                return Ok(None);
            }
        }
    }

    /// The next events after the cursor up to sequence `until` (empty when there are none).
    pub fn read_until(&mut self, until: u64) -> Result<Vec<Arc<StoredEvent>>, StoreError> {
        if self.after >= until {
            return Ok(Vec::new());
        }
        let mut page = self.store.read(&self.session_id, self.after, PAGE)?;
        page.retain(|e| e.sequence <= until);
        if let Some(last) = page.last() {
            self.after = last.sequence;
        }
        Ok(page)
    }
}

#[derive(Deserialize)]
struct DataOnly<'a> {
    #[serde(borrow)]
    data: &'a RawValue,
}

/// The payload of a stored event (only its `data` is parsed).
pub fn decode(event: &StoredEvent) -> Result<EventData, serde_json::Error> {
    if let Some(data) = event.data_json() {
        return EventData::from_parts(event.event_type, data);
    }
    let envelope: DataOnly<'_> = serde_json::from_str(&event.json)?;
    EventData::from_parts(event.event_type, envelope.data.get())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryStore;
    use crate::universal::{EventDraft, ItemDeltaData};

    fn delta(text: &str) -> EventDraft {
        EventDraft::synthetic(EventData::ItemDelta(ItemDeltaData {
            item_id: "itm_1".into(),
            native_item_id: None,
            delta: text.into(),
        }))
    }

    #[tokio::test]
    async fn a_cursor_reads_pages_then_waits_for_more() {
        let store: Arc<dyn EventStore> = Arc::new(MemoryStore::new());
        store
            .create(&crate::store::SessionRecord::new(
                "s",
                "mock",
                serde_json::json!({}),
                "",
                0,
            ))
            .unwrap();
        store
            .append("s", &mut vec![delta("a"), delta("b")], "t".into(), None)
            .unwrap();
        let mut cursor = LogCursor::new(store.clone(), "s", 0).unwrap();
        let page = cursor.next().await.unwrap().unwrap();
        assert_eq!(page.len(), 2);
        assert!(matches!(decode(&page[1]).unwrap(), EventData::ItemDelta(d) if d.delta == "b"));
        let waiting = tokio::spawn(async move {
            let page = cursor.next().await.unwrap().unwrap();
            (page[0].sequence, cursor.position())
        });
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        store
            .append("s", &mut vec![delta("c")], "t".into(), None)
            .unwrap();
        assert_eq!(waiting.await.unwrap(), (3, 3));
    }
}
