//! The commands of the `codebuffd` binary, one file each; `main.rs` dispatches to them.

pub mod acp;
pub mod convert;
pub mod doctor;
pub mod install_adapter;
pub mod openapi;
pub mod server;
pub mod signals;
