//! The process's allocator: chosen at its first allocator call, from
//! `ALLOCMUX_ALLOCATOR`, and never changed after.
//!
//! Nothing here runs on the allocation hot path: the choice installs a hook
//! table ([`crate::hooks::install`]), whose functions the exports jump to.
//! In a direct shim (`allocmux_format::direct`) the exports are one
//! table's hooks, which make the choice at a thread's first call out of
//! line (`Body::process_ready`), and the choice is that table's.

use core::sync::atomic::{AtomicU8, Ordering::Acquire, Ordering::Release};

use allocmux_format::Backend;
use allocmux_format::profile::StackMode;
use allocmux_format::settings::Level;
use allocmux_recorder as recorder;

use crate::config;

/// How this process's allocator calls are served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Choice {
    /// The allocator that serves them.
    pub backend: Backend,
    /// Whether they are recorded: not with `ALLOCMUX_RECORD=off` or in a
    /// forwarding direct shim, where the shim only forwards to the backend
    /// and writes nothing, nor in secure execution (setuid, setgid or file
    /// capabilities), where it only forwards to glibc.
    pub recorded: bool,
    /// Whether they are recorded at the sampled level only (the stack
    /// sample, nothing counted per call; `ALLOCMUX_RECORD=sampled`, the
    /// default when serving `/debug/pprof`).
    pub sampled_level: bool,
}

impl Choice {
    /// The choice as one byte, never 0 (which means "not chosen yet").
    const fn encode(self) -> u8 {
        let backend = match self.backend {
            Backend::Jemalloc => 2,
            Backend::Mimalloc => 3,
            Backend::System => 1,
            Backend::Next => 4,
        };
        match (self.recorded, self.sampled_level) {
            (false, _) => backend | UNRECORDED_BIT,
            (true, true) => backend | SAMPLED_LEVEL_BIT,
            (true, false) => backend,
        }
    }

    const fn decode(code: u8) -> Choice {
        let backend = match code & !(UNRECORDED_BIT | SAMPLED_LEVEL_BIT) {
            1 => Backend::System,
            2 => Backend::Jemalloc,
            3 => Backend::Mimalloc,
            4 => Backend::Next,
            // Codes come from `encode` only.
            _ => unreachable!(),
        };
        Choice {
            backend,
            recorded: code & UNRECORDED_BIT == 0,
            sampled_level: code & SAMPLED_LEVEL_BIT != 0,
        }
    }
}

const UNCHOSEN: u8 = 0;
const UNRECORDED_BIT: u8 = 0x80;
const SAMPLED_LEVEL_BIT: u8 = 0x40;

static CHOICE: AtomicU8 = AtomicU8::new(UNCHOSEN);

/// The process's choice, made at the first call (which may come before the
/// shim's constructor: other libraries' constructors allocate too).
#[inline]
pub fn current() -> Choice {
    match CHOICE.load(Acquire) {
        UNCHOSEN => choose(),
        code => Choice::decode(code),
    }
}

/// Whether this process's calls are recorded (and profiles written).
#[inline]
pub fn recorded() -> bool {
    current().recorded
}

#[cold]
#[inline(never)]
fn choose() -> Choice {
    let secure = config::secure_execution();
    // A direct shim's exports are one table's hooks, whatever the
    // environment says: its backend and mode are that table's, and so is
    // whether it records (in secure execution too, unrecorded).
    let direct = crate::hooks::direct_table();
    let settings = config::settings();
    let (backend, recorded, sampled_level) = match direct {
        Some(t) => (t.backend, t.recorded && !secure, t.sampled_level),
        None if secure => (Backend::System, false, false),
        None => (
            settings.allocator,
            settings.level != Level::Off,
            settings.level == Level::Sampled,
        ),
    };
    let choice = Choice {
        backend,
        recorded,
        sampled_level: recorded && sampled_level,
    };
    // Before the recorder's first allocation of its own (its stack tables).
    crate::heap::follow_backend(choice.backend);
    if choice.recorded {
        // Before the first recorded call draws its thread's first gap:
        // calls can come before the constructor (another library's
        // constructor allocating), and a gap drawn with the default mean
        // would leave hundreds of them untimed under `ALLOCMUX_TIME_SAMPLE=1`.
        recorder::set_time_sample_mean(settings.time_sample_mean);
    }
    // Install first, publish last: a first call that finds the choice made
    // (`FIRST_CALL` trampolines read `current()` and then jump through the
    // slots) must find the hooks in place, or it would jump to itself.
    // Threads racing here read the same environment and make the same
    // choice, and installing is idempotent, so no lock is needed.
    let sample_mode = StackMode::Sample {
        mean_bytes: settings.sample_bytes,
    };
    let mode = match (choice.recorded, direct) {
        (false, _) => StackMode::Off,
        // The sampled level is the stack sample.
        (true, _) if choice.sampled_level => sample_mode,
        (true, None) => settings.stacks,
        (true, Some(t)) if t.sampled => sample_mode,
        (true, Some(_)) => StackMode::Off,
    };
    // An exact prefix is recorded by the hooks of exact mode (see
    // `configure`); a direct shim's are its table's, sampled.
    let exact_first = match (mode, direct) {
        (StackMode::Sample { .. }, None) if !choice.sampled_level => settings.exact_first,
        _ => 0,
    };
    if mode != StackMode::Off {
        recorder::stacks::configure(mode, true, exact_first);
    }
    let hooks_mode = if exact_first > 0 {
        StackMode::Exact
    } else {
        mode
    };
    crate::hooks::install(choice, hooks_mode);
    CHOICE.store(choice.encode(), Release);
    if choice.backend == Backend::Next {
        // After publishing: `dlsym` may allocate, and its calls must find
        // the choice made (and the arena serving them), not choose again.
        crate::backend::resolve_next();
    }
    choice
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for backend in Backend::BUILT_IN.into_iter().chain([Backend::Next]) {
            for (recorded, sampled_level) in [(true, false), (true, true), (false, false)] {
                let c = Choice {
                    backend,
                    recorded,
                    sampled_level,
                };
                assert_ne!(c.encode(), UNCHOSEN);
                assert_eq!(Choice::decode(c.encode()), c);
            }
        }
    }
}
