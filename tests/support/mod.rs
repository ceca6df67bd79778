//! Helpers shared by the integration tests.

#![allow(dead_code)]

pub mod acp_http;
pub mod api;
pub mod codebuff;
pub mod daemon;
pub mod events;
pub mod fake_backend;
pub mod invariants;
pub mod mock;
pub mod permissions;
pub mod procs;
pub mod receiver;
pub mod sse;
pub mod store;
pub mod ws;
