//! Reading `rota run`'s FILE: a JSON array, or JSON lines, of URL strings or target objects.
//!
//! Everything is checked before anything is submitted, and every error names the item (in an
//! array) or the line (in JSON lines) it is about.

use std::fmt;

use rota::{Options, Target};
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Said of a JSON line that ends inside a value.
const ONE_LINE_EACH: &str = " (in JSON lines each target is on a line of its own; for targets \
                             written over several lines, put them in a JSON array: [{...}, ...])";

const QUOTE_URLS: &str = " (a URL is a JSON string: put it in double quotes, \"https://...\")";

const NO_COMMENTS: &str = " (JSON has no comments: remove the line)";

/// What a JSON line that serde_json refused with `e` most likely got wrong, if that is clear:
/// a URL written bare ([`QUOTE_URLS`]), a comment ([`NO_COMMENTS`]), or a value that goes on
/// past its line's end, as a target written over several lines does ([`ONE_LINE_EACH`]).
fn line_hint(line: &str, e: &serde_json::Error) -> &'static str {
    let line = line.trim_start();
    if line.starts_with('#') || line.starts_with("//") {
        NO_COMMENTS
    } else if !line.starts_with(['"', '{', '[']) && line.contains("://") {
        QUOTE_URLS
    } else if e.is_eof() {
        ONE_LINE_EACH
    } else {
        ""
    }
}

/// The keys a target object may have.
const TARGET_KEYS: &[&str] = &["url", "options"];
/// The keys a target's `options` may have.
const OPTION_KEYS: &[&str] = &[
    "mode", "question", "pages", "grep", "jq", "context", "recover",
];

/// Parses FILE's contents into targets, in order.
///
/// The contents are a JSON array when their first non-blank character is `[`, and JSON lines
/// otherwise (blank lines are skipped). Each item is a URL string or an object
/// `{"url": .., "options": {..}}`; a URL must be absolute `http://` or `https://`, and an
/// unknown key, or a key given twice in one object, is an error rather than silently dropped.
pub fn parse_targets(text: &str) -> Result<Vec<Target>, String> {
    parse_targets_with(text, |_| Ok(()))
}

/// [`parse_targets`], with `check` applied to each target as it is read: its error is
/// reported, as the contents' own are, naming the item (in an array) or the line (in JSON
/// lines) of the target. `rota run` refuses here the options its fetcher would refuse.
pub fn parse_targets_with(
    text: &str,
    check: impl Fn(&Target) -> Result<(), String>,
) -> Result<Vec<Target>, String> {
    let read = |v: Value| to_target(v).and_then(|t| check(&t).map(|()| t));
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let trimmed = text.trim_start();
    let targets = if trimmed.starts_with('[') {
        let items: Vec<Strict> =
            serde_json::from_str(text).map_err(|e| format!("not a valid JSON array: {e}"))?;
        items
            .into_iter()
            .enumerate()
            .map(|(i, Strict(v))| {
                let n = i + 1;
                read(v).map_err(|e| format!("item {n} (idx {i}): {e}"))
            })
            .collect::<Result<Vec<_>, _>>()?
    } else {
        let mut out = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let n = i + 1;
            if line.trim().is_empty() {
                continue;
            }
            let Strict(v) = serde_json::from_str(line).map_err(|e| {
                format!(
                    "line {n}: not valid JSON: {}{}",
                    in_line(&e),
                    line_hint(line, &e)
                )
            })?;
            out.push(read(v).map_err(|e| format!("line {n}: {e}"))?);
        }
        out
    };
    if targets.is_empty() {
        return Err("no targets: give a JSON array or JSON lines of URLs or target objects".into());
    }
    Ok(targets)
}

/// A JSON value read as [`Value`] reads it, except that an object that gives a key twice is an
/// error: a `Value` keeps the last and drops the others without a word.
struct Strict(Value);

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Strict, D::Error> {
        d.deserialize_any(StrictVisitor).map(Strict)
    }
}

/// Reads what `serde_json::from_str` hands a `deserialize_any` (a string by `visit_str`, null
/// by `visit_unit`: it never calls `visit_string`, `visit_none` or `visit_some`).
struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, b: bool) -> Result<Value, E> {
        Ok(Value::Bool(b))
    }

    fn visit_i64<E>(self, n: i64) -> Result<Value, E> {
        Ok(Value::Number(n.into()))
    }

    fn visit_u64<E>(self, n: u64) -> Result<Value, E> {
        Ok(Value::Number(n.into()))
    }

    fn visit_f64<E>(self, n: f64) -> Result<Value, E> {
        // JSON has no NaN or infinity, so every number read is finite.
        Ok(serde_json::Number::from_f64(n).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, s: &str) -> Result<Value, E> {
        Ok(Value::String(s.to_owned()))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(Strict(v)) = seq.next_element()? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                return Err(de::Error::custom(format!("the key {key:?} is given twice")));
            }
            let Strict(v) = map.next_value()?;
            out.insert(key, v);
        }
        Ok(Value::Object(out))
    }
}

/// A serde_json error on one line of JSON lines, placed by its column only: serde_json read the
/// line on its own, so its "line 1" is not the file's line.
fn in_line(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let at = format!(" at line {} column {}", e.line(), e.column());
    match text.strip_suffix(&at) {
        Some(msg) => format!("{msg} at column {}", e.column()),
        None => text,
    }
}

fn to_target(v: Value) -> Result<Target, String> {
    let target = match v {
        Value::String(url) => Target {
            url,
            options: Options::default(),
        },
        Value::Object(mut map) => {
            unknown_keys(&map, TARGET_KEYS, "key")?;
            if map.get("options") == Some(&Value::Null) {
                map.remove("options");
            }
            match map.get("options") {
                Some(Value::Object(o)) => {
                    unknown_keys(o, OPTION_KEYS, "option")?;
                    option_types(o)?;
                }
                Some(Value::Null) | None => {}
                Some(_) => return Err("\"options\" must be an object".into()),
            }
            match map.get("url") {
                Some(Value::String(_)) => {}
                Some(other) => {
                    return Err(format!("\"url\" must be a string, not {}", kind(other)));
                }
                None => return Err("a target object needs a \"url\"".into()),
            }
            serde_json::from_value(Value::Object(map)).map_err(|e| e.to_string())?
        }
        other => {
            return Err(format!(
                "expected a URL string or a target object, found {}",
                kind(&other)
            ));
        }
    };
    check_url(&target.url)?;
    Ok(target)
}

fn unknown_keys(
    map: &serde_json::Map<String, Value>,
    known: &[&str],
    what: &str,
) -> Result<(), String> {
    match map.keys().find(|k| !known.contains(&k.as_str())) {
        None => Ok(()),
        Some(k) => Err(format!(
            "unknown {what} {k:?} (known: {})",
            known.join(", ")
        )),
    }
}

/// Checks that each option's value has its type, naming the option that does not.
fn option_types(options: &Map<String, Value>) -> Result<(), String> {
    for (k, v) in options {
        let (ok, want) = match k.as_str() {
            "context" => (v.is_boolean() || v.is_null(), "true, false or null"),
            "recover" => (v.is_boolean(), "true or false"),
            _ => (v.is_string(), "a string"),
        };
        if !ok {
            return Err(format!("option {k:?} must be {want}, not {}", kind(v)));
        }
    }
    Ok(())
}

/// The longest URL an HTTP request carries here (the `http` crate's limit on a request's URI).
const MAX_URL: usize = u16::MAX as usize - 1;

/// Shown of a URL in an error: whole, as JSON quotes it, up to [`QUOTED`] characters.
const QUOTED: usize = 200;

/// `url` quoted for an error message: whole if short, else its start and its length.
fn quoted(url: &str) -> String {
    match url.char_indices().nth(QUOTED) {
        None => format!("{url:?}"),
        Some((cut, _)) => format!("{:?}… ({} bytes)", &url[..cut], url.len()),
    }
}

fn check_url(url: &str) -> Result<(), String> {
    let q = quoted(url);
    // The URL parser forgives what it takes for typing slips: it drops spaces around the URL
    // and tabs and newlines inside it, reads `http:host/a` as `http://host/a` and a backslash
    // as a slash. The URL stored, shown and keyed for reuse is the one given, so it must be the
    // one fetched.
    if url.trim() != url {
        return Err(format!("{q} has spaces around it: give the URL alone"));
    }
    if url.chars().any(char::is_control) {
        return Err(format!(
            "{q} holds a control character (a tab or a line break?): give the URL alone"
        ));
    }
    // In the query (and the fragment, never sent) a backslash is kept as it is.
    let before_query = url.split(['?', '#']).next().unwrap_or_default();
    if before_query.contains('\\') {
        return Err(format!(
            "{q} holds a backslash, which the URL parser reads as a slash: write / (or %5C for \
             a backslash)"
        ));
    }
    match reqwest::Url::parse(url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") => {
            let after_scheme = url.get(u.scheme().len() + 1..).unwrap_or_default();
            if !after_scheme.starts_with("//") {
                Err(format!(
                    "{q} is not an absolute http(s) URL: write {}://HOST/…",
                    u.scheme()
                ))
            } else if after_scheme.get(2..).is_some_and(|r| r.starts_with('/')) {
                // `http:///host` is fetched as `http://host/`.
                Err(format!(
                    "{q} has more than two slashes before its host, which the URL parser drops: \
                     write {}://HOST/…",
                    u.scheme()
                ))
            } else if u.as_str().len() > MAX_URL {
                // As sent: the parser escapes what a URL may not hold as it is, which lengthens it.
                Err(format!(
                    "{q} is {} bytes long as sent; an HTTP request carries a URL of at most \
                     {MAX_URL} bytes here",
                    u.as_str().len()
                ))
            } else {
                Ok(())
            }
        }
        Ok(u) => Err(format!(
            "{q} has the scheme {}: only http:// and https:// are fetched",
            u.scheme()
        )),
        Err(e) => Err(format!("{q} is not an absolute http(s) URL ({e})")),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(u: &str) -> Target {
        Target {
            url: u.into(),
            options: Options::default(),
        }
    }

    #[test]
    fn a_json_array_of_strings_and_objects_is_read_in_order() {
        let got = parse_targets(
            r#"  ["https://a.example/1",
                 {"url": "http://b.example/2", "options": {"grep": "x", "context": false}},
                 {"url": "https://c.example/3"}]"#,
        )
        .unwrap();
        assert_eq!(got.len(), 3);
        assert_eq!(got[0], url("https://a.example/1"));
        assert_eq!(got[1].options.grep, "x");
        assert_eq!(got[1].options.context, Some(false));
        assert_eq!(got[2], url("https://c.example/3"));
    }

    #[test]
    fn null_options_and_a_leading_byte_order_mark_are_read() {
        for text in [
            r#"[{"url": "https://a.example/1", "options": null}]"#,
            r#"{"url": "https://a.example/1", "options": null}"#,
            "\u{feff}[\"https://a.example/1\"]",
            "\u{feff}\"https://a.example/1\"\n",
        ] {
            assert_eq!(
                parse_targets(text).unwrap(),
                vec![url("https://a.example/1")],
                "{text:?}"
            );
        }
    }

    #[test]
    fn json_lines_skip_blank_lines() {
        let got =
            parse_targets("\"https://a.example/1\"\n\n{\"url\":\"https://b.example/2\"}\r\n   \n")
                .unwrap();
        assert_eq!(
            got,
            vec![url("https://a.example/1"), url("https://b.example/2")]
        );
    }

    /// What the URL parser would forgive, and so fetch as another URL than the one stored,
    /// shown and keyed for reuse, is refused.
    #[test]
    fn a_url_the_parser_would_rewrite_is_refused() {
        for (bad, why) in [
            (" https://a.example/1", "has spaces around it"),
            ("https://a.example/1 ", "has spaces around it"),
            ("https://a.example/\t1", "holds a control character"),
            ("https://a.exa\nmple/1", "holds a control character"),
            (
                "http:a.example/1",
                "is not an absolute http(s) URL: write http://HOST/",
            ),
            (
                "HTTPS:/a.example/1",
                "is not an absolute http(s) URL: write https://HOST/",
            ),
            (
                "http:///a.example/1",
                "has more than two slashes before its host, which the URL parser drops: write \
                 http://HOST/",
            ),
            ("HTTPS:////a.example/1", "write https://HOST/"),
        ] {
            let text = format!("[{}]", serde_json::to_string(bad).unwrap());
            let e = parse_targets(&text).unwrap_err();
            assert!(e.starts_with("item 1 (idx 0): "), "{bad:?}: {e}");
            assert!(e.contains(why), "{bad:?}: {e}");
        }
        // As typed but for the case of the scheme, which the parser folds as HTTP does.
        assert_eq!(
            parse_targets("[\"HTTPS://a.example/1\"]").unwrap(),
            vec![url("HTTPS://a.example/1")]
        );
    }

    /// A backslash before the query is read as a slash (`/a\\b` fetched as `/a/b`), so it is
    /// refused; in the query it is sent as it is.
    #[test]
    fn a_backslash_is_refused_before_the_query_only() {
        for bad in ["https://a.example/a\\b", "https://a.example\\b/c"] {
            let text = format!("[{}]", serde_json::to_string(bad).unwrap());
            let e = parse_targets(&text).unwrap_err();
            assert!(e.contains("holds a backslash"), "{bad:?}: {e}");
        }
        let ok = "https://a.example/s?q=a\\b#x\\y";
        let text = format!("[{}]", serde_json::to_string(ok).unwrap());
        assert_eq!(parse_targets(&text).unwrap(), vec![url(ok)]);
        assert_eq!(
            reqwest::Url::parse(ok).unwrap().query(),
            Some("q=a\\b"),
            "sent as given"
        );
    }

    /// A URL longer than an HTTP request carries here is refused on input, its start quoted
    /// (not all of it); it used to fail each fetch as "a redirect to an address rota cannot
    /// fetch".
    #[test]
    fn a_url_too_long_to_send_is_refused_and_quoted_short() {
        let base = "https://a.example/";
        let at_most = format!("{base}{}", "a".repeat(MAX_URL - base.len()));
        let text = serde_json::to_string(&at_most).unwrap();
        assert_eq!(parse_targets(&text).unwrap(), vec![url(&at_most)]);
        let over = format!("{at_most}a");
        let e = parse_targets(&serde_json::to_string(&over).unwrap()).unwrap_err();
        assert!(e.starts_with("line 1: \"https://a.example/aaa"), "{e}");
        let says = format!(
            "… (65535 bytes) is 65535 bytes long as sent; an HTTP request carries a URL of at \
             most {MAX_URL} bytes"
        );
        assert!(e.contains(&says), "{e}");
        assert!(e.len() < 400, "{}", e.len());
        // Escaped as sent: a space in the path is three bytes.
        let spaced = format!("{base}{} x", "a".repeat(MAX_URL - base.len() - 2));
        assert_eq!(spaced.len(), MAX_URL);
        let e = parse_targets(&serde_json::to_string(&spaced).unwrap()).unwrap_err();
        assert!(e.contains("is 65536 bytes long as sent"), "{e}");
    }

    #[test]
    fn errors_in_an_array_name_the_item() {
        let cases = [
            (
                r#"["https://a.example", 7]"#,
                "item 2 (idx 1): expected a URL string or a target object, found a number",
            ),
            (
                r#"["https://a.example", "nope"]"#,
                "item 2 (idx 1): \"nope\" is not an absolute http(s) URL",
            ),
            (
                r#"[{"url": "ftp://x.example/f"}]"#,
                "item 1 (idx 0): \"ftp://x.example/f\" has the scheme ftp",
            ),
            (
                r#"[{"ur1": "https://a.example"}]"#,
                "item 1 (idx 0): unknown key \"ur1\"",
            ),
            (
                r#"[{"url": "https://a.example", "options": {"jqq": "."}}]"#,
                "item 1 (idx 0): unknown option \"jqq\"",
            ),
            (
                r#"[{"url": "https://a.example", "options": {"grep": 3}}]"#,
                "item 1 (idx 0): option \"grep\" must be a string, not a number",
            ),
            (
                r#"[{"url": "https://a.example", "options": "grep"}]"#,
                "item 1 (idx 0): \"options\" must be an object",
            ),
            (
                r#"[{"options": {}}]"#,
                "item 1 (idx 0): a target object needs a \"url\"",
            ),
        ];
        for (text, want) in cases {
            let e = parse_targets(text).unwrap_err();
            assert!(e.starts_with(want), "{text}\n  got:  {e}\n  want: {want}…");
        }
    }

    #[test]
    fn errors_in_json_lines_name_the_line() {
        let e = parse_targets("\"https://a.example\"\n\n{\"url\": \"https://b.example\"\n")
            .unwrap_err();
        assert!(e.starts_with("line 3: not valid JSON"), "{e}");
        let e = parse_targets("\"https://a.example\"\n[1]\n").unwrap_err();
        assert_eq!(
            e,
            "line 2: expected a URL string or a target object, found an array"
        );
    }

    /// serde_json reads each line on its own, so its own position is always "line 1": the
    /// error names the file's line once, and only the column within it.
    #[test]
    fn a_broken_json_line_names_its_line_once_and_its_column() {
        let e = parse_targets("\"https://a.example\"\n\n{\"url\": \"https://b.example\"\n")
            .unwrap_err();
        assert_eq!(
            e,
            format!(
                "line 3: not valid JSON: EOF while parsing an object at column 27{ONE_LINE_EACH}"
            )
        );
        let e = parse_targets("\"https://a.example\"\n\"https://b.example\", \n").unwrap_err();
        assert_eq!(
            e,
            "line 2: not valid JSON: trailing characters at column 20"
        );
        let e =
            parse_targets("\n{\"url\": \"https://a.example/1\", \"url\": \"x\"}\n").unwrap_err();
        assert_eq!(
            e,
            "line 2: not valid JSON: the key \"url\" is given twice at column 36"
        );
    }

    /// A URL written bare on its line, or a comment line, gets a hint of what JSON lines want;
    /// a line broken otherwise gets none.
    #[test]
    fn a_bare_url_or_a_comment_line_says_what_json_lines_want() {
        let e = parse_targets("\"https://a.example/1\"\nhttps://a.example/2\n").unwrap_err();
        assert_eq!(
            e,
            format!("line 2: not valid JSON: expected value at column 1{QUOTE_URLS}")
        );
        let e = parse_targets("  http://a.example/1\n").unwrap_err();
        assert!(
            e.starts_with("line 1: not valid JSON") && e.ends_with(QUOTE_URLS),
            "{e}"
        );
        for comment in ["# my targets", "  // my targets"] {
            let e = parse_targets(&format!("{comment}\n\"https://a.example/1\"\n")).unwrap_err();
            assert!(
                e.starts_with("line 1: not valid JSON") && e.ends_with(NO_COMMENTS),
                "{e}"
            );
        }
        // A quoted URL, an object or a word without "://" broken otherwise: no such hint.
        for line in [
            "\"https://a.example/1\" x",
            "{\"url\": https://a.example}",
            "nope",
        ] {
            let e = parse_targets(line).unwrap_err();
            assert!(
                !e.contains(" (a URL") && !e.contains(" (JSON has"),
                "{line}: {e}"
            );
        }
    }

    /// A single target object written over several lines (as a pretty-printer writes it) is
    /// not JSON lines: the error says so and how to write it, and a JSON array of such objects
    /// is read.
    #[test]
    fn a_target_over_several_lines_says_to_use_an_array() {
        let pretty = "{\n  \"url\": \"https://a.example/1\",\n  \"options\": {}\n}\n";
        let e = parse_targets(pretty).unwrap_err();
        assert_eq!(
            e,
            format!(
                "line 1: not valid JSON: EOF while parsing an object at column 1{ONE_LINE_EACH}"
            )
        );
        assert_eq!(
            parse_targets(&format!("[{pretty}]")).unwrap(),
            vec![url("https://a.example/1")]
        );
        // A line broken otherwise than at its end gets no such hint.
        let e = parse_targets("{\"url\": 1 2}\n").unwrap_err();
        assert!(!e.contains("JSON array"), "{e}");
    }

    #[test]
    fn a_broken_array_says_where() {
        let e = parse_targets("[\"https://a.example\",\n  \"https://b.example\"").unwrap_err();
        assert!(e.starts_with("not a valid JSON array"), "{e}");
        assert!(e.contains("line 2"), "{e}");
    }

    #[test]
    fn a_key_given_twice_is_an_error_naming_it_and_where() {
        let e =
            parse_targets("{\"url\": \"https://a.example/1\", \"url\": \"https://a.example/2\"}\n")
                .unwrap_err();
        assert!(e.starts_with("line 1: not valid JSON"), "{e}");
        assert!(e.contains("the key \"url\" is given twice"), "{e}");
        assert!(e.contains("column"), "{e}");
        let e = parse_targets(
            r#"["https://a.example/1",
                {"url": "https://a.example/2", "options": {"grep": "a", "grep": "b"}}]"#,
        )
        .unwrap_err();
        assert!(e.starts_with("not a valid JSON array"), "{e}");
        assert!(e.contains("the key \"grep\" is given twice"), "{e}");
        assert!(e.contains("line 2"), "{e}");
        // The same key in two objects is no repeat; numbers, nulls and nesting read as before.
        let got = parse_targets(
            r#"[{"url": "https://a.example/1", "options": {"context": null}},
                {"url": "https://a.example/2"}]"#,
        )
        .unwrap();
        assert_eq!(
            got,
            vec![url("https://a.example/1"), url("https://a.example/2")]
        );
        let Strict(v) =
            serde_json::from_str(r#"[1, -2, 2.5, null, true, {"a": [{"b": {}}]}]"#).unwrap();
        assert_eq!(
            v,
            serde_json::json!([1, -2, 2.5, null, true, {"a": [{"b": {}}]}])
        );
    }

    #[test]
    fn a_value_of_the_wrong_type_names_its_key() {
        let cases = [
            (
                r#"{"url": 7}"#,
                r#"line 1: "url" must be a string, not a number"#,
            ),
            (
                r#"{"url": "https://a.example", "options": {"grep": null}}"#,
                r#"line 1: option "grep" must be a string, not null"#,
            ),
            (
                r#"{"url": "https://a.example", "options": {"recover": "yes"}}"#,
                r#"line 1: option "recover" must be true or false, not a string"#,
            ),
            (
                r#"{"url": "https://a.example", "options": {"context": 1}}"#,
                r#"line 1: option "context" must be true, false or null, not a number"#,
            ),
        ];
        for (line, want) in cases {
            assert_eq!(parse_targets(line).unwrap_err(), want, "{line}");
        }
    }

    #[test]
    fn empty_contents_are_an_error() {
        for text in ["", "  \n\n", "[]"] {
            assert!(
                parse_targets(text).unwrap_err().starts_with("no targets"),
                "{text:?}"
            );
        }
    }
}
