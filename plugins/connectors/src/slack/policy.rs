//! What the operator allows a model to do in Slack: post or react only in the channels
//! named in the config (`post_channels`, `react_channels`; `"*"` for anywhere), and let Slack
//! unfurl a posted message's links only when every link's host is on `unfurl_hosts` (the
//! archived reference server posted with unfurling on, so a link carrying secret data in its
//! URL was fetched by Slack with no click: Embrace The Red's 2025 advisory). Also the
//! Markdown-to-mrkdwn conversion of posted text.

use super::client::Client;
use super::resolve::{looks_like_id, Names};
use toolyard::HandlerError;

/// The channels one kind of write may reach.
#[derive(Debug, Clone, Default)]
pub(crate) struct Gate {
    any: bool,
    entries: Vec<String>,
}

impl Gate {
    pub(crate) fn new(list: &[String]) -> Result<Gate, String> {
        let mut gate = Gate::default();
        for entry in list {
            let entry = entry.trim();
            if entry == "*" {
                gate.any = true;
            } else if entry.starts_with('#') || entry.starts_with('@') || looks_like_id(entry) {
                gate.entries.push(entry.to_owned());
            } else {
                return Err(format!(
                    "`{entry}` is not a channel: write an ID (C0123ABCD), #channel, @user or \"*\""
                ));
            }
        }
        Ok(gate)
    }

    /// Whether the tools this gate guards are offered at all.
    pub(crate) fn offered(&self) -> bool {
        self.any || !self.entries.is_empty()
    }

    fn describe(&self) -> String {
        self.entries.join(", ")
    }

    /// The conversation ID `target` names, if this gate lets `tool` write there. A target
    /// that matches an entry as written, or an ID target when every entry is an ID, is
    /// decided without any request; otherwise the names are resolved (reads only) and the
    /// IDs compared. Nothing is ever written before this answers.
    pub(crate) async fn admit(
        &self,
        tool: &str,
        names: &Names,
        client: &Client,
        target: &str,
    ) -> Result<String, HandlerError> {
        let target = target.trim();
        let refused = || {
            HandlerError::failed(format!(
                "{tool} may not write to {target}: the operator allows only {} ([connectors.slack] {})",
                self.describe(),
                if tool == "conversations_add_message" {
                    "post_channels"
                } else {
                    "react_channels"
                }
            ))
        };
        if self.any || self.entries.iter().any(|e| e == target) {
            return names.conversation(client, target).await;
        }
        let ids: Vec<&String> = self.entries.iter().filter(|e| looks_like_id(e)).collect();
        let named: Vec<&String> = self.entries.iter().filter(|e| !looks_like_id(e)).collect();
        if looks_like_id(target) {
            // Only the named entries can still match: resolve them and compare.
            for entry in named {
                if let Ok(id) = names.conversation(client, entry).await {
                    if id == target {
                        return Ok(id);
                    }
                }
            }
            return Err(refused());
        }
        if ids.is_empty() {
            return Err(refused());
        }
        let id = names.conversation(client, target).await?;
        if ids.iter().any(|e| **e == id) {
            Ok(id)
        } else {
            Err(refused())
        }
    }
}

/// The hosts of the links in `text`: `http(s)://` URLs anywhere (also inside `<url|label>`
/// and `[label](url)`), and bare names like `example.com/path`, which Slack links too.
pub(crate) fn link_hosts(text: &str) -> Vec<String> {
    let lower = text.to_lowercase();
    let mut hosts = Vec::new();
    let stop = |c: char| {
        c.is_whitespace()
            || matches!(
                c,
                '/' | '?'
                    | '#'
                    | '|'
                    | '>'
                    | '<'
                    | ')'
                    | '('
                    | ']'
                    | '['
                    | '"'
                    | '\''
                    | ','
                    | '*'
                    | '`'
                    | '\\'
            )
    };
    for (i, _) in lower.match_indices("://") {
        let rest = &lower[i + 3..];
        let end = rest.find(stop).unwrap_or(rest.len());
        let authority = &rest[..end];
        let host = authority.rsplit('@').next().unwrap_or(authority);
        let host = host.split(':').next().unwrap_or(host);
        if !host.is_empty() {
            hosts.push(host.trim_end_matches('.').to_owned());
        }
    }
    for word in lower.split(|c: char| {
        c.is_whitespace()
            || matches!(
                c,
                '<' | '>' | '|' | '(' | ')' | '[' | ']' | '"' | '\'' | '`' | '*'
            )
    }) {
        if word.contains("://") {
            continue;
        }
        let name = word.split(['/', '?', '#']).next().unwrap_or("");
        let name = name.rsplit('@').next().unwrap_or(name);
        let name = name
            .split(':')
            .next()
            .unwrap_or(name)
            .trim_end_matches(['.', ',', ';', '!']);
        let labels: Vec<&str> = name.split('.').collect();
        let is_host = labels.len() >= 2
            && labels
                .iter()
                .all(|l| !l.is_empty() && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
            && labels
                .last()
                .is_some_and(|tld| tld.len() >= 2 && tld.chars().all(|c| c.is_ascii_alphabetic()));
        if is_host {
            hosts.push(name.to_owned());
        }
    }
    hosts.sort();
    hosts.dedup();
    hosts
}

/// Whether Slack may unfurl `text`'s links: it has some, and every host is listed (a listed
/// `example.com` covers its subdomains).
pub(crate) fn unfurl_allowed(text: &str, allowed: &[String]) -> bool {
    let hosts = link_hosts(text);
    !hosts.is_empty()
        && hosts.iter().all(|h| {
            allowed.iter().any(|a| {
                let a = a.trim().trim_start_matches("*.").to_lowercase();
                !a.is_empty() && (*h == a || h.ends_with(&format!(".{a}")))
            })
        })
}

/// Plain text for Slack: `&`, `<` and `>` escaped, so nothing becomes a link or a mention.
pub(crate) fn escape_plain(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Common Markdown in Slack's mrkdwn: `**b**` → `*b*`, `~~s~~` → `~s~`, `[t](u)` → `<u|t>`,
/// `# Heading` → `*Heading*`. Code spans, lists and quotes are the same in both.
pub(crate) fn markdown_to_mrkdwn(text: &str) -> String {
    let mut out = Vec::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        let heading = trimmed.trim_start_matches('#');
        let line = if trimmed.starts_with('#') && heading.starts_with(' ') {
            format!("*{}*", heading.trim())
        } else {
            line.replace("**", "*")
                .replace("__", "_")
                .replace("~~", "~")
        };
        out.push(links(&line));
    }
    out.join("\n")
}

/// `[t](u)` → `<u|t>`.
fn links(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(open) = rest.find('[') {
        let after = &rest[open + 1..];
        let Some(close) = after.find("](") else { break };
        let label = &after[..close];
        let tail = &after[close + 2..];
        let Some(end) = tail.find(')') else { break };
        let url = &tail[..end];
        out.push_str(&rest[..open]);
        if url.contains("://") || url.starts_with("mailto:") {
            out.push_str(&format!("<{url}|{label}>"));
        } else {
            out.push_str(&rest[open..open + 1 + close + 2 + end + 1]);
        }
        rest = &tail[end + 1..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_hosts_are_found_in_every_form() {
        let text = "see https://User@Docs.Example.com:8443/a?b=1, <http://x.test/p|label>, \
                    [t](https://md.example.org/q) and evil.example.net/?secret=1 e.g. not a host";
        assert_eq!(
            link_hosts(text),
            vec![
                "docs.example.com",
                "evil.example.net",
                "md.example.org",
                "x.test"
            ]
        );
        assert!(link_hosts("no links here, 3.14 either").is_empty());
    }

    #[test]
    fn unfurling_needs_every_link_listed() {
        let allowed = vec!["example.com".to_owned()];
        assert!(unfurl_allowed("https://docs.example.com/x", &allowed));
        assert!(unfurl_allowed("https://example.com", &allowed));
        assert!(!unfurl_allowed(
            "https://example.com and https://attacker.test/?k=SECRET",
            &allowed
        ));
        assert!(!unfurl_allowed("https://notexample.com", &allowed));
        assert!(!unfurl_allowed("no links", &allowed));
        assert!(!unfurl_allowed("https://example.com", &[]));
    }

    #[test]
    fn markdown_becomes_mrkdwn_and_plain_text_is_escaped() {
        assert_eq!(
            markdown_to_mrkdwn(
                "# Title\n**bold** and ~~gone~~, [docs](https://d.example/x) [not](a link)"
            ),
            "*Title*\n*bold* and ~gone~, <https://d.example/x|docs> [not](a link)"
        );
        assert_eq!(escape_plain("a < b & <@U1>"), "a &lt; b &amp; &lt;@U1&gt;");
    }

    #[test]
    fn a_gate_entry_must_be_a_channel() {
        assert!(!Gate::new(&[]).unwrap().offered());
        assert!(Gate::new(&["*".into()]).unwrap().offered());
        assert!(Gate::new(&["#ops".into(), "C123".into(), "@alice".into()])
            .unwrap()
            .offered());
        assert!(Gate::new(&["ops".into()]).is_err());
    }
}
