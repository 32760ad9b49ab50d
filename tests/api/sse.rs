//! SSE over real HTTP under back-pressure: a client that stops reading falls behind, is told to
//! reconnect with its last id, and never slows the run or a client that keeps reading.

use crate::helpers::TestApp;
use crate::on_both_backends;
use eventsource_stream::Eventsource;
use futures::StreamExt;
use norma::api::events::STALL_LIMIT;
use serde_json::{Value, json};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::{Instant, timeout_at};

on_both_backends! {
    a_stalled_client_is_told_to_reconnect_without_slowing_others =>
        a_stalled_client_is_told_to_reconnect_without_slowing_others;
    streams_opened_while_a_run_writes_see_every_event_once =>
        streams_opened_while_a_run_writes_see_every_event_once;
}

/// Text deltas of the run (the scripted provider streams 12 characters per delta).
const DELTAS: usize = 40_000;

/// The `i`-th 12-character delta, so every delta's content can be checked.
fn delta_text(i: usize) -> String {
    format!("{i:011}|")
}

/// One SSE event as a client sees it.
#[derive(Clone, Debug, PartialEq)]
struct SseEvent {
    id: Option<i64>,
    kind: String,
    data: Value,
}

/// A session of `acme` whose one run streams `deltas` text deltas ([`delta_text`]), and the
/// URL of its stream.
async fn session_streaming_deltas(app: &TestApp, deltas: usize) -> (String, String) {
    let text: String = (0..deltas).map(delta_text).collect();
    let id = app
        .create_session(
            "acme",
            &json!({"model": {"script": {"turns": [{"text": text}]}}}),
        )
        .await;
    let url = app.url(&format!("/v1/sessions/{id}/stream"));
    (id, url)
}

/// A client that reads as fast as it can: every event up to `terminal` (or up to a `reconnect`).
async fn read_until_terminal(
    client: reqwest::Client,
    url: String,
    token: String,
    last_event_id: Option<i64>,
    ready: Option<tokio::sync::oneshot::Sender<()>>,
) -> Vec<SseEvent> {
    let mut request = client.get(url).bearer_auth(token);
    if let Some(last) = last_event_id {
        request = request.header("last-event-id", last.to_string());
    }
    let response = request.send().await.expect("stream request");
    assert_eq!(response.status(), 200);
    if let Some(ready) = ready {
        let _ = ready.send(());
    }
    let mut stream = response.bytes_stream().eventsource();
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match timeout_at(deadline, stream.next()).await {
            Ok(Some(Ok(event))) => {
                let kind = event.event.clone();
                seen.push(SseEvent {
                    id: event.id.parse().ok(),
                    kind: kind.clone(),
                    data: serde_json::from_str(&event.data).expect("data is JSON"),
                });
                if kind == "terminal" || kind == "reconnect" {
                    return seen;
                }
            }
            Ok(Some(Err(error))) => panic!("stream error after {} events: {error}", seen.len()),
            Ok(None) => panic!("stream ended after {} events without terminal", seen.len()),
            Err(_) => panic!("no terminal within 60 s; {} events seen", seen.len()),
        }
    }
}

/// Opens a stream with a raw socket (tiny receive buffer), reads only the response head and
/// returns the socket plus any body bytes that came with the head.
async fn open_stalled(app: &TestApp, token: &str, id: &str) -> (TcpStream, Vec<u8>) {
    let socket = TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4096).expect("SO_RCVBUF");
    let mut stream = socket.connect(app.addr).await.expect("connect");
    let request = format!(
        "GET /v1/sessions/{id}/stream HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\n\
         Accept: text/event-stream\r\nConnection: close\r\n\r\n",
        app.addr
    );
    stream
        .write_all(request.as_bytes())
        .await
        .expect("send request");
    let mut received = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    let head_end = loop {
        if let Some(end) = find(&received, b"\r\n\r\n") {
            break end;
        }
        let mut buf = [0u8; 1024];
        let n = timeout_at(deadline, stream.read(&mut buf))
            .await
            .expect("response head within 10 s")
            .expect("read head");
        assert!(n > 0, "connection closed before the response head");
        received.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&received[..head_end]).to_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains("transfer-encoding: chunked"), "{head}");
    (stream, received[head_end + 4..].to_vec())
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Decodes an HTTP/1.1 chunked body; `None` until the terminating zero-size chunk arrived.
fn dechunk(mut raw: &[u8]) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line_end = find(raw, b"\r\n")?;
        let size_text = std::str::from_utf8(&raw[..line_end]).expect("chunk size is ASCII");
        let size = usize::from_str_radix(size_text.split(';').next().unwrap().trim(), 16)
            .unwrap_or_else(|_| panic!("bad chunk size line {size_text:?}"));
        raw = &raw[line_end + 2..];
        if size == 0 {
            return Some(body);
        }
        if raw.len() < size + 2 {
            return None;
        }
        body.extend_from_slice(&raw[..size]);
        assert_eq!(&raw[size..size + 2], b"\r\n", "chunk not followed by CRLF");
        raw = &raw[size + 2..];
    }
}

/// Parses an SSE body (comments, i.e. keep-alives, skipped).
fn parse_sse(body: &str) -> Vec<SseEvent> {
    let mut events = Vec::new();
    for block in body.split("\n\n") {
        let (mut id, mut kind, mut data) = (None, None, Vec::new());
        for line in block.lines() {
            if line.starts_with(':') || line.is_empty() {
                continue;
            }
            let (field, value) = line.split_once(':').unwrap_or((line, ""));
            let value = value.strip_prefix(' ').unwrap_or(value);
            match field {
                "id" => id = Some(value.parse::<i64>().expect("numeric id")),
                "event" => kind = Some(value.to_owned()),
                "data" => data.push(value.to_owned()),
                other => panic!("unexpected SSE field {other:?}"),
            }
        }
        if let Some(kind) = kind {
            events.push(SseEvent {
                id,
                kind,
                data: serde_json::from_str(&data.join("\n")).expect("data is JSON"),
            });
        }
    }
    events
}

/// A stream reads its backlog up to the session's last event as it read the session and gets
/// the rest live: streams opened (and reopened with `Last-Event-ID`) at any point of a run each
/// see every event after their start once, in order, up to `terminal`; another tenant naming
/// the session is refused without disturbing them.
async fn streams_opened_while_a_run_writes_see_every_event_once(app: TestApp) {
    let token = app.token("acme");
    let (id, url) = session_streaming_deltas(&app, 3_000).await;
    let client = reqwest::Client::new();
    assert_eq!(app.prompt(&token, &id, "go").await.status(), 202);
    let mut readers = Vec::new();
    for i in 0..8i64 {
        let after = (i % 2 == 1).then_some(i * 7);
        readers.push((
            after,
            tokio::spawn(read_until_terminal(
                client.clone(),
                url.clone(),
                token.clone(),
                after,
                None,
            )),
        ));
        if i == 3 {
            let foreign = client
                .get(&url)
                .bearer_auth(app.token("mallory"))
                .send()
                .await
                .unwrap();
            assert_eq!(foreign.status(), 404);
        }
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    for (after, reader) in readers {
        let seen = reader.await.expect("reader task");
        let ids: Vec<i64> = seen.iter().map(|e| e.id.expect("id")).collect();
        let terminal = *ids.last().unwrap();
        assert_eq!(seen.last().unwrap().kind, "terminal");
        assert_eq!(
            ids,
            (after.unwrap_or(0) + 1..=terminal).collect::<Vec<_>>(),
            "every event after {after:?} once, in order"
        );
    }
}

async fn a_stalled_client_is_told_to_reconnect_without_slowing_others(app: TestApp) {
    let token = app.token("acme");
    let (id, url) = session_streaming_deltas(&app, DELTAS).await;
    // No overall request timeout: the loops below carry their own deadlines.
    let client = reqwest::Client::new();

    // Both clients are subscribed (response head received) before the run starts.
    let (mut stalled, mut stalled_bytes) = open_stalled(&app, &token, &id).await;
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let reader = tokio::spawn(read_until_terminal(
        client.clone(),
        url.clone(),
        token.clone(),
        None,
        Some(ready_tx),
    ));
    ready_rx.await.expect("reader connected");
    let started = Instant::now();
    assert_eq!(app.prompt(&token, &id, "go").await.status(), 202);

    // The reading client gets the whole run, in order, without gap, while the other one stalls.
    let seen = reader.await.expect("reader task");
    let run_took = started.elapsed();
    let kinds: Vec<&str> = seen.iter().map(|e| e.kind.as_str()).collect();
    assert!(
        !kinds.contains(&"reconnect"),
        "the reading client was told to reconnect after {} events",
        seen.len()
    );
    let first = seen[0].id.expect("id");
    let terminal = seen.last().unwrap().id.expect("id");
    let ids: Vec<i64> = seen.iter().map(|e| e.id.expect("id")).collect();
    assert_eq!(
        ids,
        (first..=terminal).collect::<Vec<_>>(),
        "contiguous ids"
    );
    assert_eq!(seen[0].kind, "run_started");
    assert_eq!(seen.last().unwrap().data["payload"]["reason"], "end_turn");
    let deltas: Vec<&str> = seen
        .iter()
        .filter(|e| e.kind == "assistant_delta")
        .map(|e| e.data["payload"]["text"].as_str().expect("delta text"))
        .collect();
    assert_eq!(deltas.len(), DELTAS);
    for (i, delta) in deltas.iter().enumerate() {
        assert_eq!(*delta, delta_text(i), "delta {i} in order");
    }
    // The run finished while the stalled client still had not read: the store agrees.
    let stored: Value = app
        .get(
            &format!("/v1/sessions/{id}/events?after={}", terminal - 1),
            &token,
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(stored["events"][0]["type"], "terminal");
    assert_eq!(stored["events"][0]["seq"], terminal);

    // Still not reading, the stalled client stays stalled for longer than the server tolerates
    // from a client that is behind.
    tokio::time::sleep(STALL_LIMIT + Duration::from_millis(500)).await;

    // Now drain the stalled socket: it got a prefix of the run, then `reconnect`, then the end.
    let deadline = Instant::now() + Duration::from_secs(20);
    let body = loop {
        if let Some(body) = dechunk(&stalled_bytes) {
            break body;
        }
        let mut buf = vec![0u8; 64 * 1024];
        let n = timeout_at(deadline, stalled.read(&mut buf))
            .await
            .expect("the stalled stream ends within 20 s of reading it")
            .expect("read stalled stream");
        assert!(
            n > 0,
            "connection closed before the end of the chunked body"
        );
        stalled_bytes.extend_from_slice(&buf[..n]);
    };
    let late = parse_sse(&String::from_utf8(body).expect("UTF-8 body"));
    let (reconnect, delivered) = late.split_last().expect("the stalled client got events");
    assert_eq!(
        reconnect.kind,
        "reconnect",
        "the stalled client's last event (after {} events)",
        delivered.len()
    );
    assert_eq!(reconnect.id, None);
    let last_delivered = delivered
        .last()
        .expect("events before reconnect")
        .id
        .unwrap();
    assert_eq!(reconnect.data, json!({ "last_event_id": last_delivered }));
    let delivered_ids: Vec<i64> = delivered.iter().map(|e| e.id.expect("id")).collect();
    assert_eq!(
        delivered_ids,
        (first..=last_delivered).collect::<Vec<_>>(),
        "the stalled client's ids are contiguous from the first"
    );
    assert!(
        last_delivered < terminal,
        "the stalled client fell behind the run"
    );
    // What it did get is exactly what the reading client got.
    for event in delivered {
        assert_eq!(event, &seen[(event.id.unwrap() - first) as usize]);
    }
    eprintln!(
        "{:?}: run of {} events took {run_took:?}; stalled client got {} before reconnect",
        app.backend,
        seen.len(),
        delivered.len()
    );

    // Resuming from its last id delivers the rest exactly once, in order, up to terminal.
    let rest = read_until_terminal(client, url, token, Some(last_delivered), None).await;
    let rest_ids: Vec<i64> = rest.iter().map(|e| e.id.expect("id")).collect();
    assert_eq!(
        rest_ids,
        ((last_delivered + 1)..=terminal).collect::<Vec<_>>()
    );
    for event in &rest {
        assert_eq!(event, &seen[(event.id.unwrap() - first) as usize]);
    }
}
