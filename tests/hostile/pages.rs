//! A tenant whose model writes the largest turns it may (1 MiB of text each) reads its
//! transcript and history in pages of about 4 MiB, not of 1,000 rows: a page read at once was
//! up to 1,000 such rows, gigabytes held by the server for one request.

use crate::fake_llm::{FakeLlm, Reply, anthropic as an};
use crate::server::ServerProcess;
use crate::support::*;
use serde_json::{Value, json};
use std::time::Duration;

const ATTACKER: &str = "big-pages";
const WITHIN: Duration = Duration::from_secs(60);
/// The text of each turn: just under a response's 1 MiB of text.
const TURN_BYTES: usize = 1000 * 1024;
const TURNS: usize = 6;

/// Every item of `list` (`events` or `messages`), page by page until an empty one; the size
/// in bytes of each page's body.
async fn read_all(server: &ServerProcess, session: &str, list: &str) -> (Vec<Value>, Vec<usize>) {
    let token = server.token(ATTACKER);
    let (mut items, mut sizes) = (Vec::new(), Vec::new());
    loop {
        let after = items
            .last()
            .map_or(0, |item: &Value| item["seq"].as_i64().unwrap());
        let response = server
            .client
            .get(server.url(&format!(
                "/v1/sessions/{session}/{list}?after={after}&limit=1000"
            )))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let body = response.bytes().await.unwrap();
        let page: Value = serde_json::from_slice(&body).unwrap();
        let page = page[list].as_array().unwrap().clone();
        if page.is_empty() {
            return (items, sizes);
        }
        sizes.push(body.len());
        items.extend(page);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_turns_are_read_in_pages_bounded_by_bytes() {
    let fake = FakeLlm::start().await;
    for turn in 0..TURNS {
        // From the second run on, the history is past the compaction threshold: the run
        // first asks for a summary.
        if turn > 0 {
            fake.push(Reply::sse(an::text_turn("summary")));
        }
        let text = char::from(b'a' + turn as u8).to_string().repeat(TURN_BYTES);
        fake.push(Reply::sse(an::text_turn(&text)));
    }
    let url = fake.url();
    let server = start_server_with_model(&url).await;
    let session = create_session(&server, ATTACKER, &json!({})).await;
    for _ in 0..TURNS {
        prompt_and_wait(&server, ATTACKER, &session, "go", WITHIN).await;
    }

    // Every page at most 4 MiB and the row that crossed it (1 MiB), however many rows were
    // asked for; together the whole history, in order.
    let bound = 5 * 1024 * 1024 + 64 * 1024;
    // (The history holds the runs' compaction summaries besides the prompts and answers.)
    let (messages, sizes) = read_all(&server, &session, "messages").await;
    let seqs: Vec<i64> = messages
        .iter()
        .map(|m| m["seq"].as_i64().unwrap())
        .collect();
    assert_eq!(
        seqs,
        (1..=seqs.len() as i64).collect::<Vec<_>>(),
        "in order, none lost"
    );
    let answers = messages
        .iter()
        .filter(|m| {
            m["content"][0]["text"]
                .as_str()
                .is_some_and(|t| t.len() == TURN_BYTES)
        })
        .count();
    assert_eq!(answers, TURNS, "every turn's answer");
    assert!(
        sizes.len() >= 2 && sizes.iter().all(|&size| size <= bound),
        "{sizes:?}"
    );

    let (events, sizes) = read_all(&server, &session, "events").await;
    let seqs: Vec<i64> = events.iter().map(|e| e["seq"].as_i64().unwrap()).collect();
    assert_eq!(
        seqs,
        (1..=seqs.len() as i64).collect::<Vec<_>>(),
        "in order, none lost"
    );
    let answers = events
        .iter()
        .filter(|e| e["type"] == "assistant_message")
        .count();
    assert!(answers >= TURNS, "{answers} answers");
    assert!(
        sizes.len() >= 3 && sizes.iter().all(|&size| size <= bound),
        "{sizes:?}"
    );
    assert_still_serves(&server).await;
}
