//! The commands of the `codebuffd` binary, one file each; `main.rs` dispatches to them.

pub mod acp;
pub mod convert;
pub mod openapi;
pub mod server;
