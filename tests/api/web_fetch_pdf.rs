//! WebFetch of PDF answers: the text comes from a reader in a confined child process
//! (`sandbox::pdf_text`); a malformed document or a decompression bomb costs that child only
//! and ends in `EGRESS_DENIED` reason `unsupported_content`, and without an enforced sandbox
//! PDF is refused rather than read in the server.

use crate::helpers::{Backend, TestApp, count};
use crate::web_fetch::{fetching, reason, run};
use axum::routing::get;
use serde_json::json;
use std::io::Write;

/// A one-page PDF showing `text` in Helvetica, with a correct cross-reference table.
fn pdf_with_text(text: &str) -> Vec<u8> {
    let content = format!("BT /F1 24 Tf 72 700 Td ({text}) Tj ET");
    let objects = [
        "<< /Type /Catalog /Pages 2 0 R >>".to_owned(),
        "<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_owned(),
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R \
         /Resources << /Font << /F1 5 0 R >> >> >>"
            .to_owned(),
        format!(
            "<< /Length {} >>\nstream\n{content}\nendstream",
            content.len()
        ),
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>"
            .to_owned(),
    ];
    assemble(objects.iter().map(|o| o.as_bytes().to_vec()).collect())
}

/// A PDF whose page content is a Flate stream inflating to `inflated` zero bytes.
fn pdf_bomb(inflated: usize) -> Vec<u8> {
    let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    let chunk = vec![0u8; 1 << 20];
    for _ in 0..inflated / chunk.len() {
        encoder.write_all(&chunk).unwrap();
    }
    let deflated = encoder.finish().unwrap();
    let mut stream = format!(
        "<< /Length {} /Filter /FlateDecode >>\nstream\n",
        deflated.len()
    )
    .into_bytes();
    stream.extend_from_slice(&deflated);
    stream.extend_from_slice(b"\nendstream");
    assemble(vec![
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_vec(),
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R >>".to_vec(),
        stream,
    ])
}

/// Numbers `objects` from 1 and writes the file with its xref table and trailer.
fn assemble(objects: Vec<Vec<u8>>) -> Vec<u8> {
    let mut pdf = b"%PDF-1.4\n".to_vec();
    let mut offsets = Vec::new();
    for (i, body) in objects.iter().enumerate() {
        offsets.push(pdf.len());
        pdf.extend_from_slice(format!("{} 0 obj\n", i + 1).as_bytes());
        pdf.extend_from_slice(body);
        pdf.extend_from_slice(b"\nendobj\n");
    }
    let xref = pdf.len();
    pdf.extend_from_slice(
        format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).as_bytes(),
    );
    for offset in offsets {
        pdf.extend_from_slice(format!("{offset:010} 00000 n \n").as_bytes());
    }
    pdf.extend_from_slice(
        format!(
            "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
            objects.len() + 1
        )
        .as_bytes(),
    );
    pdf
}

/// A loopback site serving a readable PDF, one sent as `application/octet-stream`, a broken
/// one and a bomb.
async fn pdf_site() -> String {
    let pdf = |body: Vec<u8>| move || async move { ([("content-type", "application/pdf")], body) };
    let router = axum::Router::new()
        .route(
            "/doc.pdf",
            get(pdf(pdf_with_text("Quarterly egress report"))),
        )
        .route(
            "/broken.pdf",
            get(pdf(b"%PDF-1.7\n1 0 obj << /Type".to_vec())),
        )
        .route("/bomb.pdf", get(pdf(pdf_bomb(1200 << 20))))
        .route(
            "/untyped",
            get(|| async { pdf_with_text("Served as octet-stream") }),
        );
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(axum::serve(listener, router).into_future());
    base
}

async fn server(configure: impl FnOnce(&mut norma::config::Settings)) -> TestApp {
    TestApp::spawn_with(Backend::Sqlite, |s| {
        s.egress.allow_private_cidrs = vec!["127.0.0.0/8".parse().unwrap()];
        s.egress.fetch_timeout_seconds = 10;
        s.egress.fetch_max_bytes = 8 << 20;
        configure(s);
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn pdf_text_is_read_in_a_confined_child_and_hostile_documents_cost_only_that_child() {
    let base = pdf_site().await;
    let app = server(|_| {}).await;
    let urls = [
        format!("{base}/doc.pdf"),
        format!("{base}/untyped"),
        format!("{base}/broken.pdf"),
        format!("{base}/bomb.pdf"),
    ];
    let config = fetching(&urls, json!({"allow": ["domain:127.0.0.1"]}), json!({}));
    let (results, _) = run(&app, &config, &format!("Read {}", urls.join(" "))).await;
    assert_eq!(results.len(), 4, "{results:#?}");
    for (result, wanted) in results[..2]
        .iter()
        .zip(["Quarterly egress report", "Served as octet-stream"])
    {
        assert_eq!(result["is_error"], false, "{result}");
        let text = result["content"].as_str().unwrap();
        assert!(text.contains(wanted), "{text}");
    }
    for result in &results[2..] {
        assert_eq!(reason(result), "unsupported_content", "{result}");
        let text = result["content"].as_str().unwrap();
        assert!(text.contains("the PDF gave no text"), "{text}");
    }

    // The server still serves another tenant.
    let token = app.token("other");
    let id = app
        .create_session(
            "other",
            &json!({"model": {"script": {"turns": [{"text": "hi"}]}}}),
        )
        .await;
    assert!(app.prompt(&token, &id, "hello").await.status().is_success());
    let events = app
        .wait_for_events(&token, &id, |events| count(events, "terminal") >= 1)
        .await;
    let terminal = events.iter().find(|e| e["type"] == "terminal").unwrap();
    assert_eq!(terminal["payload"]["reason"], "end_turn", "{terminal}");
}

#[tokio::test]
async fn without_an_enforced_sandbox_pdf_is_refused_not_read_in_the_server() {
    use norma::sandbox::SandboxPart;
    let base = pdf_site().await;
    let app = server(|s| {
        s.sandbox.disable = vec![SandboxPart::Rlimits];
        s.sandbox.require = vec![];
    })
    .await;
    let url = format!("{base}/doc.pdf");
    let config = fetching(
        std::slice::from_ref(&url),
        json!({"allow": ["domain:127.0.0.1"]}),
        json!({}),
    );
    let (results, _) = run(&app, &config, &format!("Read {url}")).await;
    assert_eq!(reason(&results[0]), "unsupported_content", "{}", results[0]);
    let text = results[0]["content"].as_str().unwrap();
    assert!(text.contains("`rlimits` is not enforced"), "{text}");
}
