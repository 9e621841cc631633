//! robots.txt (RFC 9309): which group applies to our user agent, and whether a path is
//! allowed. The fetching policy around it (5xx and network errors mean "disallow all", 4xx
//! means "allow all") lives with the fetcher.

/// The rules of the group that applies to us.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Rules {
    /// (allow, pattern)
    rules: Vec<(bool, String)>,
}

impl Rules {
    /// Everything allowed.
    pub(crate) fn allow_all() -> Rules {
        Rules::default()
    }

    /// Everything disallowed.
    pub(crate) fn deny_all() -> Rules {
        Rules {
            rules: vec![(false, "/".to_owned())],
        }
    }

    /// The group for `product` (case-insensitive), else the `*` group, of `text`.
    pub(crate) fn parse(text: &str, product: &str) -> Rules {
        let product = product.to_ascii_lowercase();
        let mut specific: Option<Vec<(bool, String)>> = None;
        let mut star: Option<Vec<(bool, String)>> = None;
        // The agents of the group being read, and whether its rules have started.
        let mut agents: Vec<String> = Vec::new();
        let mut rules: Vec<(bool, String)> = Vec::new();
        let mut in_rules = false;
        let mut finish = |agents: &mut Vec<String>, rules: &mut Vec<(bool, String)>| {
            for agent in agents.iter() {
                if agent == "*" {
                    star.get_or_insert_with(Vec::new)
                        .extend(rules.iter().cloned());
                } else if *agent == product {
                    specific
                        .get_or_insert_with(Vec::new)
                        .extend(rules.iter().cloned());
                }
            }
            agents.clear();
            rules.clear();
        };
        for line in text.lines() {
            let line = line.split('#').next().unwrap_or("").trim();
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            let key = key.trim().to_ascii_lowercase();
            let value = value.trim();
            match key.as_str() {
                "user-agent" => {
                    if in_rules {
                        finish(&mut agents, &mut rules);
                        in_rules = false;
                    }
                    agents.push(value.to_ascii_lowercase());
                }
                "allow" | "disallow" => {
                    in_rules = true;
                    // An empty Disallow allows everything: no rule.
                    if !value.is_empty() {
                        rules.push((key == "allow", value.to_owned()));
                    }
                }
                _ => {}
            }
        }
        finish(&mut agents, &mut rules);
        Rules {
            rules: specific.or(star).unwrap_or_default(),
        }
    }

    /// Whether `path` (with its query) may be fetched: the longest matching rule wins, and
    /// `allow` wins a tie.
    pub(crate) fn allows(&self, path: &str) -> bool {
        let mut best: Option<(usize, bool)> = None;
        for (allow, pattern) in &self.rules {
            if matches(pattern, path) {
                let len = pattern.len();
                best = match best {
                    Some((l, a)) if l > len || (l == len && a) => Some((l, a)),
                    _ => Some((len, *allow)),
                };
            }
        }
        best.is_none_or(|(_, allow)| allow)
    }
}

/// RFC 9309 matching: a prefix match with `*` for any run of characters and `$` for the end.
fn matches(pattern: &str, path: &str) -> bool {
    fn go(p: &[u8], s: &[u8]) -> bool {
        match p.first() {
            None => true,
            Some(b'$') if p.len() == 1 => s.is_empty(),
            Some(b'*') => (0..=s.len()).any(|i| go(&p[1..], &s[i..])),
            Some(c) => s.first() == Some(c) && go(&p[1..], &s[1..]),
        }
    }
    go(pattern.as_bytes(), path.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "
# comment
User-agent: *
Disallow: /private
Allow: /private/open$

User-agent: OtherBot
User-agent: ToolyardFetch
Disallow: /no-tools
Allow: /no-tools/yes
";

    #[test]
    fn our_group_wins_over_the_star_group() {
        let ours = Rules::parse(TEXT, "ToolyardFetch");
        assert!(!ours.allows("/no-tools/x"));
        assert!(ours.allows("/no-tools/yes/1"));
        assert!(ours.allows("/private"));
        let others = Rules::parse(TEXT, "SomeoneElse");
        assert!(!others.allows("/private/x"));
        assert!(others.allows("/private/open"));
        assert!(!others.allows("/private/open/more"));
        assert!(others.allows("/public"));
    }

    #[test]
    fn wildcards_and_empty_disallow() {
        let r = Rules::parse("User-agent: *\nDisallow: /*.pdf$\nDisallow:\n", "x");
        assert!(!r.allows("/a/b.pdf"));
        assert!(r.allows("/a/b.pdf?x=1"));
        assert!(r.allows("/"));
        assert!(!Rules::deny_all().allows("/anything"));
        assert!(Rules::allow_all().allows("/anything"));
    }
}
