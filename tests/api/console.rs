//! The web console's static files: served without auth, with a strict CSP, no inline script.

use crate::helpers::{Backend, TestApp};

#[tokio::test]
async fn console_assets_are_served_with_a_strict_csp() {
    let app = TestApp::spawn(Backend::Sqlite).await.expect("sqlite app");
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let redirect = client.get(app.url("/console")).send().await.unwrap();
    assert_eq!(redirect.status(), 308);
    assert_eq!(redirect.headers()["location"], "/console/");

    let page = client.get(app.url("/console/")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let headers = page.headers().clone();
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let csp = headers["content-security-policy"].to_str().unwrap();
    for directive in [
        "default-src 'none'",
        "script-src 'self'",
        "connect-src 'self'",
        "frame-ancestors 'none'",
    ] {
        assert!(csp.contains(directive), "{csp}");
    }
    assert!(
        !csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"),
        "{csp}"
    );
    assert_eq!(headers["x-content-type-options"], "nosniff");
    assert_eq!(headers["referrer-policy"], "no-referrer");
    let html = page.text().await.unwrap();
    // Every script is a same-origin file: no inline script, no CDN.
    for tag in html.split("<script").skip(1) {
        assert!(
            tag.trim_start()
                .starts_with("type=\"module\" src=\"/console/"),
            "{tag}"
        );
    }
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "no external URL"
    );

    for (path, kind) in [
        ("/console/app.js", "text/javascript"),
        ("/console/api.js", "text/javascript"),
        ("/console/stream.js", "text/javascript"),
        ("/console/transcript.js", "text/javascript"),
        ("/console/panels.js", "text/javascript"),
        ("/console/style.css", "text/css"),
        ("/console/favicon.svg", "image/svg+xml"),
    ] {
        let response = client.get(app.url(path)).send().await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
        assert!(
            response.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with(kind),
            "{path}"
        );
        assert!(response.headers().contains_key("content-security-policy"));
        let body = response.text().await.unwrap();
        assert!(
            !body.contains("https://") || path.ends_with(".svg"),
            "{path}"
        );
    }
    let missing = client
        .get(app.url("/console/nope.js"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
}
