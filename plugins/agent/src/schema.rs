//! Tool input schemas made acceptable as function parameters: local `$ref`s inlined.
//!
//! MCP servers built with Pydantic, zod-to-json-schema or schemars put shared types under
//! `$defs` (or `definitions`) and point at them with `$ref`; several OpenAI-compatible
//! servers (Gemini's endpoint, some vLLM and Ollama versions) refuse a schema with `$ref`,
//! so the agent sends every schema self-contained:
//!
//! - A `$ref` to a JSON pointer inside the schema (`#/$defs/Point`, `#/definitions/a~1b`,
//!   `#`) is replaced by the schema it names, inlined in turn. Keywords next to the `$ref`
//!   (a `description`, say) are kept and win over the target's.
//! - A reference back into a type being expanded (a tree's `children: [Node]`) is **cut**:
//!   it becomes `{}` (any value) with its sibling keywords, so the tool stays callable and
//!   the model is told the outer levels' shape. So is a reference that resolves to nothing
//!   (a remote URL, an `$anchor`), and any reference once [`MAX_EXPANSIONS`] have been made
//!   (a schema whose types each refer to the next twice would otherwise grow exponentially).
//! - `$defs` and `definitions` are dropped once nothing refers to them.
//!
//! Values that are data rather than schemas (`enum`, `const`, `default`, `examples`) are
//! left as they are, even when they hold an object with a `$ref` member.

use serde_json::{Map, Value};

/// Reference expansions per schema at most; later references are cut.
pub const MAX_EXPANSIONS: usize = 256;

/// Keywords whose values are data, not subschemas.
const DATA_KEYWORDS: [&str; 4] = ["enum", "const", "default", "examples"];

/// Keywords whose values map names (not keywords) to subschemas.
const NAMED_SCHEMAS: [&str; 3] = ["properties", "patternProperties", "dependentSchemas"];

/// `schema` with its local references inlined, and how many references were cut.
pub fn inline_refs(schema: &Map<String, Value>) -> (Map<String, Value>, usize) {
    let root = Value::Object(schema.clone());
    let mut walk = Walk {
        root: &root,
        stack: Vec::new(),
        expansions: 0,
        cut: 0,
    };
    let out = walk.object(schema);
    (out, walk.cut)
}

struct Walk<'a> {
    root: &'a Value,
    /// The references being expanded, outermost first.
    stack: Vec<String>,
    expansions: usize,
    cut: usize,
}

impl Walk<'_> {
    fn value(&mut self, v: &Value) -> Value {
        match v {
            Value::Object(m) => Value::Object(self.object(m)),
            Value::Array(items) => Value::Array(items.iter().map(|i| self.value(i)).collect()),
            other => other.clone(),
        }
    }

    fn object(&mut self, m: &Map<String, Value>) -> Map<String, Value> {
        let siblings = |walk: &mut Self, out: &mut Map<String, Value>| {
            for (k, v) in m {
                if k == "$ref" || k == "$defs" || k == "definitions" {
                    continue;
                }
                let v = match v {
                    _ if DATA_KEYWORDS.contains(&k.as_str()) => v.clone(),
                    // Names to schemas: a property may be called `$ref` or `$defs`.
                    Value::Object(named) if NAMED_SCHEMAS.contains(&k.as_str()) => Value::Object(
                        named
                            .iter()
                            .map(|(name, s)| (name.clone(), walk.value(s)))
                            .collect(),
                    ),
                    _ => walk.value(v),
                };
                out.insert(k.clone(), v);
            }
        };
        let Some(Value::String(reference)) = m.get("$ref") else {
            let mut out = Map::new();
            siblings(self, &mut out);
            return out;
        };
        let target = resolve(self.root, reference);
        let mut out = match target {
            Some(Value::Object(t))
                if !self.stack.contains(reference) && self.expansions < MAX_EXPANSIONS =>
            {
                self.expansions += 1;
                self.stack.push(reference.clone());
                let inlined = self.object(t);
                self.stack.pop();
                inlined
            }
            // `true` and `false` are schemas too (any value / no value).
            Some(Value::Bool(b)) if *b => Map::new(),
            Some(Value::Bool(_)) => {
                let mut never = Map::new();
                never.insert("not".into(), Value::Object(Map::new()));
                never
            }
            _ => {
                self.cut += 1;
                tracing::debug!(reference, "a schema reference was cut to `{{}}`");
                Map::new()
            }
        };
        siblings(self, &mut out);
        out
    }
}

/// The value a local reference (`#` plus a JSON pointer) names in `root`.
fn resolve<'a>(root: &'a Value, reference: &str) -> Option<&'a Value> {
    let pointer = reference.strip_prefix('#')?;
    let pointer = percent_decode(pointer)?;
    if pointer.is_empty() {
        return Some(root);
    }
    if !pointer.starts_with('/') {
        return None;
    }
    root.pointer(&pointer)
}

/// `%XX` escapes of a URI fragment decoded (`#/$defs/a%20b`).
fn percent_decode(s: &str) -> Option<String> {
    if !s.contains('%') {
        return Some(s.to_owned());
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn inline(v: Value) -> (Value, usize) {
        let Value::Object(m) = v else {
            panic!("an object")
        };
        let (out, cut) = inline_refs(&m);
        (Value::Object(out), cut)
    }

    #[test]
    fn refs_to_defs_and_definitions_are_inlined_and_the_defs_dropped() {
        let (out, cut) = inline(json!({
            "type": "object",
            "properties": {
                "from": {"$ref": "#/$defs/Point", "description": "start"},
                "to": {"$ref": "#/definitions/Point"},
                "path": {"type": "array", "items": {"$ref": "#/$defs/Point"}}
            },
            "$defs": {"Point": {"type": "object", "description": "a point",
                "properties": {"x": {"type": "number"}, "y": {"$ref": "#/$defs/Coord"}}},
                "Coord": {"type": "number"}},
            "definitions": {"Point": {"$ref": "#/$defs/Point"}}
        }));
        let point = json!({"type": "object", "description": "a point",
            "properties": {"x": {"type": "number"}, "y": {"type": "number"}}});
        let mut start = point.clone();
        start["description"] = json!("start");
        assert_eq!(
            out,
            json!({"type": "object", "properties": {
                "from": start, "to": point, "path": {"type": "array", "items": point}}})
        );
        assert_eq!(cut, 0);
    }

    #[test]
    fn a_recursive_type_is_expanded_once_and_its_recurrence_cut() {
        let (out, cut) = inline(json!({
            "type": "object",
            "properties": {"root": {"$ref": "#/$defs/Node"}},
            "$defs": {"Node": {"type": "object", "properties": {
                "name": {"type": "string"},
                "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}}}}
        }));
        assert_eq!(
            out,
            json!({"type": "object", "properties": {"root": {"type": "object", "properties": {
                "name": {"type": "string"},
                "children": {"type": "array", "items": {}}}}}})
        );
        assert_eq!(cut, 1);
        // `#` itself: the whole schema.
        let (out, cut) = inline(json!({"type": "object",
            "properties": {"next": {"$ref": "#", "description": "more"}}}));
        assert_eq!(
            out,
            json!({"type": "object", "properties": {"next": {"type": "object",
                "properties": {"next": {"description": "more"}}, "description": "more"}}})
        );
        assert_eq!(cut, 1);
    }

    #[test]
    fn unresolvable_refs_are_cut_and_data_is_left_alone() {
        let (out, cut) = inline(json!({"type": "object", "properties": {
            "remote": {"$ref": "https://example.com/s.json", "description": "d"},
            "missing": {"$ref": "#/$defs/Nope"},
            "anchor": {"$ref": "#thing"},
            "spaced": {"$ref": "#/$defs/a%20b"},
            "escaped": {"$ref": "#/$defs/c~1d"},
            "mode": {"enum": [{"$ref": "#/$defs/a b"}], "default": {"$ref": "x"}},
            "$ref": {"type": "string"}
        }, "$defs": {"a b": {"type": "integer"}, "c/d": {"type": "boolean"}}}));
        assert_eq!(
            out,
            json!({"type": "object", "properties": {
                "remote": {"description": "d"},
                "missing": {},
                "anchor": {},
                "spaced": {"type": "integer"},
                "escaped": {"type": "boolean"},
                "mode": {"enum": [{"$ref": "#/$defs/a b"}], "default": {"$ref": "x"}},
                "$ref": {"type": "string"}
            }})
        );
        assert_eq!(cut, 3);
    }

    #[test]
    fn a_schema_that_doubles_at_each_level_stops_growing_at_the_expansion_cap() {
        // T0 -> two T1 -> four T2 ... : 2^21 expansions if nothing stopped it.
        let mut defs = Map::new();
        for i in 0..20 {
            defs.insert(
                format!("T{i}"),
                json!({"type": "object", "properties": {
                    "a": {"$ref": format!("#/$defs/T{}", i + 1)},
                    "b": {"$ref": format!("#/$defs/T{}", i + 1)}}}),
            );
        }
        defs.insert("T20".into(), json!({"type": "string"}));
        let (out, cut) = inline(json!({"$ref": "#/$defs/T0", "$defs": defs}));
        assert!(cut > 0);
        assert!(out.to_string().len() < 100_000, "{}", out.to_string().len());
        assert!(!out.to_string().contains("$ref"));
    }
}
