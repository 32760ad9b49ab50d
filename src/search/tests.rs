use super::*;

fn settings(
    backend: Option<SearchBackendKind>,
    endpoint: Option<&str>,
    key: Option<&str>,
) -> SearchSettings {
    SearchSettings {
        backend,
        endpoint: endpoint.map(str::to_owned),
        api_key: key.map(|k| SecretString::from(k.to_owned())),
        ..SearchSettings::default()
    }
}

#[test]
fn nothing_configured_means_no_backend_with_a_reason() {
    let backends = SearchBackends::from_settings(&SearchSettings::default()).expect("empty");
    assert_eq!(backends.for_tenant("acme").unwrap_err(), NO_BACKEND);
}

#[test]
fn misconfigured_backends_are_errors_naming_the_setting() {
    use SearchBackendKind::*;
    for (bad, expected) in [
        (settings(Some(Searxng), None, None), "needs `endpoint`"),
        (
            settings(Some(Searxng), Some("http://s"), Some("k")),
            "takes no `api_key`",
        ),
        (settings(Some(Brave), None, None), "needs `api_key`"),
        (settings(Some(Brave), None, Some("  ")), "needs `api_key`"),
        (settings(None, Some("http://s"), None), "`backend` is not"),
        (settings(None, None, Some("k")), "`backend` is not"),
        (
            settings(Some(Searxng), Some("ftp://s"), None),
            "http(s) URL",
        ),
        (
            settings(Some(Searxng), Some("not a url"), None),
            "search.endpoint",
        ),
        (
            settings(Some(Searxng), Some("http://u:p@s/"), None),
            "credentials",
        ),
    ] {
        let error = SearchBackends::from_settings(&bad).expect_err(expected);
        assert!(error.contains(expected), "{error} (wanted {expected})");
    }
    let mut tenant = SearchSettings::default();
    tenant.tenants.insert(
        "acme".into(),
        SearchBackendSettings {
            endpoint: Some("http://s".into()),
            ..Default::default()
        },
    );
    let error = SearchBackends::from_settings(&tenant).expect_err("tenant without backend");
    assert!(error.contains("search.tenants.acme"), "{error}");
}

#[test]
fn tenants_replace_the_servers_backend() {
    let mut both = settings(
        Some(SearchBackendKind::Searxng),
        Some("http://10.0.0.5:8080/"),
        None,
    );
    both.tenants.insert(
        "acme".into(),
        SearchBackendSettings {
            backend: Some(SearchBackendKind::Brave),
            api_key: Some(SecretString::from("token".to_owned())),
            ..Default::default()
        },
    );
    let backends = SearchBackends::from_settings(&both).expect("valid");
    assert_eq!(backends.for_tenant("acme").expect("acme").name(), "brave");
    assert_eq!(
        backends.for_tenant("globex").expect("server").name(),
        "searxng"
    );
    assert!(!format!("{backends:?}").contains("token\""), "{backends:?}");
}

#[test]
fn searxng_requests_json_and_parses_results() {
    let backend = searxng::Searxng::new(url::Url::parse("http://10.0.0.5:8080/sx/").unwrap());
    let request = backend.request(&SearchQuery {
        query: "rust & axum".into(),
        count: 3,
    });
    assert_eq!(
        request.url.as_str(),
        "http://10.0.0.5:8080/sx/search?q=rust+%26+axum&format=json&pageno=1"
    );
    let hits = backend
        .parse(br#"{"query":"q","results":[{"url":"https://docs.rs/axum","title":"axum","content":"A <b>web</b> framework","engine":"x"}]}"#)
        .expect("parse");
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].url, "https://docs.rs/axum");
    assert!(backend.parse(b"<html>").is_err());
}

#[test]
fn brave_sends_the_token_and_parses_web_results() {
    let backend =
        brave::Brave::new(url::Url::parse(brave::DEFAULT_ENDPOINT).unwrap(), "tok").unwrap();
    let request = backend.request(&SearchQuery {
        query: "tokio".into(),
        count: 5,
    });
    assert_eq!(request.url.query(), Some("q=tokio&count=5"));
    assert_eq!(request.headers["x-subscription-token"], "tok");
    assert!(request.headers["x-subscription-token"].is_sensitive());
    let hits = backend
        .parse(br#"{"type":"search","web":{"results":[{"url":"https://tokio.rs","title":"Tokio","description":"An <strong>async</strong> runtime"}]}}"#)
        .expect("parse");
    assert_eq!(hits[0].snippet, "An <strong>async</strong> runtime");
    assert!(
        backend
            .parse(br#"{"type":"search"}"#)
            .expect("no web")
            .is_empty()
    );
}

#[test]
fn plain_strips_tags_and_entities_and_cuts() {
    assert_eq!(
        plain("An <strong>async</strong>\n  runtime &amp; more", 100),
        "An async runtime & more"
    );
    assert_eq!(plain("abcdef", 3), "abc…");
}
