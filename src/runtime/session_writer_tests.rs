//! Tests of the session writer's lingering writes.

use super::*;
use crate::run_event::AssistantDelta;
use crate::store::NewSession;

fn delta(text: &str) -> RunEvent {
    RunEvent::AssistantDelta(AssistantDelta { text: text.into() })
}

struct Fixture {
    _dir: tempfile::TempDir,
    store: Arc<dyn Store>,
    tenant: TenantId,
    session: SessionId,
    writer: Arc<SessionWriter>,
}

impl Fixture {
    async fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("w.db").display());
        let store = crate::store::connect(&url, &crate::store::ConnectOptions::default())
            .await
            .unwrap();
        let (tenant, session) = (TenantId::new("acme"), SessionId::generate());
        store
            .create_session(NewSession {
                id: session.clone(),
                tenant: tenant.clone(),
                config: serde_json::json!({}),
            })
            .await
            .unwrap();
        let writer = SessionWriter::new(
            store.clone(),
            Arc::new(EventBus::default()),
            tenant.clone(),
            session.clone(),
        );
        Self {
            _dir: dir,
            store,
            tenant,
            session,
            writer,
        }
    }

    async fn stored(&self) -> Vec<crate::store::EventRecord> {
        self.store
            .list_events(&self.tenant, &self.session, 0, 100)
            .await
            .unwrap()
    }

    async fn texts(&self) -> Vec<String> {
        self.stored()
            .await
            .iter()
            .map(|e| e.payload.value()["text"].as_str().unwrap().to_owned())
            .collect()
    }
}

/// Events pushed after a durable write took the buffer wait a whole linger of their own,
/// so the run's next durable write takes them (one transaction), and what nobody takes is
/// written by the run's task one linger after it was pushed, while the run goes on.
#[tokio::test]
async fn the_linger_counts_from_the_oldest_buffered_event() {
    let f = Fixture::new().await;
    let writer = &f.writer;
    let linger = Duration::from_millis(300);
    let events = writer
        .linger_for(linger, async {
            let started = tokio::time::Instant::now();
            writer.push_event(delta("a"));
            tokio::time::sleep(linger / 2).await;
            writer.write(vec![], vec![delta("w1")]).await.unwrap();
            writer.push_event(delta("b"));
            // Past the first event's linger: `b` must not have been written alone.
            tokio::time::sleep_until(started + linger * 5 / 4).await;
            writer.write(vec![], vec![delta("w2")]).await.unwrap();
            writer.push_event(delta("c"));
            tokio::time::sleep(linger * 2).await;
            f.stored().await
        })
        .await;
    let texts: Vec<String> = events
        .iter()
        .map(|e| e.payload.value()["text"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(texts, ["a", "w1", "b", "w2", "c"]);
    // One transaction writes one `created_at`.
    let at = |i: usize| events[i].created_at;
    assert_eq!(at(0), at(1), "`a` went with the first write");
    assert_eq!(at(2), at(3), "`b` went with the second write, not alone");
    assert_ne!(at(1), at(2));
    assert_ne!(at(3), at(4), "`c` was written after its linger");
}

/// An event pushed from another task while the run waits for something else wakes the
/// run's task: it is written one linger later, not only when the run next wakes up.
#[tokio::test]
async fn an_event_pushed_from_elsewhere_is_written_while_the_run_waits() {
    let f = Fixture::new().await;
    let linger = Duration::from_millis(100);
    let seen = f
        .writer
        .linger_for(linger, async {
            let writer = f.writer.clone();
            tokio::spawn(async move { writer.push_event(delta("progress")) });
            tokio::time::sleep(linger * 4).await;
            f.texts().await
        })
        .await;
    assert_eq!(seen, ["progress"]);
}

/// What is buffered when the run's loop ends is written before `lingering` returns, and
/// a write that was going on when it ended is finished, not dropped.
#[tokio::test]
async fn the_end_of_the_run_writes_what_is_left() {
    let f = Fixture::new().await;
    let linger = Duration::from_millis(50);
    f.writer
        .linger_for(linger, async {
            f.writer.push_event(delta("early"));
            // The linger's write starts now; the loop ends while it may still go on.
            tokio::time::sleep(linger + Duration::from_millis(1)).await;
            f.writer.push_event(delta("late"));
        })
        .await;
    assert_eq!(f.texts().await, ["early", "late"]);
    f.writer
        .linger_for(linger, async { f.writer.push_event(delta("last")) })
        .await;
    assert_eq!(f.texts().await, ["early", "late", "last"]);
    // The writer outlives the run without its task's waker.
    assert!(f.writer.pending.lock().unwrap().waker.is_none());
}
