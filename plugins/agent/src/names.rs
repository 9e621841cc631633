//! MCP tool names to OpenAI function names and back.
//!
//! A function name must match `^[a-zA-Z0-9_-]{1,64}$`; an MCP name may be 128 characters
//! long, contain `.` or `/`, and two servers may both have an `echo`. So each name is
//! sanitised (any other character becomes `_`), and a name that is then too long or no
//! longer unique (the same name on two servers, or `a.b` next to `a_b`) is cut to 55
//! characters and given `_` plus 8 hex digits of a hash of its server and MCP name. Every
//! member of a colliding group is hashed, so the mapping does not depend on listing order,
//! and the table built alongside maps each function name back to its server and tool.

use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};

/// The longest function name OpenAI accepts.
pub const MAX_FUNCTION_NAME: usize = 64;

/// The characters kept of a hashed name (55 + `_` + 8 hex digits = 64).
const HASHED_PREFIX: usize = 55;

/// Replaces what a function name may not contain with `_`.
pub fn sanitize(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() {
        "tool".to_owned()
    } else {
        s
    }
}

fn hashed(server: &str, tool: &str, base: &str, salt: u32) -> String {
    let mut h = Sha256::new();
    h.update(server.as_bytes());
    h.update([0]);
    h.update(tool.as_bytes());
    if salt > 0 {
        h.update(salt.to_be_bytes());
    }
    let digest = h.finalize();
    let hex: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
    let prefix: String = base.chars().take(HASHED_PREFIX).collect();
    format!("{prefix}_{hex}")
}

/// Function names for `(server, tool)` pairs, in the same order; unique and valid.
pub fn function_names(tools: &[(&str, &str)]) -> Vec<String> {
    let bases: Vec<String> = tools.iter().map(|(_, t)| sanitize(t)).collect();
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for b in &bases {
        *counts.entry(b.as_str()).or_default() += 1;
    }
    let mut taken: HashSet<String> = bases
        .iter()
        .filter(|b| counts[b.as_str()] == 1 && b.len() <= MAX_FUNCTION_NAME)
        .cloned()
        .collect();
    let mut out = Vec::with_capacity(tools.len());
    for ((server, tool), base) in tools.iter().zip(&bases) {
        if counts[base.as_str()] == 1 && base.len() <= MAX_FUNCTION_NAME {
            out.push(base.clone());
            continue;
        }
        let mut salt = 0;
        let mut name = hashed(server, tool, base, salt);
        while taken.contains(&name) {
            salt += 1;
            name = hashed(server, tool, base, salt);
        }
        taken.insert(name.clone());
        out.push(name);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid(name: &str) -> bool {
        (1..=MAX_FUNCTION_NAME).contains(&name.len())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    }

    #[test]
    fn plain_unique_names_are_kept_and_others_sanitised() {
        assert_eq!(
            function_names(&[("a", "echo"), ("a", "files.read"), ("b", "x-y")]),
            ["echo", "files_read", "x-y"]
        );
    }

    #[test]
    fn colliding_and_long_names_are_hashed_into_distinct_valid_names() {
        let long = "t".repeat(128);
        let names = function_names(&[
            ("a", "echo"),
            ("b", "echo"),
            ("a", "a.b"),
            ("a", "a_b"),
            ("a", &long),
        ]);
        assert!(names.iter().all(|n| valid(n)), "{names:?}");
        let unique: HashSet<_> = names.iter().collect();
        assert_eq!(unique.len(), names.len(), "{names:?}");
        assert!(names[0].starts_with("echo_") && names[1].starts_with("echo_"));
        assert_eq!(names[4].len(), MAX_FUNCTION_NAME);
        // The same input gives the same names, whatever the order.
        let again = function_names(&[("b", "echo"), ("a", "echo")]);
        assert_eq!(again, [names[1].clone(), names[0].clone()]);
    }
}
