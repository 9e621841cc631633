//! Who may see and use a definition.
//!
//! A tool, prompt, resource or template is for everyone unless it is given an
//! [`Audience`]: then only callers whose principal (the identity the transport authenticated,
//! [`RequestContext::principal`](crate::RequestContext::principal)) it admits see it listed
//! and may call, get, read or subscribe to it. To anyone else it is not there: not listed,
//! and used it answers as a name or URI the server does not know, so a caller learns nothing
//! of what it may not use. A caller with no principal is admitted by no audience.
//!
//! One check, at the registry: every path to a definition (both generations, every
//! transport, a worker serving the bus) goes through it, so there is no way round it to
//! forget. A listing that hides something differs from caller to caller, so its 2026-07-28
//! `cacheScope` becomes `private` whenever any definition of its kind has an audience.

use std::collections::BTreeSet;
use std::sync::Arc;

/// The principals a definition is for (see the module docs).
#[derive(Clone)]
pub struct Audience(Admits);

#[derive(Clone)]
enum Admits {
    /// A list, which can be told (a NATS worker publishes it for its gateways).
    Listed(Arc<BTreeSet<String>>),
    /// A predicate, which cannot.
    When(Arc<dyn Fn(&str) -> bool + Send + Sync>),
}

impl Audience {
    /// Exactly these principals.
    pub fn principals<I, S>(principals: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let set: BTreeSet<String> = principals.into_iter().map(Into::into).collect();
        Audience(Admits::Listed(Arc::new(set)))
    }

    /// The principals `admits` says yes to (a role looked up elsewhere, a pattern, a hash of
    /// the principal). It is asked on every listing and every use, so it should be quick.
    pub fn when(admits: impl Fn(&str) -> bool + Send + Sync + 'static) -> Self {
        Audience(Admits::When(Arc::new(admits)))
    }

    /// Whether a caller with this principal (`None`: not authenticated) is in the audience.
    pub fn admits(&self, principal: Option<&str>) -> bool {
        principal.is_some_and(|p| match &self.0 {
            Admits::Listed(set) => set.contains(p),
            Admits::When(admits) => admits(p),
        })
    }

    /// The principals, when the audience is a list ([`Audience::principals`]); `None` for
    /// a predicate.
    pub fn listed(&self) -> Option<&BTreeSet<String>> {
        match &self.0 {
            Admits::Listed(set) => Some(set),
            Admits::When(_) => None,
        }
    }
}

impl std::fmt::Debug for Audience {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Audience(..)")
    }
}

/// What a server offers only to some callers, as its listings show each item, with whom it
/// is for ([`Server::for_audiences`](crate::Server::for_audiences)), in registration order.
#[derive(Debug, Clone, Default)]
pub struct ForAudiences {
    /// Tools.
    pub tools: Vec<(toolyard_proto::Tool, Audience)>,
    /// Prompts.
    pub prompts: Vec<(toolyard_proto::Prompt, Audience)>,
    /// Static resources.
    pub resources: Vec<(toolyard_proto::Resource, Audience)>,
    /// Resource templates.
    pub templates: Vec<(toolyard_proto::ResourceTemplate, Audience)>,
}

/// A definition that may have an audience: what the registry's listing and lookups ask.
pub(crate) trait Audienced {
    fn audience(&self) -> Option<&Audience>;

    /// Whether a caller with `principal` may see and use it.
    fn admits(&self, principal: Option<&str>) -> bool {
        self.audience().is_none_or(|a| a.admits(principal))
    }
}

/// Who a change to the registries is news to: everyone, or only the callers an audience of
/// a changed item admits.
///
/// A `list_changed` notification tells a listener to list again; one about an item it may
/// not see tells it that something it cannot see exists and changed (a user's own worker
/// pool starting, say), and makes every listener of a gateway with many users list again
/// when any one user's items change. So the server sends a list change only to the
/// listeners it concerns: those some changed item (as it was, or as it is now) was or is
/// visible to. A change to any item for everyone reaches everyone.
#[derive(Debug, Clone, Default)]
pub struct Reach(Option<Vec<Audience>>);

impl Reach {
    /// Every listener.
    pub fn everyone() -> Self {
        Reach(None)
    }

    /// The listeners `audience` admits.
    pub fn only(audience: Audience) -> Self {
        Reach(Some(vec![audience]))
    }

    /// Whether a listener with this principal (`None`: not authenticated) is told.
    pub fn admits(&self, principal: Option<&str>) -> bool {
        self.0
            .as_ref()
            .is_none_or(|audiences| audiences.iter().any(|a| a.admits(principal)))
    }

    /// Whether it reaches every listener.
    pub fn is_everyone(&self) -> bool {
        self.0.is_none()
    }

    /// Widens it to the callers `other` reaches as well.
    pub fn widen(&mut self, other: Reach) {
        match (&mut self.0, other.0) {
            (None, _) => {}
            (mine, None) => *mine = None,
            (Some(mine), Some(theirs)) => mine.extend(theirs),
        }
    }

    /// Widens it to those who may see `item` (everyone when it has no audience).
    pub(crate) fn widen_to<T: Audienced + ?Sized>(&mut self, item: &T) {
        match item.audience() {
            Some(a) => self.widen(Reach::only(a.clone())),
            None => self.0 = None,
        }
    }

    /// The principals it reaches when every audience in it is a list; `None` when it reaches
    /// everyone or an audience is a predicate (which cannot be told to another process).
    pub fn listed(&self) -> Option<BTreeSet<String>> {
        let mut all = BTreeSet::new();
        for a in self.0.as_ref()? {
            all.extend(a.listed()?.iter().cloned());
        }
        Some(all)
    }

    /// Nobody at all: the start of a change that widens it item by item.
    pub(crate) fn nobody() -> Self {
        Reach(Some(Vec::new()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn principals_admit_exactly_themselves_and_no_anonymous_caller() {
        let a = Audience::principals(["alice", "bob@example.com"]);
        assert!(a.admits(Some("alice")));
        assert!(a.admits(Some("bob@example.com")));
        assert!(!a.admits(Some("Alice")));
        assert!(!a.admits(Some("alice ")));
        assert!(!a.admits(Some("")));
        assert!(!a.admits(None));
        let listed: Vec<&str> = a.listed().unwrap().iter().map(String::as_str).collect();
        assert_eq!(listed, ["alice", "bob@example.com"]);
    }

    #[test]
    fn a_predicate_decides_but_never_for_an_anonymous_caller() {
        let a = Audience::when(|p| p.ends_with("@example.com"));
        assert!(a.admits(Some("carol@example.com")));
        assert!(!a.admits(Some("carol@example.org")));
        let everyone = Audience::when(|_| true);
        assert!(everyone.admits(Some("x")));
        assert!(!everyone.admits(None));
        assert!(everyone.listed().is_none());
    }

    #[test]
    fn a_reach_widens_to_everyone_once_any_item_is_for_everyone() {
        let mut r = Reach::nobody();
        assert!(!r.admits(Some("alice")));
        r.widen(Reach::only(Audience::principals(["alice"])));
        r.widen(Reach::only(Audience::principals(["bob"])));
        assert!(r.admits(Some("alice")) && r.admits(Some("bob")));
        assert!(!r.admits(Some("carol")) && !r.admits(None));
        let listed: Vec<String> = r.listed().unwrap().into_iter().collect();
        assert_eq!(listed, ["alice", "bob"]);
        r.widen(Reach::only(Audience::when(|p| p == "dave")));
        assert!(r.admits(Some("dave")));
        assert!(r.listed().is_none(), "a predicate cannot be told");
        r.widen(Reach::everyone());
        assert!(r.is_everyone() && r.admits(None));
        r.widen(Reach::only(Audience::principals(["alice"])));
        assert!(r.is_everyone(), "nothing narrows it again");
    }
}
