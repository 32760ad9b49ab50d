//! The outbox claim on both stores: a worker's free slots are shared among tenants — each
//! tenant's oldest due deliveries, at most its room, in turns (the tenant with the fewest in
//! flight first) — and the next wake-up never points at deliveries left due because their
//! tenant had no room (which would make the worker spin); a tenant's pending deliveries past
//! `webhooks.max_pending_per_tenant` are failed unsent, those due soonest kept.

use crate::store::new_session;
use norma::ids::{SessionId, TenantId};
use norma::store::{DeliveryShares, DueDelivery, NewWebhook, Store, WebhookCaps};
use norma::webhooks::WebhookEvent;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

const LEASE: Duration = Duration::from_secs(60);

/// Subscribes the tenant to `session.closed` and closes `n` of its sessions, one after the
/// other (one delivery each); the sessions in the order closed.
async fn closed_sessions(store: &Arc<dyn Store>, tenant: &str, n: usize) -> Vec<SessionId> {
    let id = TenantId::new(tenant);
    if store.list_webhooks(&id, None).await.unwrap().is_empty() {
        store
            .create_webhook(
                &id,
                NewWebhook {
                    id: format!("wh_{tenant}"),
                    session: None,
                    url: "https://hooks.example/in".into(),
                    events: vec![WebhookEvent::SessionClosed],
                    secret: norma::webhooks::generate_secret(),
                },
                WebhookCaps {
                    per_tenant: 5,
                    per_session: 5,
                },
            )
            .await
            .unwrap()
            .unwrap();
    }
    let mut closed = Vec::new();
    for _ in 0..n {
        let session = new_session(store, tenant).await;
        store.close_session(&id, &session).await.unwrap().unwrap();
        closed.push(session);
    }
    closed
}

fn shares(per_tenant: u32, busy: &[(&str, u32)]) -> DeliveryShares {
    DeliveryShares {
        per_tenant,
        busy: busy
            .iter()
            .map(|(tenant, n)| (TenantId::new(*tenant), *n))
            .collect::<HashMap<_, _>>(),
    }
}

/// The claimed deliveries' sessions per tenant.
fn by_tenant(claimed: &[DueDelivery]) -> HashMap<String, Vec<String>> {
    let mut tenants: HashMap<String, Vec<String>> = HashMap::new();
    for due in claimed {
        tenants
            .entry(due.tenant.as_str().to_owned())
            .or_default()
            .push(due.session_id.clone().unwrap());
    }
    for sessions in tenants.values_mut() {
        sessions.sort();
    }
    tenants
}

fn ids(sessions: &[SessionId]) -> Vec<String> {
    let mut ids: Vec<String> = sessions.iter().map(|s| s.as_str().to_owned()).collect();
    ids.sort();
    ids
}

pub(crate) async fn deliveries_are_claimed_in_turns_within_each_tenants_room(
    store: Arc<dyn Store>,
) {
    // The noisy tenant's backlog is older than everyone else's deliveries.
    let noisy = closed_sessions(&store, "noisy", 6).await;
    let quiet = closed_sessions(&store, "quiet", 2).await;
    let late = closed_sessions(&store, "late", 1).await;

    // Four free slots, two per tenant: every tenant's first delivery comes before anyone's
    // second, so the noisy tenant gets its two oldest, the others one each.
    let claimed = store
        .claim_webhook_deliveries(LEASE, 4, &shares(2, &[]))
        .await
        .unwrap();
    let got = by_tenant(&claimed);
    assert_eq!(got["noisy"], ids(&noisy[..2]), "its oldest two: {got:?}");
    assert_eq!(got["quiet"], ids(&quiet[..1]), "{got:?}");
    assert_eq!(got["late"], ids(&late[..1]), "{got:?}");
    assert!(
        claimed
            .iter()
            .all(|due| due.attempt == 1 && due.url.starts_with("https://"))
    );

    // With those in flight the noisy tenant has no room left: only the quiet one's second.
    let busy = shares(2, &[("noisy", 2), ("quiet", 1), ("late", 1)]);
    let claimed = store
        .claim_webhook_deliveries(LEASE, 8, &busy)
        .await
        .unwrap();
    assert_eq!(
        by_tenant(&claimed),
        HashMap::from([("quiet".to_owned(), ids(&quiet[1..]))])
    );

    // What is left due belongs to a tenant without room: the next wake-up is when a claim's
    // lease ends, not now (a wake-up now would find nothing to claim, again and again).
    let now = chrono::Utc::now();
    let next = store.next_webhook_due(now).await.unwrap().unwrap();
    assert!(
        next > now + chrono::Duration::seconds(30),
        "{next} vs {now}"
    );

    // One of the noisy tenant's finishes: it gets one more, its oldest left.
    let claimed = store
        .claim_webhook_deliveries(
            LEASE,
            8,
            &shares(2, &[("noisy", 1), ("quiet", 2), ("late", 1)]),
        )
        .await
        .unwrap();
    assert_eq!(
        by_tenant(&claimed),
        HashMap::from([("noisy".to_owned(), ids(&noisy[2..3]))])
    );

    // Fewest in flight goes first: one free slot, the late tenant (nothing in flight) wins
    // over the noisy tenant's older delivery.
    let fresh = closed_sessions(&store, "late", 1).await;
    let claimed = store
        .claim_webhook_deliveries(LEASE, 1, &shares(4, &[("noisy", 3), ("quiet", 2)]))
        .await
        .unwrap();
    assert_eq!(
        by_tenant(&claimed),
        HashMap::from([("late".to_owned(), ids(&fresh))])
    );
}

pub(crate) async fn a_tenants_backlog_past_its_cap_is_failed_unsent(store: Arc<dyn Store>) {
    let noisy = closed_sessions(&store, "noisy", 5).await;
    let quiet = closed_sessions(&store, "quiet", 2).await;
    // The noisy tenant's oldest is in flight: neither counted nor touched.
    let claimed = store
        .claim_webhook_deliveries(LEASE, 1, &shares(1, &[]))
        .await
        .unwrap();
    assert_eq!(claimed[0].session_id.as_deref(), Some(noisy[0].as_str()));

    // Two pending kept per tenant: the noisy one's two due soonest; its last two fail.
    assert_eq!(store.trim_webhook_backlogs(2).await.unwrap(), 2);
    let log = store
        .list_webhook_deliveries(&TenantId::new("noisy"), "wh_noisy", None, 100)
        .await
        .unwrap();
    let status_of = |session: &SessionId| {
        let delivery = log
            .iter()
            .find(|d| d.session_id.as_deref() == Some(session.as_str()))
            .unwrap();
        (
            delivery.status.as_str(),
            delivery.attempt_log.last().cloned(),
        )
    };
    for kept in &noisy[..3] {
        assert_eq!(status_of(kept), ("pending", None));
    }
    for failed in &noisy[3..] {
        let (status, note) = status_of(failed);
        assert_eq!(status, "failed");
        let note = note.unwrap();
        assert_eq!(
            (note.attempt, note.error.as_deref()),
            (0, Some("WEBHOOK_BACKLOG"))
        );
    }
    let quiet_log = store
        .list_webhook_deliveries(&TenantId::new("quiet"), "wh_quiet", None, 100)
        .await
        .unwrap();
    assert_eq!(quiet_log.len(), quiet.len());
    assert!(quiet_log.iter().all(|d| d.status.as_str() == "pending"));
    // Within the cap now: nothing more.
    assert_eq!(store.trim_webhook_backlogs(2).await.unwrap(), 0);
}
