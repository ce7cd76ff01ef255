//! The emulator's clock: virtual by default (it moves only when told to, so a Durable Timer of a
//! day elapses in a millisecond of test), or the wall clock on request.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use triggers_sdk::wire::GoTime;

/// Which clock timers run on: the emulator's setting, a scenario's `emulator.clock` (`virtual`,
/// `real`) and `up --clock`, one type for the three.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum ClockMode {
    /// Time moves only by `advance` (or by auto-advance when every run is idle).
    #[default]
    #[cfg_attr(
        feature = "clap",
        value(help = "Timers fire only on `triggers-lab advance` (or --auto-advance)")
    )]
    Virtual,
    /// The wall clock; timers fire when they are due.
    #[cfg_attr(feature = "clap", value(help = "Timers fire on the wall clock"))]
    Real,
}

impl std::fmt::Display for ClockMode {
    /// The name a scenario file and `up --clock` use: `virtual`, `real`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ClockMode::Virtual => "virtual",
            ClockMode::Real => "real",
        })
    }
}

#[derive(Debug)]
pub(crate) struct Clock {
    mode: ClockMode,
    /// Virtual time (unused in real mode).
    now: GoTime,
}

impl Clock {
    pub(crate) fn new(mode: ClockMode) -> Self {
        Clock {
            mode,
            now: GoTime::now(),
        }
    }

    pub(crate) fn mode(&self) -> ClockMode {
        self.mode
    }

    pub(crate) fn now(&self) -> GoTime {
        match self.mode {
            ClockMode::Virtual => self.now,
            ClockMode::Real => GoTime::now(),
        }
    }

    /// Moves virtual time to `to` if that is later.
    pub(crate) fn advance_to(&mut self, to: GoTime) {
        if self.mode == ClockMode::Virtual && to.unix_nanos() > self.now.unix_nanos() {
            self.now = to;
        }
    }
}

/// `t + ms` milliseconds.
pub(crate) fn plus_ms(t: GoTime, ms: u64) -> GoTime {
    t.saturating_add(Duration::from_millis(ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn virtual_time_moves_only_when_told() {
        let mut c = Clock::new(ClockMode::Virtual);
        let t0 = c.now();
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(c.now(), t0);
        c.advance_to(plus_ms(t0, 3_600_000));
        assert_eq!(c.now().unix_nanos() - t0.unix_nanos(), 3_600_000_000_000);
        c.advance_to(t0);
        assert_eq!(c.now().unix_nanos() - t0.unix_nanos(), 3_600_000_000_000);
    }
}
