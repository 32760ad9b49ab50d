//! What WebFetch makes of an answer's body, by content type: HTML through a readability pass
//! (`dom_smoothie`, a port of Mozilla's readability.js: the page's main article, without
//! navigation, comments, sidebars and ads) and then to Markdown (`htmd`, with scripts, styles,
//! navigation, headers, footers, asides, forms and frames left out); JSON, XML and text as
//! they are; PDF through a reader in a confined child process ([`crate::sandbox::pdf_text`]);
//! anything else (images, archives, binaries) refused with `EGRESS_DENIED` reason
//! `unsupported_content`.
//!
//! The readability pass keeps its article when it found one of at least
//! [`MIN_ARTICLE_CHARS`] characters of text; otherwise (short pages, pages without an
//! article, pages over [`MAX_READABILITY_ELEMENTS`] elements) the whole page is converted,
//! minus the furniture tags.

use crate::egress::{EgressRefusal, RefusalReason};

/// Tags whose content is page furniture or code, not the page's text.
const SKIPPED_TAGS: &[&str] = &[
    "script", "style", "noscript", "template", "head", "nav", "header", "footer", "aside", "form",
    "iframe", "svg", "canvas", "button", "select",
];

/// Text an article must have for the readability pass to keep it.
pub const MIN_ARTICLE_CHARS: usize = 200;
/// Pages with more elements than this skip the readability pass (bounded work).
pub const MAX_READABILITY_ELEMENTS: usize = 50_000;

/// How a body is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Html,
    Text,
    /// Read by [`crate::sandbox::pdf_text::extract`], never in the server process.
    Pdf,
}

/// The kind of a content type, or why it is refused. A missing type is text when the body is
/// valid UTF-8 without NUL bytes.
pub fn kind_of(content_type: Option<&str>, body: &[u8]) -> Result<Kind, EgressRefusal> {
    let refused = |what: &str| {
        EgressRefusal::new(
            RefusalReason::UnsupportedContent,
            format!("WebFetch reads HTML, JSON, XML, text and PDF, not {what}"),
        )
    };
    match content_type {
        Some("text/html" | "application/xhtml+xml") => Ok(Kind::Html),
        Some("application/pdf" | "application/x-pdf") => Ok(Kind::Pdf),
        Some("application/octet-stream") if body.starts_with(b"%PDF-") => Ok(Kind::Pdf),
        Some(t)
            if t.starts_with("text/")
                || t == "application/json"
                || t == "application/xml"
                || t == "application/javascript"
                || t.ends_with("+json")
                || t.ends_with("+xml") =>
        {
            Ok(Kind::Text)
        }
        Some(other) => Err(refused(&format!("`{other}`"))),
        None if !body.contains(&0) && std::str::from_utf8(body).is_ok() => {
            let head = String::from_utf8_lossy(&body[..body.len().min(512)]).to_ascii_lowercase();
            if head.contains("<html") || head.contains("<!doctype html") {
                Ok(Kind::Html)
            } else {
                Ok(Kind::Text)
            }
        }
        None if body.starts_with(b"%PDF-") => Ok(Kind::Pdf),
        None => Err(refused("a binary answer without a content type")),
    }
}

/// The readable text of an HTML or text body. Blocking (HTML parsing): run it off the
/// executor. PDF is not read here (see [`Kind::Pdf`]).
pub fn to_text(kind: Kind, body: &[u8]) -> Result<String, EgressRefusal> {
    let text = String::from_utf8_lossy(body);
    match kind {
        Kind::Text => Ok(text.into_owned()),
        Kind::Pdf => Err(EgressRefusal::new(
            RefusalReason::UnsupportedContent,
            "PDF is read only in a confined child process",
        )),
        Kind::Html => match article(&text) {
            Some((title, content)) => {
                let body = markdown(&content)?;
                Ok(if title.trim().is_empty() {
                    body
                } else {
                    format!("# {}\n\n{body}", title.trim())
                })
            }
            None => markdown(&text),
        },
    }
}

/// The page's main article (title and HTML), when the readability pass finds one large
/// enough.
fn article(html: &str) -> Option<(String, String)> {
    let config = dom_smoothie::Config {
        max_elements_to_parse: MAX_READABILITY_ELEMENTS,
        ..Default::default()
    };
    let mut readability = dom_smoothie::Readability::new(html, None, Some(config)).ok()?;
    let article = readability.parse().ok()?;
    (article.text_content.trim().chars().count() >= MIN_ARTICLE_CHARS)
        .then(|| (article.title, article.content.to_string()))
}

/// HTML to Markdown without the furniture tags.
fn markdown(html: &str) -> Result<String, EgressRefusal> {
    htmd::HtmlToMarkdown::builder()
        .skip_tags(SKIPPED_TAGS.to_vec())
        .build()
        .convert(html)
        .map_err(|error| {
            EgressRefusal::new(
                RefusalReason::UnsupportedContent,
                "the HTML could not be converted",
            )
            .with_detail(error.to_string())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types_decide_how_a_body_is_read() {
        let table: &[(Option<&str>, &[u8], Option<Kind>)] = &[
            (Some("text/html"), b"<p>x</p>", Some(Kind::Html)),
            (Some("application/json"), b"{}", Some(Kind::Text)),
            (Some("application/ld+json"), b"{}", Some(Kind::Text)),
            (Some("text/plain"), b"x", Some(Kind::Text)),
            (Some("application/pdf"), b"%PDF-1.7", Some(Kind::Pdf)),
            (None, b"%PDF-1.4\n%\xe2\xe3", Some(Kind::Pdf)),
            (Some("image/png"), b"\x89PNG", None),
            (Some("application/octet-stream"), b"x", None),
            (
                Some("application/octet-stream"),
                b"%PDF-1.5",
                Some(Kind::Pdf),
            ),
            (None, b"<!DOCTYPE html><html></html>", Some(Kind::Html)),
            (None, b"plain words", Some(Kind::Text)),
            (None, b"\x00\x01\x02", None),
        ];
        for (content_type, body, expected) in table {
            let got = kind_of(*content_type, body);
            match expected {
                Some(kind) => assert_eq!(got.as_ref().ok(), Some(kind), "{content_type:?}"),
                None => assert_eq!(
                    got.unwrap_err().reason,
                    RefusalReason::UnsupportedContent,
                    "{content_type:?}"
                ),
            }
        }
    }

    #[test]
    fn the_readability_pass_keeps_the_article_and_drops_the_rest() {
        let paragraph = "Egress brokers decide every outbound request of a multi-tenant \
            server: they resolve names once, pin the checked addresses and record what left. ";
        let html = format!(
            "<html><head><title>The egress broker</title></head><body>\
             <div class='sidebar'><ul><li><a href='/a'>Related one</a></li>\
             <li><a href='/b'>Related two</a></li></ul></div>\
             <div class='comments'><p>first!!! spam comment</p></div>\
             <article><h1>The egress broker</h1><p>{p}</p><p>{p}</p><p>{p}</p>\
             <p>See <a href='https://docs.rs/'>docs.rs</a>.</p></article>\
             <div class='share social'><a href='/share'>Share this</a></div></body></html>",
            p = paragraph
        );
        let text = to_text(Kind::Html, html.as_bytes()).unwrap();
        assert!(text.starts_with("# The egress broker"), "{text}");
        assert!(text.contains("pin the checked addresses"), "{text}");
        assert!(text.contains("[docs.rs](https://docs.rs/)"), "{text}");
        for gone in ["Related one", "spam comment", "Share this"] {
            assert!(!text.contains(gone), "{gone} in {text}");
        }
    }

    #[test]
    fn html_becomes_markdown_without_scripts_or_navigation() {
        let html = b"<html><head><title>t</title><style>p{}</style></head><body>\
            <nav><a href='/'>Home</a></nav><h1>Docs</h1><p>Read <a href='https://docs.rs/'>\
            this</a>.</p><script>steal()</script><footer>(c)</footer></body></html>";
        let text = to_text(Kind::Html, html).unwrap();
        assert!(text.contains("# Docs"), "{text}");
        assert!(text.contains("[this](https://docs.rs/)"), "{text}");
        for gone in ["steal", "Home", "(c)", "p{}"] {
            assert!(!text.contains(gone), "{gone} in {text}");
        }
    }
}
