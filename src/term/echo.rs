//! Keys typed while a turn runs are not echoed: the terminal's echo would write them (and a
//! Ctrl-C as `^C`) into the spinner's line, and the spinner, which redraws its line in place,
//! would then leave a stale copy of itself on the screen. The line editor and the question
//! prompts switch the terminal to their own mode while they read, and back.

use std::fs::File;

use nix::sys::termios::{tcgetattr, tcsetattr, LocalFlags, SetArg, Termios};

/// The terminal with echo off, restored when dropped.
pub struct EchoOff {
    tty: File,
    saved: Termios,
}

impl EchoOff {
    /// Turns echo off on the controlling terminal; `None` when there is none (or it cannot).
    pub fn new() -> Option<EchoOff> {
        let tty = File::open("/dev/tty").ok()?;
        let saved = tcgetattr(&tty).ok()?;
        let mut quiet = saved.clone();
        quiet
            .local_flags
            .remove(LocalFlags::ECHO | LocalFlags::ECHOCTL);
        tcsetattr(&tty, SetArg::TCSANOW, &quiet).ok()?;
        Some(EchoOff { tty, saved })
    }
}

impl Drop for EchoOff {
    fn drop(&mut self) {
        let _ = tcsetattr(&self.tty, SetArg::TCSANOW, &self.saved);
    }
}
