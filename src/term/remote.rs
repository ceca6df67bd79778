//! A running daemon over `/v1` (`docs/http-api.md`): the same operations as the in-process
//! engine, errors read from problem documents, events from the SSE stream
//! (`/events/sse?offset=N`), reconnecting after the last event seen when the connection drops.

use std::collections::VecDeque;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt;
use serde_json::{json, Value};

use super::error::ClientError;
use super::transport::{Events, Transport};
use crate::session::{CreateRequest, PermissionReply, SessionInfo};
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

    async fn json<T: serde::de::DeserializeOwned>(
        &self,
        req: reqwest::RequestBuilder,
    ) -> Result<T, ClientError> {
        self.call(req)
            .await?
            .json()
            .await
            .map_err(|e| ClientError::failed(format!("cannot read the daemon's answer: {e}")))
    }

    /// The same client, for an event stream that outlives the call that made it.
    fn clone_client(&self) -> Remote {
        Remote {
            base: self.base.clone(),
            token: self.token.clone(),
            http: self.http.clone(),
        }
    }

    async fn post(&self, id: &str, rest: &str, body: Option<Value>) -> Result<(), ClientError> {
        let req = self.request(reqwest::Method::POST, self.session_url(id, rest));
        let req = match body {
            Some(body) => req.json(&body),
            None => req,
        };
        self.call(req).await.map(|_| ())
    }
}

#[async_trait]
impl Transport for Remote {
    fn describe(&self) -> String {
        format!("the daemon at {}", self.base)
    }

    fn is_local(&self) -> bool {
        false
    }

    async fn create(&self, id: &str, req: &CreateRequest) -> Result<(), ClientError> {
        let req = self
            .request(reqwest::Method::POST, self.session_url(id, ""))
            .json(req);
        self.call(req).await.map(|_| ())
    }

    async fn info(&self, id: &str) -> Result<SessionInfo, ClientError> {
        let req = self.request(reqwest::Method::GET, self.session_url(id, ""));
        self.json(req).await
    }

    async fn list(&self) -> Result<Vec<SessionInfo>, ClientError> {
        #[derive(serde::Deserialize)]
        struct List {
            sessions: Vec<SessionInfo>,
        }
        let req = self.request(reqwest::Method::GET, self.url("/sessions"));
        Ok(self.json::<List>(req).await?.sessions)
    }

    /// Queues the message; the turn's events come after the session's events counted before.
    async fn send(&self, id: &str, text: &str) -> Result<u64, ClientError> {
        let before = self.info(id).await?.event_count;
        self.queue(id, text).await?;
        Ok(before)
    }

    async fn queue(&self, id: &str, text: &str) -> Result<(), ClientError> {
        self.post(id, "/messages", Some(json!({ "message": text })))
            .await
    }

    async fn events(&self, id: &str, after: u64) -> Result<Events, ClientError> {
        let mut events = RemoteEvents {
            url: self.session_url(id, "/events/sse"),
            remote: self.clone_client(),
            after,
            body: None,
            buffer: Vec::new(),
            ready: VecDeque::new(),
        };
        events.connect().await?;
        Ok(
            futures_util::stream::unfold(events, |mut events| async move {
                let next = events.next().await.transpose()?;
                Some((next, events))
            })
            .boxed(),
        )
    }

    async fn answer(
        &self,
        id: &str,
        question_id: &str,
        answers: Vec<Vec<String>>,
    ) -> Result<(), ClientError> {
        let rest = format!("/questions/{}/reply", encode(question_id));
        self.post(id, &rest, Some(json!({ "answers": answers })))
            .await
    }

    async fn reject_question(&self, id: &str, question_id: &str) -> Result<(), ClientError> {
        let rest = format!("/questions/{}/reject", encode(question_id));
        self.post(id, &rest, None).await
    }

    async fn permission(
        &self,
        id: &str,
        permission_id: &str,
        reply: PermissionReply,
    ) -> Result<(), ClientError> {
        let rest = format!("/permissions/{}/reply", encode(permission_id));
        self.post(id, &rest, Some(json!({ "reply": reply.as_str() })))
            .await
    }

    async fn cancel(&self, id: &str) -> Result<(), ClientError> {
        self.post(id, "/cancel", None).await
    }

    async fn terminate(&self, id: &str) -> Result<(), ClientError> {
        self.post(id, "/terminate", None).await
    }

    async fn delete(&self, id: &str) -> Result<(), ClientError> {
        let req = self.request(reqwest::Method::DELETE, self.session_url(id, ""));
        self.call(req).await.map(|_| ())
    }

    /// `GET /v1/agents`: the agent's `credentialsAvailable`.
    async fn has_credential(&self, agent: &str) -> Result<bool, ClientError> {
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Agent {
            id: String,
            credentials_available: bool,
        }
        #[derive(serde::Deserialize)]
        struct Agents {
            agents: Vec<Agent>,
        }
        let req = self.request(reqwest::Method::GET, self.url("/agents"));
        let agents: Agents = self.json(req).await?;
        agents
            .agents
            .into_iter()
            .find(|a| a.id == agent)
            .map(|a| a.credentials_available)
            .ok_or_else(|| ClientError::usage(format!("the daemon has no agent `{agent}`")))
    }

    /// `/v1` has no route for it: a daemon's sessions keep their mode.
    async fn set_mode(&self, _id: &str, _mode: &str) -> Result<(), ClientError> {
        Err(ClientError::usage(
            "a daemon's sessions keep their mode; `/new` starts one in the new mode",
        ))
    }

    async fn close(&self) {}
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
struct RemoteEvents {
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

    async fn next(&mut self) -> Result<Option<UniversalEvent>, ClientError> {
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
