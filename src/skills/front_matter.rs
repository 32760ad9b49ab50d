//! The front matter of a `SKILL.md`: a small, bounded subset of YAML, parsed by hand so a
//! tenant's text can never make the parser expensive (no anchors, no aliases, no nesting
//! beyond one list level, at most [`MAX_FRONT_MATTER_BYTES`] and [`MAX_FRONT_MATTER_LINES`]).
//!
//! ```text
//! ---
//! name: pdf-forms
//! description: "Fill PDF forms: use when the user asks to fill or flatten a form."
//! tools: [Bash, mcp__pdf__fill]        # or a block list, or `allowed-tools: Read, Grep`
//! ---
//! The instructions, in Markdown.
//! ```
//!
//! Accepted: `key: value` lines at column 0 (plain, `"double"` or `'single'` quoted scalars,
//! `[a, b]` flow lists), block lists (`  - item`) under a key with no value, blank lines and
//! `#` comments. Everything else — indented maps, block scalars (`|`, `>`), anchors, tags,
//! duplicate keys — is refused with the line it is on.

use std::collections::BTreeMap;

/// The most bytes between the opening and closing `---`.
pub const MAX_FRONT_MATTER_BYTES: usize = 8 * 1024;
/// The most lines between the opening and closing `---`.
pub const MAX_FRONT_MATTER_LINES: usize = 64;
/// The most items in one list.
pub const MAX_LIST_ITEMS: usize = 64;

/// A front matter value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    Text(String),
    List(Vec<String>),
}

/// The parsed front matter (keys in their order of appearance are not kept: none depends on
/// it) and the Markdown body after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parsed {
    pub fields: BTreeMap<String, Value>,
    pub body: String,
}

/// Splits `text` into front matter and body and parses the front matter. The error is a
/// message for people, naming the line when there is one.
pub fn parse(text: &str) -> Result<Parsed, String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.split_inclusive('\n');
    match lines.next() {
        Some(first) if trim_eol(first) == "---" => {}
        _ => return Err("must start with a `---` line opening the front matter".into()),
    }
    let mut fields = BTreeMap::new();
    let mut consumed = text.len() - lines.clone().map(str::len).sum::<usize>();
    let mut open_list: Option<String> = None;
    let mut bytes = 0usize;
    for (index, raw) in lines.by_ref().enumerate() {
        consumed += raw.len();
        let number = index + 2;
        let line = trim_eol(raw);
        if line == "---" {
            if let Some(key) = open_list.take() {
                fields.entry(key).or_insert(Value::List(Vec::new()));
            }
            return Ok(Parsed {
                fields,
                body: text[consumed..].to_owned(),
            });
        }
        bytes += raw.len();
        if bytes > MAX_FRONT_MATTER_BYTES || index >= MAX_FRONT_MATTER_LINES {
            return Err(format!(
                "the front matter is longer than {MAX_FRONT_MATTER_LINES} lines or \
                 {MAX_FRONT_MATTER_BYTES} bytes (or its closing `---` is missing)"
            ));
        }
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        if line.starts_with([' ', '\t']) || trimmed.starts_with("- ") || trimmed == "-" {
            let Some(key) = &open_list else {
                return Err(format!("line {number}: nested values are not supported"));
            };
            let Some(item) = trimmed.strip_prefix('-') else {
                return Err(format!(
                    "line {number}: only `- item` lines may follow `{key}:`"
                ));
            };
            let item = scalar(strip_comment(item.trim()), number)?;
            let Value::List(items) = fields
                .entry(key.clone())
                .or_insert_with(|| Value::List(Vec::new()))
            else {
                unreachable!("an open list is a list");
            };
            push_item(items, item, number)?;
            continue;
        }
        if let Some(key) = open_list.take() {
            fields.entry(key).or_insert(Value::List(Vec::new()));
        }
        let Some((key, rest)) = line.split_once(':') else {
            return Err(format!("line {number}: expected `key: value`"));
        };
        if key.is_empty()
            || key.len() > 64
            || !key
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
        {
            return Err(format!("line {number}: `{}` is not a valid key", cut(key)));
        }
        if fields.contains_key(key) {
            return Err(format!("line {number}: `{key}` is given twice"));
        }
        let rest = strip_comment(rest.trim());
        if rest.is_empty() {
            open_list = Some(key.to_owned());
            continue;
        }
        let value = if let Some(inner) = rest.strip_prefix('[') {
            let Some(inner) = inner.strip_suffix(']') else {
                return Err(format!("line {number}: a `[` list must end with `]`"));
            };
            let mut items = Vec::new();
            if !inner.trim().is_empty() {
                for item in split_flow(inner, number)? {
                    push_item(&mut items, scalar(item.trim(), number)?, number)?;
                }
            }
            Value::List(items)
        } else {
            Value::Text(scalar(rest, number)?)
        };
        fields.insert(key.to_owned(), value);
    }
    Err("the front matter has no closing `---` line".into())
}

fn push_item(items: &mut Vec<String>, item: String, number: usize) -> Result<(), String> {
    if items.len() >= MAX_LIST_ITEMS {
        return Err(format!(
            "line {number}: a list holds at most {MAX_LIST_ITEMS} items"
        ));
    }
    items.push(item);
    Ok(())
}

fn trim_eol(line: &str) -> &str {
    line.trim_end_matches('\n').trim_end_matches('\r')
}

fn cut(text: &str) -> String {
    text.chars().take(40).collect()
}

/// Drops a ` # comment` after an unquoted value.
fn strip_comment(value: &str) -> &str {
    if value.starts_with(['"', '\'']) {
        return value;
    }
    match value.find(" #") {
        Some(at) => value[..at].trim_end(),
        None => value,
    }
}

/// Splits a flow list's inside at commas outside quotes.
fn split_flow(inner: &str, number: usize) -> Result<Vec<&str>, String> {
    let mut items = Vec::new();
    let mut quote: Option<char> = None;
    let mut start = 0;
    for (at, c) in inner.char_indices() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, ',') => {
                items.push(&inner[start..at]);
                start = at + 1;
            }
            (None, '[' | ']' | '{' | '}') => {
                return Err(format!("line {number}: nested values are not supported"));
            }
            _ => {}
        }
    }
    if quote.is_some() {
        return Err(format!("line {number}: a quote is not closed"));
    }
    items.push(&inner[start..]);
    Ok(items)
}

/// One scalar: quoted (`"…"` with `\"` and `\\`, or `'…'` with `''`) or plain.
fn scalar(value: &str, number: usize) -> Result<String, String> {
    if let Some(inner) = value.strip_prefix('"') {
        let Some(inner) = inner.strip_suffix('"') else {
            return Err(format!("line {number}: a `\"` quote is not closed"));
        };
        let mut out = String::with_capacity(inner.len());
        let mut chars = inner.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some('"') => out.push('"'),
                    Some('\\') => out.push('\\'),
                    Some('n') => out.push('\n'),
                    Some('t') => out.push('\t'),
                    _ => {
                        return Err(format!(
                            "line {number}: only \\\", \\\\, \\n and \\t escapes are supported"
                        ));
                    }
                },
                '"' => return Err(format!("line {number}: text after a closing quote")),
                c => out.push(c),
            }
        }
        return Ok(out);
    }
    if let Some(inner) = value.strip_prefix('\'') {
        let Some(inner) = inner.strip_suffix('\'') else {
            return Err(format!("line {number}: a `'` quote is not closed"));
        };
        let doubled = inner.replace("''", "");
        if doubled.contains('\'') {
            return Err(format!("line {number}: text after a closing quote"));
        }
        return Ok(inner.replace("''", "'"));
    }
    if value.starts_with(['|', '>', '&', '*', '!', '{', '[', '@', '`']) {
        return Err(format!(
            "line {number}: block scalars, anchors, aliases, tags and maps are not supported"
        ));
    }
    Ok(value.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(value: &str) -> Value {
        Value::Text(value.into())
    }

    #[test]
    fn parses_scalars_lists_and_the_body() {
        let parsed = parse(
            "---\nname: pdf-forms\ndescription: \"Fill: forms \\\"fast\\\"\" \n\
             tools: [Bash, 'mcp__pdf__fill']\nlicense: MIT # a comment\n---\n# Steps\nbody\n",
        )
        .unwrap();
        assert_eq!(parsed.fields["name"], text("pdf-forms"));
        assert_eq!(parsed.fields["description"], text("Fill: forms \"fast\""));
        assert_eq!(
            parsed.fields["tools"],
            Value::List(vec!["Bash".into(), "mcp__pdf__fill".into()])
        );
        assert_eq!(parsed.fields["license"], text("MIT"));
        assert_eq!(parsed.body, "# Steps\nbody\n");
    }

    #[test]
    fn parses_block_lists_and_crlf() {
        let parsed =
            parse("---\r\nname: a\r\ntools:\r\n  - Read\r\n  - \"Glob\"\r\nempty:\r\n---\r\nx")
                .unwrap();
        assert_eq!(
            parsed.fields["tools"],
            Value::List(vec!["Read".into(), "Glob".into()])
        );
        assert_eq!(parsed.fields["empty"], Value::List(vec![]));
        assert_eq!(parsed.body, "x");
    }

    #[test]
    fn refuses_what_it_does_not_support() {
        let cases = [
            ("name: a\n---\n", "must start"),
            ("---\nname: a\n", "no closing"),
            ("---\nmeta:\n  key: v\n---\n", "only `- item`"),
            ("---\n  - a\n---\n", "nested"),
            ("---\nname: a\nname: b\n---\n", "twice"),
            ("---\ndescription: |\n---\n", "block scalars"),
            ("---\ntools: [a, [b]]\n---\n", "nested"),
            ("---\ntools: [a\n---\n", "must end"),
            ("---\nName: a\n---\n", "not a valid key"),
            ("---\njust text\n---\n", "expected"),
            ("---\nname: \"a\n---\n", "not closed"),
            ("---\nname: &anchor a\n---\n", "anchors"),
            ("---\nname: \"a\\x\"\n---\n", "escapes"),
        ];
        for (input, want) in cases {
            let error = parse(input).unwrap_err();
            assert!(error.contains(want), "{input:?}: {error}");
        }
    }

    #[test]
    fn is_bounded() {
        let lines: String = (0..=MAX_FRONT_MATTER_LINES)
            .map(|i| format!("k{i}: b\n"))
            .collect();
        let long = format!("---\n{lines}---\n");
        assert!(parse(&long).unwrap_err().contains("longer than"));
        let wide = format!("---\nd: {}\n---\n", "x".repeat(MAX_FRONT_MATTER_BYTES));
        assert!(parse(&wide).unwrap_err().contains("longer than"));
        let many = format!(
            "---\ntools: [{}]\n---\n",
            vec!["a"; MAX_LIST_ITEMS + 1].join(",")
        );
        assert!(parse(&many).unwrap_err().contains("at most"));
    }
}
