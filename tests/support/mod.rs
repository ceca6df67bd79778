//! Helpers shared by the integration tests.

#![allow(dead_code)]

pub mod daemon;
pub mod fake_backend;
pub mod invariants;
pub mod procs;
