//! Remote ACP servers: ACP connections reached over the network (`/v1/acp/{server_id}`, the
//! sandbox-agent dialect; `docs/acp-http.md`), each served by the same door as `codebuffd acp`
//! with the same engine, in-process.
//!
//! This module knows no HTTP: a [`Server`] takes envelopes ([`Server::post`]) and writes the
//! agent side's envelopes to its durable [`EnvelopeLog`], which readers follow at a cursor;
//! `http/acp.rs` maps it to routes, statuses and SSE. [`Servers`] keeps them by id and restores
//! them when the daemon starts again ([`restore`]: those whose engine is gone).
//!
//! Tasks and threads per server: the connection's task (the door's dispatch loop and the tasks
//! it spawns) and one writer thread appending to the log; both end when the server is deleted.

pub mod envelopes;
pub mod record;
pub mod registry;
pub mod restore;
pub mod server;

pub use envelopes::EnvelopeLog;
pub use registry::{AcpLimits, RegistryError, ServerInfo, Servers};
pub use server::{PostError, Posted, Reading, Server};
