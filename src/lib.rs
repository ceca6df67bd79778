//! codebuffd: the Codebuff coding agent behind the sandbox-agent `/v1` universal-events API,
//! the Agent Client Protocol, the Codebuff WebSocket protocol and a terminal client: one engine,
//! several front doors (`ARCHITECTURE.md`).
//!
//! Layers, from the bottom (dependencies point down only):
//!
//! * [`universal`]: the output model; depends on nothing else in the crate.
//! * [`codebuff`]: the input model and `convert_codebuff`; pure, no I/O.
//! * [`agent`]: the agent command contract, starting and supervising agent processes, the
//!   mock agent. [`store`]: the event log (memory, SQLite, Postgres).
//! * [`session`]: sessions, turns, questions, the lifecycle rules, the follow cursor and the
//!   turn verdict every door reads with; [`webhooks`]: the signed, durable deliveries from the
//!   store's outbox; [`engine`] starts it all. Leaf helpers beside them: [`sync`] (lock
//!   poisoning), [`instance`] (the data directory's id), [`scope`] (a
//!   connection's slot and the stop signal), [`metrics`] (the Prometheus metrics every layer
//!   may count in).
//! * Front doors: [`http`] (the `/v1` API, and ACP over HTTP), [`acp`] (the Agent Client
//!   Protocol, over stdio and for `http`), [`ws`] (the Codebuff WebSocket protocol at `/v1/ws`,
//!   mounted by `http`), [`term`] (the terminal client: in-process or over `/v1`). They
//!   translate; they never own turns, processes or storage, they read sessions only through
//!   [`session::Follow`], and they learn how a turn ended from [`session::TurnTracker`].
//! * Beside every layer, for the process as a whole: [`secrets`] (the key and token kept out of
//!   `/proc`, first thing in `main`), [`private_files`] (the data directory is the daemon
//!   user's alone).
//! * [`commands`] (one per subcommand), [`cli`] and [`config`] on top; `main.rs` dispatches
//!   (after [`allocator`] tuned malloc for the long-lived commands; the server releases the
//!   code only starting needed with [`startup_pages`] once it is up).

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod acp;
pub mod agent;
pub mod allocator;
pub mod cli;
pub mod codebuff;
pub mod commands;
pub mod config;
pub mod engine;
pub mod http;
pub mod instance;
pub mod metrics;
pub mod private_files;
pub mod scope;
pub mod secrets;
pub mod session;
pub mod startup_pages;
pub mod store;
pub mod sync;
pub mod term;
pub mod universal;
pub mod webhooks;
pub mod ws;
