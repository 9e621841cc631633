//! Which repositories the tools may touch: the operator's `repos = ["org/*", "!org/secret"]`.
//!
//! This is the answer to the private-repository exfiltration incident (github-mcp-server
//! #844): a token reaches far more than the task needs, so a prompt-injected model could read
//! a private repository and write it into a public one. Every tool that names a repository
//! asks [`RepoFilter::check`] before any request is sent, and every search or listing drops
//! items from a repository [`RepoFilter::allows`] refuses, so a denied repository is never
//! read, written, or even seen.
//!
//! The names are also validated here (GitHub's own character sets), because they become URL
//! path segments: `../` or `?` in an `owner` must never reach the request.

use toolyard::HandlerError;

/// One `owner/name` glob.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Pattern {
    owner: String,
    name: String,
}

impl Pattern {
    fn parse(text: &str) -> Result<Pattern, String> {
        let (owner, name) = text
            .split_once('/')
            .ok_or_else(|| format!("`{text}` is not `owner/name` (globs with `*` allowed)"))?;
        let ok = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '*'))
        };
        if !ok(owner) || !ok(name) {
            return Err(format!(
                "`{text}` is not `owner/name` (letters, digits, `-`, `_`, `.`, and `*`)"
            ));
        }
        Ok(Pattern {
            owner: owner.to_ascii_lowercase(),
            name: name.to_ascii_lowercase(),
        })
    }

    fn matches(&self, owner: &str, name: &str) -> bool {
        glob(&self.owner, &owner.to_ascii_lowercase())
            && glob(&self.name, &name.to_ascii_lowercase())
    }
}

/// `*` matches any run of characters (none included); everything else matches itself.
fn glob(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if pi < p.len() && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// The operator's allow and deny lists.
#[derive(Debug, Clone, Default)]
pub(crate) struct RepoFilter {
    allow: Vec<Pattern>,
    deny: Vec<Pattern>,
}

impl RepoFilter {
    /// Parses the config's list; `!` marks a deny entry.
    pub(crate) fn parse(entries: &[String]) -> Result<RepoFilter, String> {
        let mut filter = RepoFilter::default();
        for entry in entries {
            let entry = entry.trim();
            match entry.strip_prefix('!') {
                Some(deny) => filter.deny.push(Pattern::parse(deny.trim())?),
                None => filter.allow.push(Pattern::parse(entry)?),
            }
        }
        Ok(filter)
    }

    /// Whether `owner/name` may be touched: not denied, and allowed (no allow entries
    /// means every repository not denied).
    pub(crate) fn allows(&self, owner: &str, name: &str) -> bool {
        if self.deny.iter().any(|p| p.matches(owner, name)) {
            return false;
        }
        self.allow.is_empty() || self.allow.iter().any(|p| p.matches(owner, name))
    }

    /// [`RepoFilter::allows`] for `owner/name` written as one string (a search item's
    /// `full_name`); anything that is not `owner/name` is refused.
    pub(crate) fn allows_full_name(&self, full_name: &str) -> bool {
        match full_name.split_once('/') {
            Some((owner, name)) if !name.contains('/') => self.allows(owner, name),
            _ => false,
        }
    }

    /// Whether the lists restrict anything at all.
    pub(crate) fn is_open(&self) -> bool {
        self.allow.is_empty() && self.deny.is_empty()
    }

    /// A tool's `owner` and `repo` arguments: valid names and an allowed repository, or
    /// the tool error (before any request is made).
    pub(crate) fn check(&self, owner: &str, repo: &str) -> Result<(), HandlerError> {
        valid_owner(owner)?;
        valid_repo(repo)?;
        if !self.allows(owner, repo) {
            return Err(HandlerError::failed(format!(
                "{owner}/{repo} is not among the repositories this server may access (the operator's `repos` list)"
            )));
        }
        Ok(())
    }
}

/// A user or organization login: letters, digits and `-` (GitHub's rule), at most 100.
pub(crate) fn valid_owner(owner: &str) -> Result<(), HandlerError> {
    let ok = !owner.is_empty()
        && owner.len() <= 100
        && owner.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
    if ok {
        Ok(())
    } else {
        Err(HandlerError::invalid_arguments(
            "owner must be a GitHub login (letters, digits and `-`)",
        ))
    }
}

/// A repository name: letters, digits, `-`, `_`, `.` (not `.` or `..`), at most 100.
fn valid_repo(repo: &str) -> Result<(), HandlerError> {
    let ok = !repo.is_empty()
        && repo.len() <= 100
        && repo != "."
        && repo != ".."
        && repo
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(HandlerError::invalid_arguments(
            "repo must be a repository name (letters, digits, `-`, `_` and `.`)",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(entries: &[&str]) -> RepoFilter {
        RepoFilter::parse(&entries.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn an_empty_list_allows_every_repository() {
        let f = filter(&[]);
        assert!(f.is_open());
        assert!(f.allows("anyone", "anything"));
    }

    #[test]
    fn an_org_glob_allows_its_repositories_and_a_deny_entry_wins() {
        let f = filter(&["org/*", "!org/secret", "me/one"]);
        assert!(f.allows("org", "public"));
        assert!(f.allows("ORG", "Public"), "names are case-insensitive");
        assert!(!f.allows("org", "secret"));
        assert!(!f.allows("Org", "SECRET"), "a deny is case-insensitive too");
        assert!(f.allows("me", "one"));
        assert!(!f.allows("me", "two"));
        assert!(!f.allows("other", "public"));
        assert!(
            !f.allows("organisation", "x"),
            "`org/*` is not a prefix match"
        );
    }

    #[test]
    fn only_deny_entries_allow_everything_else() {
        let f = filter(&["!org/secret", "!*/private-*"]);
        assert!(f.allows("org", "other"));
        assert!(!f.allows("org", "secret"));
        assert!(!f.allows("anyone", "private-notes"));
        assert!(f.allows("anyone", "notes-private"));
    }

    #[test]
    fn globs_match_inner_and_repeated_stars() {
        assert!(glob("a*c", "abbbc"));
        assert!(glob("a*c", "ac"));
        assert!(!glob("a*c", "abcd"));
        assert!(glob("*-*-x", "a-b-c-x"));
        assert!(glob("*", ""));
        assert!(!glob("", "a"));
    }

    #[test]
    fn full_names_are_split_once_and_anything_else_is_refused() {
        let f = filter(&["org/*"]);
        assert!(f.allows_full_name("org/repo"));
        assert!(!f.allows_full_name("org/repo/extra"));
        assert!(!f.allows_full_name("org"));
    }

    #[test]
    fn bad_entries_are_refused_at_start_up() {
        assert!(RepoFilter::parse(&["org".to_owned()]).is_err());
        assert!(RepoFilter::parse(&["org/a b".to_owned()]).is_err());
        assert!(RepoFilter::parse(&["!/x".to_owned()]).is_err());
    }

    #[test]
    fn names_that_would_change_the_url_path_are_refused() {
        let f = filter(&[]);
        assert!(f.check("org", "repo").is_ok());
        assert!(f.check("org", "re.po_-1").is_ok());
        assert!(f.check("..", "repo").is_err());
        assert!(f.check("org", "..").is_err());
        assert!(f.check("org/x", "repo").is_err());
        assert!(f.check("org", "repo?x=1").is_err());
        assert!(f.check("org", "").is_err());
        assert!(f.check("org", "a/b").is_err());
    }

    #[test]
    fn a_denied_repository_is_refused_with_its_name_and_the_reason() {
        let f = filter(&["!org/secret"]);
        let e = f.check("org", "secret").unwrap_err();
        assert!(format!("{e:?}").contains("org/secret"), "{e:?}");
    }
}
