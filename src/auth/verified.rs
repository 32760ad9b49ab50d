//! Tokens already verified, remembered per worker thread, so a client that sends the same
//! bearer token with every request (the usual case: create a session, open its stream, prompt,
//! answer approvals…) has its signature checked and its claims parsed once, not on every
//! request.
//!
//! What makes a remembered token safe to accept again:
//! - the key is the whole token text (its signature included), and only a token that passed
//!   the full verification is remembered: a request cannot add an entry with a token the
//!   server did not sign, so nothing an unauthenticated client sends grows the cache;
//! - each entry keeps the token's `exp` and `nbf` and is used only while they hold (with the
//!   verifier's leeway), exactly as the full check would judge them now; past them the token
//!   is verified afresh, which gives the precise error (`TOKEN_EXPIRED` …);
//! - each entry names the verifier (every [`super::JwtVerifier`] has an id of its own) and the
//!   generation of its keys, which a JWKS reload advances: a token is never accepted by another
//!   verifier, nor after the keys it was checked against were replaced;
//! - the cache is bounded ([`MAX_TOKENS`] entries per thread, tokens up to
//!   [`MAX_TOKEN_BYTES`]); a full cache is emptied and fills again.
//!
//! Per thread, so no lock is taken: a token first seen by another worker thread is verified
//! once more there.

use super::Principal;
use std::cell::RefCell;
use std::collections::HashMap;

/// Entries per thread before the cache is emptied.
pub const MAX_TOKENS: usize = 256;
/// Longer tokens are verified every time (never remembered).
pub const MAX_TOKEN_BYTES: usize = 4096;

/// A verified token's principal and the window in which it stays valid.
#[derive(Clone)]
pub(super) struct Verified {
    pub principal: Principal,
    /// The token's `exp` (seconds since the epoch).
    pub expires: i64,
    /// The token's `nbf`, when it has one.
    pub not_before: Option<i64>,
}

struct Entry {
    verified: Verified,
    verifier: u64,
    generation: u64,
}

thread_local! {
    static TOKENS: RefCell<HashMap<Box<str>, Entry>> = RefCell::new(HashMap::new());
}

/// The principal of `token` when this thread verified it with `verifier` at key
/// `generation` and it is still valid at `now` (with `leeway` seconds).
pub(super) fn lookup(
    token: &str,
    verifier: u64,
    generation: u64,
    now: i64,
    leeway: i64,
) -> Option<Principal> {
    TOKENS.with(|tokens| {
        let tokens = tokens.borrow();
        let entry = tokens.get(token)?;
        let valid = entry.verifier == verifier
            && entry.generation == generation
            && entry.verified.expires >= now.saturating_sub(leeway)
            && entry
                .verified
                .not_before
                .is_none_or(|nbf| nbf <= now.saturating_add(leeway));
        valid.then(|| entry.verified.principal.clone())
    })
}

/// Remembers `token`, just verified by `verifier` at key `generation`.
pub(super) fn remember(token: &str, verifier: u64, generation: u64, verified: Verified) {
    if token.len() > MAX_TOKEN_BYTES {
        return;
    }
    TOKENS.with(|tokens| {
        let mut tokens = tokens.borrow_mut();
        if tokens.len() >= MAX_TOKENS && !tokens.contains_key(token) {
            tokens.clear();
        }
        tokens.insert(
            token.into(),
            Entry {
                verified,
                verifier,
                generation,
            },
        );
    });
}

/// How many tokens this thread remembers (for tests).
#[cfg(test)]
pub(super) fn remembered() -> usize {
    TOKENS.with(|tokens| tokens.borrow().len())
}
