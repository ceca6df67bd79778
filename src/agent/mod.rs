//! Running agent commands: framing their output into bounded lines (and, in the daemon,
//! spawning and supervising them).

mod framing;

pub use framing::{Frame, LineFramer};
