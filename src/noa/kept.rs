//! The view caches of Noa sessions between their runs (see [`super::cache`], *Across runs*):
//! a run's Noa session hands its cache back here when the run ends, and the session's next
//! run takes it when the stored Noa state still has the version it was kept with — so the
//! first request of a run costs what changed since the last run, not the whole history.
//!
//! Bounded: at most `max_sessions` caches and `max_bytes` estimated bytes in all; the least
//! recently kept goes first, and a cache bigger than the whole budget is not kept. Losing a
//! cache only costs its session one rebuild. The lock is taken twice per run of a Noa
//! session (take and hand back), never per request.

use super::cache::ViewCache;
use crate::ids::SessionId;
use std::collections::HashMap;
use std::sync::Mutex;

/// Sessions kept by default.
pub const DEFAULT_SESSIONS: usize = 256;
/// Estimated bytes kept by default.
pub const DEFAULT_BYTES: usize = 64 << 20;

/// The kept caches (see the module doc).
#[derive(Debug)]
pub struct KeptViews {
    max_sessions: usize,
    max_bytes: usize,
    inner: Mutex<Kept>,
}

#[derive(Debug, Default)]
struct Kept {
    entries: HashMap<SessionId, Entry>,
    bytes: usize,
    /// Incremented per hand-back: the order of use.
    clock: u64,
}

#[derive(Debug)]
struct Entry {
    version: i64,
    cache: ViewCache,
    bytes: usize,
    kept_at: u64,
}

impl Default for KeptViews {
    fn default() -> Self {
        Self::new(DEFAULT_SESSIONS, DEFAULT_BYTES)
    }
}

impl KeptViews {
    pub fn new(max_sessions: usize, max_bytes: usize) -> Self {
        Self {
            max_sessions,
            max_bytes,
            inner: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The cache kept for `session` at state `version` (removed from here; a cache kept at
    /// another version is dropped), marked for adoption.
    pub fn take(&self, session: &SessionId, version: i64) -> Option<ViewCache> {
        let entry = {
            let mut kept = self.lock();
            let entry = kept.entries.remove(session)?;
            kept.bytes -= entry.bytes;
            entry
        };
        (entry.version == version).then(|| {
            let mut cache = entry.cache;
            cache.adopt();
            cache
        })
    }

    /// Keeps `cache` for `session` at state `version`, making room as the bounds require.
    pub fn put(&self, session: SessionId, version: i64, cache: ViewCache) {
        let bytes = cache.bytes();
        if bytes > self.max_bytes || self.max_sessions == 0 {
            return;
        }
        let dropped = {
            let mut kept = self.lock();
            let mut dropped = Vec::new();
            if let Some(old) = kept.entries.remove(&session) {
                kept.bytes -= old.bytes;
                dropped.push(old);
            }
            while kept.entries.len() >= self.max_sessions || kept.bytes + bytes > self.max_bytes {
                let Some(oldest) = kept
                    .entries
                    .iter()
                    .min_by_key(|(_, entry)| entry.kept_at)
                    .map(|(session, _)| session.clone())
                else {
                    break;
                };
                let old = kept.entries.remove(&oldest).expect("just found");
                kept.bytes -= old.bytes;
                dropped.push(old);
            }
            kept.clock += 1;
            let kept_at = kept.clock;
            kept.bytes += bytes;
            kept.entries.insert(
                session,
                Entry {
                    version,
                    cache,
                    bytes,
                    kept_at,
                },
            );
            dropped
        };
        drop(dropped); // freed outside the lock
    }

    /// Caches kept and their estimated bytes (tests, diagnostics).
    pub fn usage(&self) -> (usize, usize) {
        let kept = self.lock();
        (kept.entries.len(), kept.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(n: u32) -> SessionId {
        SessionId::from_string(format!("ses_{n}"))
    }

    #[test]
    fn a_cache_is_taken_once_and_only_at_its_version() {
        let kept = KeptViews::default();
        kept.put(session(1), 3, ViewCache::default());
        assert!(kept.take(&session(1), 4).is_none(), "another version");
        assert!(kept.take(&session(1), 3).is_none(), "dropped by the miss");
        kept.put(session(1), 3, ViewCache::default());
        assert!(kept.take(&session(1), 3).is_some());
        assert!(kept.take(&session(1), 3).is_none(), "taken once");
        assert_eq!(kept.usage(), (0, 0));
    }

    #[test]
    fn the_least_recently_kept_goes_first_when_a_bound_is_reached() {
        let kept = KeptViews::new(2, usize::MAX);
        for n in 1..=3 {
            kept.put(session(n), 1, ViewCache::default());
        }
        assert_eq!(kept.usage().0, 2);
        assert!(kept.take(&session(1), 1).is_none(), "evicted");
        assert!(kept.take(&session(3), 1).is_some());

        let none = KeptViews::new(8, 0);
        none.put(session(1), 1, ViewCache::default());
        assert!(none.take(&session(1), 1).is_some(), "an empty cache fits");
    }
}
