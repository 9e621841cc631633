//! RFC 6570 URI templates, matched in reverse: given a concrete URI, recover the variables.
//!
//! Supported expressions: `{var}` (no `/`, `?`, `#`), `{+var}` (reserved: may contain `/`),
//! `{#var}`, `{/var}` (one path segment per variable), `{.var}`, `{?a,b}` and `{&a,b}` (query
//! parameters, any order, each optional), `{;a}`. Explode and prefix modifiers are accepted and
//! ignored for matching.

use std::collections::HashMap;

#[derive(Debug, Clone, PartialEq)]
enum Part {
    Literal(String),
    Expr { op: Option<char>, vars: Vec<String> },
}

/// A parsed URI template.
#[derive(Debug, Clone, PartialEq)]
pub struct UriTemplate {
    source: String,
    parts: Vec<Part>,
}

impl UriTemplate {
    /// Parses a template.
    pub fn parse(source: &str) -> Result<Self, String> {
        let mut parts = Vec::new();
        let mut rest = source;
        while let Some(open) = rest.find('{') {
            if open > 0 {
                parts.push(Part::Literal(rest[..open].to_owned()));
            }
            let close = rest[open..]
                .find('}')
                .ok_or_else(|| "unclosed `{`".to_owned())?
                + open;
            let body = &rest[open + 1..close];
            let (op, list) = match body.chars().next() {
                Some(c @ ('+' | '#' | '/' | '.' | '?' | '&' | ';')) => (Some(c), &body[1..]),
                _ => (None, body),
            };
            let vars: Vec<String> = list
                .split(',')
                .map(|v| {
                    v.trim_end_matches('*')
                        .split(':')
                        .next()
                        .unwrap_or("")
                        .to_owned()
                })
                .collect();
            if vars.iter().any(|v| {
                v.is_empty()
                    || !v
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '%')
            }) {
                return Err(format!("bad variable list `{body}`"));
            }
            parts.push(Part::Expr { op, vars });
            rest = &rest[close + 1..];
        }
        if rest.contains('}') {
            return Err("unmatched `}`".into());
        }
        if !rest.is_empty() {
            parts.push(Part::Literal(rest.to_owned()));
        }
        Ok(UriTemplate {
            source: source.to_owned(),
            parts,
        })
    }

    /// The template text.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// The variable names, in order.
    pub fn variables(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().flat_map(|p| match p {
            Part::Expr { vars, .. } => vars.iter().map(String::as_str).collect::<Vec<_>>(),
            Part::Literal(_) => Vec::new(),
        })
    }

    /// Matches `uri` against the template, returning the variables (percent-decoded).
    pub fn matches(&self, uri: &str) -> Option<HashMap<String, String>> {
        let mut out = HashMap::new();
        match_parts(&self.parts, uri, &mut out).then_some(out)
    }
}

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Some(b) = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn match_parts(parts: &[Part], uri: &str, out: &mut HashMap<String, String>) -> bool {
    let Some((first, rest)) = parts.split_first() else {
        return uri.is_empty();
    };
    match first {
        Part::Literal(lit) => uri
            .strip_prefix(lit.as_str())
            .is_some_and(|tail| match_parts(rest, tail, out)),
        Part::Expr { op, vars } => match op {
            Some('?') | Some('&') => {
                let lead = if *op == Some('?') { '?' } else { '&' };
                let (query, tail) = match uri.strip_prefix(lead) {
                    Some(q) => {
                        let end = q.find('#').unwrap_or(q.len());
                        (&q[..end], &q[end..])
                    }
                    None => ("", uri),
                };
                for pair in query.split('&').filter(|p| !p.is_empty()) {
                    let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                    if vars.iter().any(|name| name == k) {
                        out.insert(k.to_owned(), decode(v));
                    }
                }
                match_parts(rest, tail, out)
            }
            _ => {
                let (prefix, allow_slash) = match op {
                    None => ("", false),
                    Some('+') => ("", true),
                    Some('#') => ("#", true),
                    Some('/') => ("/", false),
                    Some('.') => (".", false),
                    Some(';') => (";", false),
                    _ => ("", false),
                };
                // Greedy-to-lazy search over where this expression's value ends.
                let Some(body) = uri.strip_prefix(prefix) else {
                    return false;
                };
                // A list expression (`{/a,b}`, `{.a,b}`) spans its own separators.
                let list = vars.len() > 1;
                let stop = |c: char| {
                    let slash_ok = allow_slash || (list && *op == Some('/'));
                    (!allow_slash && (c == '?' || c == '#'))
                        || (!slash_ok && c == '/')
                        || (*op == Some('.') && !list && c == '.')
                };
                let limit = body.find(stop).unwrap_or(body.len());
                for end in (1..=limit).rev() {
                    if !body.is_char_boundary(end) {
                        continue;
                    }
                    let mut trial = out.clone();
                    let value = &body[..end];
                    if vars.len() == 1 {
                        let v = if *op == Some(';') {
                            value.split_once('=').map(|(_, v)| v).unwrap_or("")
                        } else {
                            value
                        };
                        trial.insert(vars[0].clone(), decode(v));
                    } else {
                        let sep = match op {
                            Some('/') => '/',
                            Some('.') => '.',
                            _ => ',',
                        };
                        for (name, v) in vars.iter().zip(value.split(sep)) {
                            trial.insert(name.clone(), decode(v));
                        }
                    }
                    if match_parts(rest, &body[end..], &mut trial) {
                        *out = trial;
                        return true;
                    }
                }
                false
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(t: &str, uri: &str) -> Option<HashMap<String, String>> {
        UriTemplate::parse(t).unwrap().matches(uri)
    }

    #[test]
    fn simple_variable_matches_one_segment() {
        assert_eq!(m("users://{id}", "users://42").unwrap()["id"], "42");
        assert_eq!(
            m("test://template/{id}/data", "test://template/123/data").unwrap()["id"],
            "123"
        );
        assert!(m("users://{id}", "users://42/x").is_none());
        assert!(m("users://{id}", "posts://42").is_none());
    }

    #[test]
    fn reserved_expansion_spans_slashes() {
        assert_eq!(
            m("file:///{+path}", "file:///a/b/c.txt").unwrap()["path"],
            "a/b/c.txt"
        );
    }

    #[test]
    fn query_parameters_are_optional_and_unordered() {
        let v = m("search://items{?q,limit}", "search://items?limit=5&q=a%20b").unwrap();
        assert_eq!(v["q"], "a b");
        assert_eq!(v["limit"], "5");
        assert!(m("search://items{?q,limit}", "search://items").is_some());
    }

    #[test]
    fn several_variables_in_a_row() {
        let v = m(
            "repo://{owner}/{name}/issues/{n}",
            "repo://me/proj/issues/7",
        )
        .unwrap();
        assert_eq!(
            (v["owner"].as_str(), v["name"].as_str(), v["n"].as_str()),
            ("me", "proj", "7")
        );
        let v = m("path{/a,b}", "path/x/y").unwrap();
        assert_eq!((v["a"].as_str(), v["b"].as_str()), ("x", "y"));
    }

    #[test]
    fn malformed_templates_are_rejected() {
        assert!(UriTemplate::parse("x://{id").is_err());
        assert!(UriTemplate::parse("x://id}").is_err());
        assert!(UriTemplate::parse("x://{}").is_err());
    }
}
