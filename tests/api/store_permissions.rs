//! Store test of a run's permission state (its live grants and the session's mode override,
//! read together); part of the shared store suite in `store.rs`, run on SQLite and Postgres.

use norma::ids::{ApprovalId, GrantId, RunId, SessionId, TenantId};
use norma::limits::{Limit, RunCaps};
use norma::permission::PermissionMode;
use norma::store::{
    ApprovalDecision, ApprovalStatus, GrantScope, ModeOverride, NewGrant, NewIdempotencyKey,
    NewRun, PermissionState, RunStatus, Store, StoreError,
};
use std::sync::Arc;

use crate::store::new_session;
use crate::store_limits::approval;

/// Asks for and allows a call in `session`, granting `rule` with `scope`; the grant's id.
async fn grant(
    store: &Arc<dyn Store>,
    tenant: &TenantId,
    session: &SessionId,
    scope: GrantScope,
    rule: &str,
    expires_at: Option<chrono::DateTime<chrono::Utc>>,
) -> GrantId {
    let approval = store
        .create_approval(
            tenant,
            approval(session, chrono::Duration::minutes(5)),
            u32::MAX,
        )
        .await
        .unwrap();
    let id = GrantId::generate();
    store
        .decide_approval(
            tenant,
            session,
            &ApprovalId::from_string(approval.id),
            ApprovalDecision {
                status: ApprovalStatus::Allowed,
                decided_by: "test".into(),
                reason: None,
                updated_input: None,
                grant: Some(NewGrant {
                    id: id.clone(),
                    session: session.clone(),
                    scope,
                    rule: rule.into(),
                    created_by: "test".into(),
                    approval_id: None,
                    expires_at,
                }),
            },
        )
        .await
        .unwrap()
        .expect("decided");
    id
}

pub async fn permission_state_reads_live_grants_and_the_mode_override_together(
    store: Arc<dyn Store>,
) {
    let (acme, other) = (TenantId::new("acme"), TenantId::new("other"));
    let a = new_session(&store, "acme").await;
    let b = new_session(&store, "acme").await;
    let elsewhere = new_session(&store, "other").await;
    let nothing = PermissionState {
        grants: vec![],
        mode: None,
    };
    assert_eq!(store.permission_state(&acme, &a).await.unwrap(), nothing);

    let past = Some(chrono::Utc::now() - chrono::Duration::minutes(1));
    grant(&store, &acme, &a, GrantScope::Once, "Bash(ls:*)", None).await;
    let revoked = grant(&store, &acme, &a, GrantScope::Session, "Write", None).await;
    assert!(store.revoke_grant(&acme, &revoked).await.unwrap());
    grant(&store, &acme, &a, GrantScope::Session, "Edit", past).await;
    grant(&store, &acme, &b, GrantScope::Tenant, "Read", None).await;
    grant(&store, &acme, &b, GrantScope::Session, "Glob", None).await;
    grant(&store, &other, &elsewhere, GrantScope::Tenant, "Grep", None).await;
    // Grants only: no override yet.
    let state = store.permission_state(&acme, &a).await.unwrap();
    let rules: Vec<&str> = state.grants.iter().map(|g| g.rule.as_str()).collect();
    assert_eq!(
        rules,
        ["Bash(ls:*)", "Read"],
        "live grants of the session and the tenant"
    );
    assert_eq!(state.mode, None);

    let plan = ModeOverride {
        mode: PermissionMode::Plan,
        previous: Some(PermissionMode::AcceptEdits),
    };
    store.set_mode_override(&acme, &a, plan).await.unwrap();
    let state = store.permission_state(&acme, &a).await.unwrap();
    assert_eq!(
        state,
        PermissionState {
            grants: store.list_grants(&acme, &a).await.unwrap(),
            mode: Some(plan),
        }
    );
    assert_eq!(state.grants.len(), 2);
    // An override without grants: the other tenant's session has no override and one grant.
    store.set_mode_override(&acme, &b, plan).await.unwrap();
    assert_eq!(
        store.permission_state(&acme, &b).await.unwrap().mode,
        Some(plan)
    );
    let theirs = store.permission_state(&other, &elsewhere).await.unwrap();
    assert_eq!((theirs.grants.len(), theirs.mode), (1, None));
    // Another tenant naming acme's session sees nothing of it: no override, none of acme's
    // grants (only its own tenant-wide one, which applies to any session it names).
    let foreign = store.permission_state(&other, &a).await.unwrap();
    let rules: Vec<&str> = foreign.grants.iter().map(|g| g.rule.as_str()).collect();
    assert_eq!((rules, foreign.mode), (vec!["Grep"], None));
    assert_eq!(foreign.grants, store.list_grants(&other, &a).await.unwrap());
}

/// A run started at once comes with the permission state it starts from (on Postgres read by
/// the admitting statement): the same state `permission_state` reads, the run as `get_run`
/// reads it; another tenant's session starts nothing, a full tenant nothing more, and with an
/// idempotency key the key names the run.
pub async fn a_started_run_comes_with_the_permission_state_it_starts_from(store: Arc<dyn Store>) {
    let (acme, other) = (TenantId::new("acme"), TenantId::new("other"));
    let a = new_session(&store, "acme").await;
    let b = new_session(&store, "acme").await;
    let elsewhere = new_session(&store, "other").await;
    grant(&store, &acme, &a, GrantScope::Session, "Bash(ls:*)", None).await;
    grant(&store, &acme, &b, GrantScope::Tenant, "Read", None).await;
    grant(&store, &other, &elsewhere, GrantScope::Tenant, "Grep", None).await;
    let plan = ModeOverride {
        mode: PermissionMode::Plan,
        previous: Some(PermissionMode::Default),
    };
    store.set_mode_override(&acme, &a, plan).await.unwrap();
    let caps = RunCaps {
        concurrent_runs: 2,
        queued_per_session: 1,
        queued_per_tenant: 1,
    };
    let claim = ("replica-a", std::time::Duration::from_secs(60));
    let run = |session: &SessionId| NewRun {
        id: RunId::generate(),
        session: session.clone(),
        prompt: "go".into(),
    };

    let started = store
        .start_run(&acme, run(&a), claim, caps, None)
        .await
        .unwrap();
    let stored = store
        .get_run(&acme, &a, &RunId::from_string(started.run.id.clone()))
        .await
        .unwrap()
        .expect("the run is stored");
    assert_eq!(started.run, stored);
    assert_eq!(started.run.status, RunStatus::Running);
    assert_eq!(started.run.owner.as_deref(), Some("replica-a"));
    let rules: Vec<&str> = started
        .permissions
        .grants
        .iter()
        .map(|g| g.rule.as_str())
        .collect();
    assert_eq!(
        (rules, started.permissions.mode),
        (vec!["Bash(ls:*)", "Read"], Some(plan))
    );
    assert_eq!(
        started.permissions,
        store.permission_state(&acme, &a).await.unwrap()
    );

    // Another tenant's session: nothing started, nothing of it read.
    let foreign = store.start_run(&other, run(&a), claim, caps, None).await;
    assert!(matches!(foreign, Err(StoreError::NotFound)), "{foreign:?}");
    assert_eq!(store.list_runs(&acme, &a, None, 10).await.unwrap().len(), 1);

    // With a key: the key names the run, and the state is the session's own (no override).
    let key = NewIdempotencyKey {
        scope: format!("prompt:{b}"),
        key: "k-1".into(),
        request_sha256: "0".repeat(64),
        max_live: 100,
    };
    let keyed = store
        .start_run(&acme, run(&b), claim, caps, Some(&key))
        .await
        .unwrap();
    assert_eq!(keyed.permissions.mode, None);
    assert_eq!(
        keyed.permissions,
        store.permission_state(&acme, &b).await.unwrap()
    );
    let named = store
        .idempotency_key(&acme, &key.scope, &key.key)
        .await
        .unwrap()
        .expect("the key is recorded");
    assert_eq!(named.resource_id, keyed.run.id);

    // The tenant's two running runs fill its cap: a third is refused, and not stored.
    let refused = store.start_run(&acme, run(&b), claim, caps, None).await;
    assert!(
        matches!(&refused, Err(StoreError::TenantLimit(limit)) if limit.limit == Limit::ConcurrentRuns),
        "{refused:?}"
    );
    assert_eq!(store.list_runs(&acme, &b, None, 10).await.unwrap().len(), 1);
}
