//! The status dump on `status_path`: the filter answers such a request itself with its engine's
//! [`fairq::Status`], as JSON or (`?format=text`) the text table. The request never enters the
//! queue and is not counted. The engine is the whole process's (every worker shares it), so the
//! JSON is the engine's as it is.
//!
//! Query: `k` (tenant rows, default [`DEFAULT_K`], at most [`MAX_K`]: more is cut to it), `order`
//! (`depth` or `oldest_wait`), `format` (`json` or `text`). Other keys are ignored; a bad value
//! answers 400.

use fairq::{Engine, StatusOrder};

/// Tenant rows when the query names no `k`.
pub const DEFAULT_K: usize = 20;
/// The most tenant rows a dump lists; a larger `k` is cut to it.
pub const MAX_K: usize = 1000;

/// What a status request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Query {
    pub k: usize,
    pub order: StatusOrder,
    pub text: bool,
}

impl Default for Query {
    fn default() -> Query {
        Query {
            k: DEFAULT_K,
            order: StatusOrder::Depth,
            text: false,
        }
    }
}

/// A local reply: status code, content type, body.
#[derive(Debug)]
pub struct Reply {
    pub status: u32,
    pub content_type: &'static str,
    pub body: String,
}

/// A request's `:path` split at the first `?` into the path and the query (empty without one).
pub fn split(path: &[u8]) -> (&[u8], &[u8]) {
    match path.iter().position(|&b| b == b'?') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => (path, &[]),
    }
}

/// Reads `k`, `order` and `format` from a query string; the error names the bad parameter.
pub fn parse_query(query: &[u8]) -> Result<Query, String> {
    let mut q = Query::default();
    for pair in query.split(|&b| b == b'&').filter(|p| !p.is_empty()) {
        let (key, value) = match pair.iter().position(|&b| b == b'=') {
            Some(i) => (&pair[..i], &pair[i + 1..]),
            None => (pair, &[][..]),
        };
        let shown = || String::from_utf8_lossy(value).into_owned();
        match key {
            b"k" => {
                if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
                    return Err(format!(
                        "k: \"{}\" is not a whole number (0 to {MAX_K} rows)",
                        shown()
                    ));
                }
                // More than MAX_K, however many digits, is cut to MAX_K.
                q.k = value
                    .iter()
                    .fold(0, |n, d| (n * 10 + usize::from(d - b'0')).min(MAX_K));
            }
            b"order" => {
                q.order = match value {
                    b"depth" => StatusOrder::Depth,
                    b"oldest_wait" => StatusOrder::OldestWait,
                    _ => {
                        return Err(format!(
                            "order: \"{}\" is not one of depth, oldest_wait",
                            shown()
                        ))
                    }
                };
            }
            b"format" => {
                q.text = match value {
                    b"json" => false,
                    b"text" => true,
                    _ => return Err(format!("format: \"{}\" is not one of json, text", shown())),
                };
            }
            _ => {}
        }
    }
    Ok(q)
}

/// The answer to a status request with this query string.
pub fn answer(engine: &Engine, query: &[u8]) -> Reply {
    match parse_query(query) {
        Ok(q) => {
            let status = engine.status(q.k, q.order);
            if q.text {
                Reply {
                    status: 200,
                    content_type: "text/plain; charset=utf-8",
                    body: status.to_text(),
                }
            } else {
                Reply {
                    status: 200,
                    content_type: "application/json",
                    body: status.to_json() + "\n",
                }
            }
        }
        Err(e) => Reply {
            status: 400,
            content_type: "text/plain; charset=utf-8",
            body: format!("fairq status: {e}\n"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_the_query_off() {
        assert_eq!(split(b"/fairq/status"), (&b"/fairq/status"[..], &b""[..]));
        assert_eq!(
            split(b"/fairq/status?k=3&a=?"),
            (&b"/fairq/status"[..], &b"k=3&a=?"[..])
        );
        assert_eq!(split(b"/fairq/status?"), (&b"/fairq/status"[..], &b""[..]));
    }

    #[test]
    fn reads_the_query() {
        assert_eq!(parse_query(b""), Ok(Query::default()));
        assert_eq!(
            parse_query(b"k=5&order=oldest_wait&format=text"),
            Ok(Query {
                k: 5,
                order: StatusOrder::OldestWait,
                text: true
            })
        );
        // Unknown keys and empty pairs are ignored; the last value of a key wins.
        let q = parse_query(b"&x=1&&k=7&format=text&format=json&order=depth&k=0").unwrap();
        assert_eq!((q.k, q.order, q.text), (0, StatusOrder::Depth, false));
        // k is cut to MAX_K, however many digits.
        assert_eq!(parse_query(b"k=1001").unwrap().k, MAX_K);
        assert_eq!(parse_query(b"k=1000").unwrap().k, 1000);
        assert_eq!(
            parse_query(b"k=99999999999999999999999999").unwrap().k,
            MAX_K
        );
    }

    #[test]
    fn bad_values_name_the_parameter() {
        for (query, key) in [
            (&b"k=abc"[..], "k:"),
            (b"k=", "k:"),
            (b"k", "k:"),
            (b"k=-1", "k:"),
            (b"k=+5", "k:"),
            (b"k=5x", "k:"),
            (b"order=newest", "order:"),
            (b"order=", "order:"),
            (b"format=xml", "format:"),
            (b"k=3&format=TEXT", "format:"),
        ] {
            let err = parse_query(query).unwrap_err();
            assert!(err.starts_with(key), "{query:?}: {err}");
        }
    }

    #[test]
    fn answers_json_text_or_400() {
        let engine = Engine::new(fairq::Config {
            enabled: true,
            ..fairq::Config::default()
        })
        .unwrap();
        let r = answer(&engine, b"");
        assert_eq!((r.status, r.content_type), (200, "application/json"));
        let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
        assert_eq!(v["order"], "depth");
        assert_eq!(v["tenants"], serde_json::json!([]));
        let r = answer(&engine, b"format=text&order=oldest_wait");
        assert_eq!(r.status, 200);
        assert!(r.content_type.starts_with("text/plain"));
        assert!(r.body.starts_with("enabled true"), "{}", r.body);
        let r = answer(&engine, b"k=x");
        assert_eq!(r.status, 400);
        assert!(r.body.contains("k: \"x\""), "{}", r.body);
    }
}
