//! Sessions: the log position of each event and the lifecycle rules around the converter.

mod recorder;

pub use recorder::Recorder;
