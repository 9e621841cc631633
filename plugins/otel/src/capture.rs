//! Opt-in capture of tool arguments and results on the server span
//! (`gen_ai.tool.call.arguments`, `gen_ai.tool.call.result`). Off by default: arguments and
//! results are user data. When on, every value passes a redactor first: keys that name
//! credentials (`password`, `token`, `api_key`, ... and the operator's own list) have their
//! values replaced, the values of the secrets the config file refers to (`${VAR}`,
//! `file:PATH`) are cut out wherever they appear, and the text is capped at a byte budget.

use serde_json::Value;

/// What is captured, and what never is.
#[derive(Clone)]
pub struct CaptureSettings {
    /// Put `tools/call` arguments on the span.
    pub arguments: bool,
    /// Put `tools/call` results on the span.
    pub results: bool,
    /// The most bytes of each captured value (longer ones are cut and marked).
    pub max_bytes: usize,
    /// Object keys whose values are replaced, matched case-insensitively ignoring `_` and
    /// `-`, as a part of the key (`token` covers `access_token` and `X-Token`); added to the
    /// built-in list.
    pub redact_keys: Vec<String>,
    /// Exact values cut out wherever they appear (the secrets the config file refers to).
    pub redact_values: Vec<String>,
}

impl std::fmt::Debug for CaptureSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The values are secrets: only their number is printed.
        f.debug_struct("CaptureSettings")
            .field("arguments", &self.arguments)
            .field("results", &self.results)
            .field("max_bytes", &self.max_bytes)
            .field("redact_keys", &self.redact_keys)
            .field("redact_values", &self.redact_values.len())
            .finish()
    }
}

/// Keys always redacted.
const BUILT_IN_KEYS: [&str; 12] = [
    "password",
    "passwd",
    "secret",
    "token",
    "apikey",
    "authorization",
    "cookie",
    "privatekey",
    "credential",
    "sessionid",
    "signature",
    "bearer",
];

/// What a redacted value becomes.
pub(crate) const REDACTED: &str = "[REDACTED]";

impl Default for CaptureSettings {
    fn default() -> Self {
        CaptureSettings {
            arguments: false,
            results: false,
            max_bytes: 4096,
            redact_keys: Vec::new(),
            redact_values: Vec::new(),
        }
    }
}

impl CaptureSettings {
    /// True when anything is captured.
    pub fn is_on(&self) -> bool {
        self.arguments || self.results
    }
}

fn normalize(key: &str) -> String {
    key.chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .collect()
}

/// The redactor built from [`CaptureSettings`].
pub(crate) struct Redactor {
    pub(crate) arguments: bool,
    pub(crate) results: bool,
    max_bytes: usize,
    keys: Vec<String>,
    values: Vec<String>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Redactor")
    }
}

impl Redactor {
    pub(crate) fn new(settings: &CaptureSettings) -> Redactor {
        let mut keys: Vec<String> = BUILT_IN_KEYS.iter().map(|k| (*k).to_owned()).collect();
        keys.extend(settings.redact_keys.iter().map(|k| normalize(k)));
        keys.retain(|k| !k.is_empty());
        let mut values: Vec<String> = settings
            .redact_values
            .iter()
            // A very short "secret" would cut ordinary text to pieces.
            .filter(|v| v.len() >= 4)
            .cloned()
            .collect();
        // The longest first, so a secret containing another is cut whole.
        values.sort_by_key(|v| std::cmp::Reverse(v.len()));
        Redactor {
            arguments: settings.arguments,
            results: settings.results,
            max_bytes: settings.max_bytes.max(64),
            keys,
            values,
        }
    }

    fn secret_key(&self, key: &str) -> bool {
        let key = normalize(key);
        self.keys.iter().any(|k| key.contains(k.as_str()))
    }

    fn scrub_text(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for v in &self.values {
            if out.contains(v.as_str()) {
                out = out.replace(v.as_str(), REDACTED);
            }
        }
        out
    }

    fn scrub(&self, value: &mut Value) {
        match value {
            Value::Object(map) => {
                for (k, v) in map.iter_mut() {
                    if self.secret_key(k) && !v.is_null() {
                        *v = Value::String(REDACTED.to_owned());
                    } else {
                        self.scrub(v);
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|v| self.scrub(v)),
            Value::String(s) if !self.values.is_empty() => *s = self.scrub_text(s),
            _ => {}
        }
    }

    /// `json` redacted and capped, as span attribute text.
    pub(crate) fn render(&self, json: &str) -> String {
        let text = match serde_json::from_str::<Value>(json) {
            Ok(mut v) => {
                self.scrub(&mut v);
                v.to_string()
            }
            // Not JSON: only the value scrub applies.
            Err(_) => self.scrub_text(json),
        };
        self.cap(text)
    }

    fn cap(&self, text: String) -> String {
        if text.len() <= self.max_bytes {
            return text;
        }
        let mut end = self.max_bytes;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}…[{} more bytes]", &text[..end], text.len() - end)
    }

    /// The `result` of a JSON-RPC response, redacted and capped.
    pub(crate) fn render_result(&self, response: &[u8]) -> Option<String> {
        #[derive(serde::Deserialize)]
        struct Response<'a> {
            #[serde(borrow)]
            result: Option<&'a serde_json::value::RawValue>,
        }
        let r: Response<'_> = serde_json::from_slice(response).ok()?;
        r.result.map(|raw| self.render(raw.get()))
    }
}

/// The secrets a config file refers to: the values of the `${VAR}` it names and of the
/// `file:PATH` strings it holds, as they are now (what the connectors and sources read).
pub(crate) fn config_secret_values(text: &str) -> Vec<String> {
    let mut values = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else { break };
        let name = &after[..end];
        if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            if let Ok(v) = std::env::var(name) {
                values.push(v.trim().to_owned());
            }
        }
        rest = &after[end..];
    }
    let mut rest = text;
    while let Some(start) = rest.find("\"file:") {
        let after = &rest[start + 6..];
        let Some(end) = after.find('"') else { break };
        if let Ok(v) = std::fs::read_to_string(&after[..end]) {
            values.push(v.trim().to_owned());
        }
        rest = &after[end..];
    }
    values.retain(|v| !v.is_empty());
    values
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redactor(values: &[&str]) -> Redactor {
        Redactor::new(&CaptureSettings {
            arguments: true,
            results: true,
            max_bytes: 200,
            redact_keys: vec!["ssn".into()],
            redact_values: values.iter().map(|v| (*v).to_owned()).collect(),
        })
    }

    #[test]
    fn credential_keys_are_redacted_at_any_depth_and_the_rest_kept() {
        let r = redactor(&[]);
        let out = r.render(
            r#"{"user":"ann","Password":"p1","nested":{"access_token":"t","X-Api-Key":"k","SSN":"1"},"list":[{"client_secret":"s"}],"max":3}"#,
        );
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["user"], "ann");
        assert_eq!(v["max"], 3);
        for p in [
            "/Password",
            "/nested/access_token",
            "/nested/X-Api-Key",
            "/nested/SSN",
            "/list/0/client_secret",
        ] {
            assert_eq!(v.pointer(p).unwrap(), REDACTED, "{p} in {out}");
        }
    }

    #[test]
    fn config_secret_values_are_cut_out_of_any_text() {
        let r = redactor(&["hunter2-secret"]);
        let out = r.render(r#"{"note":"the key is hunter2-secret, keep it"}"#);
        assert!(!out.contains("hunter2"), "{out}");
        assert!(out.contains(REDACTED), "{out}");
    }

    #[test]
    fn long_values_are_capped_on_a_char_boundary_and_marked() {
        let r = redactor(&[]);
        let out = r.render(&serde_json::json!({ "text": "é".repeat(500) }).to_string());
        assert!(out.len() < 260, "{}", out.len());
        assert!(out.contains("more bytes]"), "{out}");
    }

    #[test]
    fn the_config_files_secret_references_are_resolved() {
        std::env::set_var("TOOLYARD_CAPTURE_TEST_SECRET", "s3cr3t-value");
        let path = std::env::temp_dir().join(format!("toolyard-capture-{}", std::process::id()));
        std::fs::write(&path, "file-secret-value\n").unwrap();
        let text = format!(
            "[connectors.github]\ntoken = \"${{TOOLYARD_CAPTURE_TEST_SECRET}}\"\n[x]\nkey = \"file:{}\"\n",
            path.display()
        );
        let values = config_secret_values(&text);
        let _ = std::fs::remove_file(&path);
        assert_eq!(values, vec!["s3cr3t-value", "file-secret-value"]);
    }

    #[test]
    fn settings_never_print_the_secret_values() {
        let s = CaptureSettings {
            redact_values: vec!["s3cr3t-value".into()],
            ..CaptureSettings::default()
        };
        assert!(!format!("{s:?}").contains("s3cr3t"));
    }

    #[test]
    fn the_result_of_a_response_is_rendered() {
        let r = redactor(&[]);
        let out = r
            .render_result(br#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"token":"x"}}"#)
            .unwrap();
        assert_eq!(out, r#"{"content":[],"token":"[REDACTED]"}"#);
        assert_eq!(
            r.render_result(br#"{"jsonrpc":"2.0","id":1,"error":{}}"#),
            None
        );
    }
}
