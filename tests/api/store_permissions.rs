//! Store test of a run's permission state (its live grants and the session's mode override,
//! read together); part of the shared store suite in `store.rs`, run on SQLite and Postgres.

use norma::ids::{ApprovalId, GrantId, SessionId, TenantId};
use norma::permission::PermissionMode;
use norma::store::{
    ApprovalDecision, ApprovalStatus, GrantScope, ModeOverride, NewGrant, PermissionState, Store,
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
