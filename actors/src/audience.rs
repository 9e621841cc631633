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

    /// Whether `other` is this very audience, made once and cloned onto many items (as a
    /// gateway gives every item of one user's pool the same one): a [`Reach`] keeps it once,
    /// so a change of all those items asks it once a listener, not once an item.
    fn is(&self, other: &Audience) -> bool {
        match (&self.0, &other.0) {
            (Admits::Listed(a), Admits::Listed(b)) => Arc::ptr_eq(a, b),
            (Admits::When(a), Admits::When(b)) => Arc::ptr_eq(a, b),
            _ => false,
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

    /// Whether `other` is listed exactly as this is, to whoever may see both.
    fn listed_alike(&self, other: &Self) -> bool;

    /// Whether a caller with `principal` may see and use it.
    fn admits(&self, principal: Option<&str>) -> bool {
        self.audience().is_none_or(|a| a.admits(principal))
    }
}

/// Who a change to the registries is news to: everyone, or only the callers whose listing it
/// changes.
///
/// A `list_changed` notification tells a listener to list again; one about an item it may
/// not see tells it that something it cannot see exists and changed (a user's own worker
/// pool starting, say), and makes every listener of a gateway with many users list again
/// when any one user's items change. So the server sends a list change only to the
/// listeners whose listing it changes: for an item added or removed, those who may see it;
/// for an item replaced, those who could see it before or can now, and when it is listed
/// alike (the same tool, prompt or resource, only its audience changed: another user's pool
/// of the same server joining) only those who see it on one side and not the other.
#[derive(Debug, Clone, Default)]
pub struct Reach(Option<Vec<Told>>);

/// One part of a [`Reach`].
#[derive(Debug, Clone)]
enum Told {
    /// Those an audience admits.
    In(Audience),
    /// Those admitted on one side only (`None`: everyone, the anonymous caller included).
    Between(Option<Audience>, Option<Audience>),
}

impl Told {
    fn admits(&self, principal: Option<&str>) -> bool {
        let sees = |a: &Option<Audience>| a.as_ref().is_none_or(|a| a.admits(principal));
        match self {
            Told::In(a) => a.admits(principal),
            Told::Between(before, now) => sees(before) != sees(now),
        }
    }

    /// Whether it is `other` (the same audiences, [`Audience::is`]).
    fn is(&self, other: &Told) -> bool {
        let same = |a: &Option<Audience>, b: &Option<Audience>| match (a, b) {
            (Some(a), Some(b)) => a.is(b),
            (None, None) => true,
            _ => false,
        };
        match (self, other) {
            (Told::In(a), Told::In(b)) => a.is(b),
            (Told::Between(a, b), Told::Between(c, d)) => same(a, c) && same(b, d),
            _ => false,
        }
    }

    /// The principals it admits, when that is a list.
    fn listed(&self) -> Option<BTreeSet<String>> {
        match self {
            Told::In(a) => a.listed().cloned(),
            Told::Between(Some(before), Some(now)) => Some(
                before
                    .listed()?
                    .symmetric_difference(now.listed()?)
                    .cloned()
                    .collect(),
            ),
            // Everyone but a list: not a list.
            Told::Between(..) => None,
        }
    }
}

impl Reach {
    /// Every listener.
    pub fn everyone() -> Self {
        Reach(None)
    }

    /// The listeners `audience` admits.
    pub fn only(audience: Audience) -> Self {
        Reach(Some(vec![Told::In(audience)]))
    }

    /// Whether a listener with this principal (`None`: not authenticated) is told.
    pub fn admits(&self, principal: Option<&str>) -> bool {
        self.0
            .as_ref()
            .is_none_or(|told| told.iter().any(|t| t.admits(principal)))
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
            (Some(mine), Some(theirs)) => {
                // A part already there is kept once: a change of many items given one
                // audience asks it once a listener.
                for told in theirs {
                    if !mine.iter().any(|m| m.is(&told)) {
                        mine.push(told);
                    }
                }
            }
        }
    }

    /// Widens it to those who may see `item` (everyone when it has no audience).
    pub(crate) fn widen_to<T: Audienced + ?Sized>(&mut self, item: &T) {
        match item.audience() {
            Some(a) => self.widen(Reach::only(a.clone())),
            None => self.0 = None,
        }
    }

    /// Widens it to those whose listing changes when `now` replaces `before`.
    pub(crate) fn widen_to_replaced<T: Audienced>(&mut self, before: &T, now: &T) {
        if !now.listed_alike(before) {
            self.widen_to(before);
            self.widen_to(now);
            return;
        }
        if before.audience().is_none() && now.audience().is_none() {
            return;
        }
        let between = Told::Between(before.audience().cloned(), now.audience().cloned());
        self.widen(Reach(Some(vec![between])));
    }

    /// The principals it reaches when that is a list (every part of it an audience that is
    /// a list of principals); `None` when it reaches everyone, or a predicate or "everyone
    /// but" decides (which cannot be told to another process).
    pub fn listed(&self) -> Option<BTreeSet<String>> {
        let mut all = BTreeSet::new();
        for told in self.0.as_ref()? {
            all.extend(told.listed()?);
        }
        Some(all)
    }

    /// Nobody at all: the start of a change that widens it item by item.
    pub(crate) fn nobody() -> Self {
        Reach(Some(Vec::new()))
    }

    /// Whether it reaches nobody (nothing listed changed for anyone).
    pub(crate) fn is_nobody(&self) -> bool {
        self.0.as_ref().is_some_and(Vec::is_empty)
    }
}

/// A stand-in definition for tests here and in the registry's: its listing, and its
/// audience.
#[cfg(test)]
pub(crate) struct Item(pub(crate) &'static str, pub(crate) Option<Audience>);

#[cfg(test)]
impl Audienced for Item {
    fn audience(&self) -> Option<&Audience> {
        self.1.as_ref()
    }
    fn listed_alike(&self, other: &Self) -> bool {
        self.0 == other.0
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

    #[test]
    fn a_change_of_many_items_given_one_audience_asks_it_once_a_listener() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let asked = Arc::new(AtomicUsize::new(0));
        let counted = asked.clone();
        let pool = Audience::when(move |p| {
            counted.fetch_add(1, Ordering::Relaxed);
            p == "alice"
        });
        let before = Audience::principals(["alice"]);
        let mut r = Reach::nobody();
        for i in 0..50 {
            r.widen_to(&Item(["a", "b"][i % 2], Some(pool.clone())));
            // Replaced by their like, from one audience to the other.
            r.widen_to_replaced(
                &Item("t", Some(before.clone())),
                &Item("t", Some(pool.clone())),
            );
        }
        assert!(r.admits(Some("alice")));
        assert!(!r.admits(Some("bob")));
        // bob: once for the 50 added items, once for the 50 replaced ones' "now" side;
        // alice: once, the first part admits her. Without the dedup: 101.
        assert_eq!(asked.load(Ordering::Relaxed), 3);
        // Equal but not the same audience: each kept.
        let mut r = Reach::nobody();
        r.widen_to(&Item("a", Some(Audience::when(|_| false))));
        r.widen_to(&Item("b", Some(Audience::when(|_| false))));
        assert_eq!(r.0.as_ref().map(Vec::len), Some(2));
    }

    #[test]
    fn an_item_replaced_by_its_like_is_news_only_to_those_who_see_it_on_one_side() {
        let only = |who: &[&str]| Some(Audience::principals(who.iter().copied()));
        let replaced = |before: Item, now: Item| {
            let mut r = Reach::nobody();
            r.widen_to_replaced(&before, &now);
            r
        };
        // bob's pool joins alice's: bob is told, alice is not.
        let r = replaced(
            Item("t", only(&["alice"])),
            Item("t", only(&["alice", "bob"])),
        );
        assert!(r.admits(Some("bob")) && !r.admits(Some("alice")) && !r.admits(None));
        assert_eq!(r.listed().unwrap().into_iter().collect::<Vec<_>>(), ["bob"]);
        // What was everyone's made alice's: everyone else is told, the anonymous caller too.
        let r = replaced(Item("t", None), Item("t", only(&["alice"])));
        assert!(r.admits(Some("bob")) && r.admits(None) && !r.admits(Some("alice")));
        assert!(r.listed().is_none(), "everyone but alice is not a list");
        // The same to the same callers: nobody.
        assert!(replaced(Item("t", None), Item("t", None)).is_nobody());
        let r = replaced(Item("t", only(&["alice"])), Item("t", only(&["alice"])));
        assert!(!r.admits(Some("alice")) && !r.admits(Some("bob")));
        // Listed differently: everyone who sees either side.
        let r = replaced(
            Item("t", only(&["alice"])),
            Item("u", only(&["alice", "bob"])),
        );
        assert!(r.admits(Some("alice")) && r.admits(Some("bob")) && !r.admits(Some("carol")));
    }
}
