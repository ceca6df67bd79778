//! A running daemon over `/v1` (`docs/http-api.md`): the same operations as the in-process
//! engine, errors read from problem documents, events from the SSE stream
//! (`/events/sse?offset=N`), reconnecting after the last event seen when the connection drops.

use std::collections::VecDeque;
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{json, Value};

use super::error::ClientError;
use super::transport::{NewSession, SessionRow};
use crate::universal::UniversalEvent;

/// How long connecting to the daemon may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How many times in a row an event stream is reopened before giving up.
const RECONNECTS: u32 = 30;

/// A daemon at a base URL.
pub struct Remote {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl Remote {
    /// A client of the daemon at `base` (`http://host:port`, with or without a trailing `/`).
    pub fn new(base: &str, token: Option<String>) -> Result<Remote, ClientError> {
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .map_err(|e| ClientError::failed(format!("cannot make an HTTP client: {e}")))?;
        Ok(Remote {
            base: base.trim_end_matches('/').to_owned(),
            token,
            http,
        })
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    fn url(&self, path: &str) -> String {
        format!("{}/v1{path}", self.base)
    }

    fn session_url(&self, id: &str, rest: &str) -> String {
        self.url(&format!("/sessions/{}{rest}", encode(id)))
    }

    fn request(&self, method: reqwest::Method, url: String) -> reqwest::RequestBuilder {
        let req = self.http.request(method, url);
        match &self.token {
            Some(token) => req.bearer_auth(token),
            None => req,
        }
    }

    /// Sends a request; a non-2xx answer becomes the error its problem document says.
    async fn call(&self, req: reqwest::RequestBuilder) -> Result<reqwest::Response, ClientError> {
        let response = req.send().await.map_err(|e| self.unreachable(&e))?;
        if response.status().is_success() {
            return Ok(response);
        }
        let status = response.status().as_u16();
        let problem: Value = response.json().await.unwrap_or(Value::Null);
        let kind = problem["type"].as_str().unwrap_or_default();
        let detail = problem["detail"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| format!("the daemon answered HTTP {status}"));
        Err(ClientError::from_problem(status, kind, &detail))
    }

    fn unreachable(&self, e: &reqwest::Error) -> ClientError {
        // The error's text may name the URL; the URL carries no secret (the token is a header).
        ClientError::failed(format!("cannot reach the daemon at {}: {e}", self.base))
    }

    async fn json(&self, req: reqwest::RequestBuilder) -> Result<Value, ClientError> {
        self.call(req)
            .await?
            .json()
            .await
            .map_err(|e| ClientError::failed(format!("the daemon's answer is not JSON: {e}")))
    }

    pub async fn create(&self, id: &str, new: &NewSession) -> Result<(), ClientError> {
        let mut body = json!({ "agent": new.agent });
        let mut set = |key: &str, value: Option<Value>| {
            if let Some(value) = value {
                body[key] = value;
            }
        };
        set("agentMode", new.agent_mode.clone().map(Value::from));
        set(
            "permissionMode",
            new.permission_mode.clone().map(Value::from),
        );
        set("model", new.model.clone().map(Value::from));
        set("directory", new.directory.clone().map(Value::from));
        set("timeoutSeconds", new.timeout_seconds.map(Value::from));
        let req = self
            .request(reqwest::Method::POST, self.session_url(id, ""))
            .json(&body);
        self.call(req).await.map(|_| ())
    }

    pub async fn info(&self, id: &str) -> Result<SessionRow, ClientError> {
        let req = self.request(reqwest::Method::GET, self.session_url(id, ""));
        SessionRow::from_json(self.json(req).await?)
    }

    pub async fn list(&self) -> Result<Vec<SessionRow>, ClientError> {
        let req = self.request(reqwest::Method::GET, self.url("/sessions"));
        let mut doc = self.json(req).await?;
        let Value::Array(sessions) = doc["sessions"].take() else {
            return Err(ClientError::failed(
                "the daemon's session list has no `sessions`",
            ));
        };
        sessions.into_iter().map(SessionRow::from_json).collect()
    }

    /// Queues the message; the turn's events come after the session's events counted before.
    pub async fn send(&self, id: &str, text: &str) -> Result<u64, ClientError> {
        let before = self.info(id).await?.event_count;
        let req = self
            .request(reqwest::Method::POST, self.session_url(id, "/messages"))
            .json(&json!({ "message": text }));
        self.call(req).await?;
        Ok(before)
    }

    pub async fn events(&self, id: &str, after: u64) -> Result<RemoteEvents, ClientError> {
        let mut events = RemoteEvents {
            url: self.session_url(id, "/events/sse"),
            remote: Remote {
                base: self.base.clone(),
                token: self.token.clone(),
                http: self.http.clone(),
            },
            after,
            body: None,
            buffer: Vec::new(),
            ready: VecDeque::new(),
        };
        events.connect().await?;
        Ok(events)
    }

    pub async fn answer(
        &self,
        id: &str,
        question_id: &str,
        answers: Vec<Vec<String>>,
    ) -> Result<(), ClientError> {
        let url = self.session_url(id, &format!("/questions/{}/reply", encode(question_id)));
        let req = self
            .request(reqwest::Method::POST, url)
            .json(&json!({ "answers": answers }));
        self.call(req).await.map(|_| ())
    }

    pub async fn reject_question(&self, id: &str, question_id: &str) -> Result<(), ClientError> {
        let url = self.session_url(id, &format!("/questions/{}/reject", encode(question_id)));
        self.call(self.request(reqwest::Method::POST, url))
            .await
            .map(|_| ())
    }

    pub async fn permission(
        &self,
        id: &str,
        permission_id: &str,
        reply: &str,
    ) -> Result<(), ClientError> {
        let url = self.session_url(id, &format!("/permissions/{}/reply", encode(permission_id)));
        let req = self
            .request(reqwest::Method::POST, url)
            .json(&json!({ "reply": reply }));
        self.call(req).await.map(|_| ())
    }

    /// `POST /v1/sessions/{id}/<what>` with no body (`cancel`, `terminate`).
    pub async fn post_empty(&self, id: &str, what: &str) -> Result<(), ClientError> {
        let url = self.session_url(id, &format!("/{what}"));
        self.call(self.request(reqwest::Method::POST, url))
            .await
            .map(|_| ())
    }

    pub async fn delete(&self, id: &str) -> Result<(), ClientError> {
        let req = self.request(reqwest::Method::DELETE, self.session_url(id, ""));
        self.call(req).await.map(|_| ())
    }
}

/// A path segment, percent-encoded (ids are printable but may hold `/`, `?`, spaces, …).
fn encode(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for b in segment.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A session's SSE stream, reopened after its last event when the connection drops.
pub struct RemoteEvents {
    url: String,
    remote: Remote,
    after: u64,
    body: Option<futures_util::stream::BoxStream<'static, reqwest::Result<Vec<u8>>>>,
    buffer: Vec<u8>,
    ready: VecDeque<UniversalEvent>,
}

impl RemoteEvents {
    async fn connect(&mut self) -> Result<(), ClientError> {
        let url = format!("{}?offset={}", self.url, self.after);
        let response = self
            .remote
            .call(self.remote.request(reqwest::Method::GET, url))
            .await?;
        self.body = Some(
            response
                .bytes_stream()
                .map(|chunk| chunk.map(|b| b.to_vec()))
                .boxed(),
        );
        self.buffer.clear();
        Ok(())
    }

    pub async fn next(&mut self) -> Result<Option<UniversalEvent>, ClientError> {
        let mut failures = 0;
        loop {
            if let Some(event) = self.ready.pop_front() {
                self.after = event.sequence;
                return Ok(Some(event));
            }
            let chunk = match self.body.as_mut() {
                Some(body) => body.next().await,
                None => None,
            };
            match chunk {
                Some(Ok(bytes)) => {
                    failures = 0;
                    self.buffer.extend_from_slice(&bytes);
                    self.take_frames()?;
                }
                // The connection dropped (or ended): reopen it after the last event.
                _ => {
                    self.body = None;
                    failures += 1;
                    if failures > RECONNECTS {
                        return Err(ClientError::failed(format!(
                            "lost the event stream of the daemon at {}",
                            self.remote.base
                        )));
                    }
                    tokio::time::sleep(Duration::from_millis(200 * u64::from(failures.min(10))))
                        .await;
                    match self.connect().await {
                        Ok(()) => {}
                        Err(e) if e.kind == super::error::ErrorKind::Usage => return Err(e),
                        Err(_) => {}
                    }
                }
            }
        }
    }

    /// Moves the complete frames of the buffer to `ready`.
    fn take_frames(&mut self) -> Result<(), ClientError> {
        while let Some(end) = find(&self.buffer, b"\n\n") {
            let frame: Vec<u8> = self.buffer.drain(..end + 2).collect();
            let text = String::from_utf8_lossy(&frame);
            let data: String = text
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(|d| d.strip_prefix(' ').unwrap_or(d))
                .collect::<Vec<_>>()
                .join("\n");
            if data.is_empty() {
                continue;
            }
            let event: UniversalEvent = serde_json::from_str(&data).map_err(|e| {
                ClientError::failed(format!(
                    "the daemon sent an event this client cannot read: {e}"
                ))
            })?;
            if event.sequence > self.after {
                self.ready.push_back(event);
            }
        }
        Ok(())
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_encoded_as_one_segment() {
        assert_eq!(encode("abc-1_2.3~"), "abc-1_2.3~");
        assert_eq!(encode("a/b c?"), "a%2Fb%20c%3F");
    }
}
