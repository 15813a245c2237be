//! The binary's allocator, and how the agent's process returns what it frees.
//!
//! Recovery decodes a few small strings per event and the write path encodes as many; with the
//! system allocator that churn was a fifth to a third of `transcript inspect`'s wall time
//! (measured on the turn mix), with mimalloc it is not. The runtime library leaves the
//! allocator to its embedder; this binary is one.
//!
//! mimalloc keeps freed memory mapped for a while (its purge delay) and commits whole arenas
//! ahead: fine for a sweep or a recovery, which reuse it at once, but an agent streaming a
//! 15 MiB answer then peaked near 150 MB, most of it freed buffers still resident. The agent
//! commands return freed memory at once and commit arenas on demand instead (measured in
//! docs/internals/benchmarks.md: ~107 MB, within 64 MiB + 3× the answer); everything else keeps the
//! defaults, which the sweep's and recovery's speed was measured with.

use libmimalloc_sys as mi;

#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_arena_eager_commit` in the bundled mimalloc headers (`c_src/mimalloc/v3` is the
/// sys crate's default build, `v2` its feature; the same number in both), which the sys crate
/// does not name. Its default in both is 2 (eager on overcommitting systems).
const ARENA_EAGER_COMMIT: mi::mi_option_t = 4;
const ARENA_EAGER_COMMIT_DEFAULTS: [std::ffi::c_long; 1] = [2];
/// `mi_option_purge_delay` (ms before freed memory is returned): 1000 in v3, 10 in v2.
const PURGE_DELAY: mi::mi_option_t = 15;
const PURGE_DELAY_DEFAULTS: [std::ffi::c_long; 2] = [1000, 10];

/// Makes this process return freed memory at once and commit arenas only as used. Each option
/// is set only where it still holds the bundled header's default: an option the environment
/// set (`MIMALLOC_PURGE_DELAY`, ...) is left as the user asked, and a renumbered option in a
/// future mimalloc is left alone rather than another one changed.
#[allow(unsafe_code)] // the workspace's one exception (ARCHITECTURE.md): mimalloc's option API is C
pub(crate) fn return_freed_memory_promptly() {
    if cfg!(feature = "system-allocator") {
        return;
    }
    let options: [(mi::mi_option_t, &[std::ffi::c_long], std::ffi::c_long); 2] =
        [(PURGE_DELAY, &PURGE_DELAY_DEFAULTS, 0), (ARENA_EAGER_COMMIT, &ARENA_EAGER_COMMIT_DEFAULTS, 0)];
    for (option, defaults, value) in options {
        // SAFETY: mimalloc's option calls take plain integers and may be called at any time;
        // nothing else in this process sets options concurrently (called once, at start-up).
        unsafe {
            if defaults.contains(&mi::mi_option_get(option)) {
                mi::mi_option_set(option, value);
            }
        }
    }
}
