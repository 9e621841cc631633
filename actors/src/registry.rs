//! A read-mostly, ordered name -> definition table.
//!
//! Readers (calls, listings, the supervisor restarting a handler actor) load a snapshot
//! without locking. Writers (`Server::add_tools` and friends, from any thread) take a small
//! lock around load-clone-store, so a registration is applied before the call that made it
//! returns: a gateway that adds a source's tools can route calls to them at once (the
//! registration used to be a message to the handler actor, and a call right after it could
//! find the tool missing). Order is registration order, so listings are
//! deterministic, as 2026-07-28 asks for client-side caching.

use crate::audience::{Audienced, Reach};
use arc_swap::ArcSwap;
use indexmap::IndexMap;
use std::sync::{Arc, Mutex};

/// A snapshot of the table.
pub(crate) type Snapshot<T> = Arc<IndexMap<String, Defs<T>>>;

/// The definitions under one name: one, or several alternatives for different callers
/// (each with its audience, registered in one call), of which each caller gets the first
/// that admits it. A gateway whose users' own pools offer different versions of one tool
/// installs each for the users whose pool offers it, so no user is listed (or has
/// validated, or reads the description of) another user's definition.
pub(crate) struct Defs<T>(Arc<[Arc<T>]>);

impl<T> Clone for Defs<T> {
    fn clone(&self) -> Self {
        Defs(self.0.clone())
    }
}

impl<T> Defs<T> {
    /// The first registered (a name always has one).
    pub(crate) fn first(&self) -> &Arc<T> {
        &self.0[0]
    }
    /// Each of them, in registration order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Arc<T>> {
        self.0.iter()
    }
}

impl<T: Audienced> Defs<T> {
    /// The one a caller with `principal` gets: the first whose audience admits it.
    pub(crate) fn for_caller(&self, principal: Option<&str>) -> Option<&Arc<T>> {
        self.0.iter().find(|d| d.admits(principal))
    }
    /// Whether any of them has an audience.
    pub(crate) fn restricted(&self) -> bool {
        self.0.iter().any(|d| d.audience().is_some())
    }
}

/// Definitions by name.
pub(crate) struct Registry<T>(ArcSwap<IndexMap<String, Defs<T>>>, Mutex<()>);

impl<T> Default for Registry<T> {
    fn default() -> Self {
        Registry(ArcSwap::from_pointee(IndexMap::new()), Mutex::new(()))
    }
}

impl<T> Registry<T> {
    pub(crate) fn load(&self) -> Snapshot<T> {
        self.0.load_full()
    }
    /// The first definition of `name`, whoever may see it.
    pub(crate) fn get(&self, name: &str) -> Option<Arc<T>> {
        self.0.load().get(name).map(|d| d.first().clone())
    }
}

impl<T: Audienced + Send + Sync + 'static> Registry<T> {
    /// The definition of `name` a caller with `principal` gets (`Defs::for_caller`).
    pub(crate) fn get_for(&self, name: &str, principal: Option<&str>) -> Option<Arc<T>> {
        self.0.load().get(name)?.for_caller(principal).cloned()
    }

    /// Inserts or replaces; returns whose listing the change changes (`Reach`), `None` when
    /// nobody's does (nothing given, or each replaced by what lists the same to the same
    /// callers). Several definitions of one name given here, each with an audience, are its
    /// alternatives (`Defs`); otherwise the last given of a name is its definition.
    pub(crate) fn insert(
        &self,
        items: impl IntoIterator<Item = (String, Arc<T>)>,
    ) -> Option<Reach> {
        let mut given: IndexMap<String, Vec<Arc<T>>> = IndexMap::new();
        for (k, v) in items {
            given.entry(k).or_default().push(v);
        }
        let _writer = self.1.lock().unwrap_or_else(|p| p.into_inner());
        let mut next = IndexMap::clone(&self.0.load());
        let mut reach: Option<Reach> = None;
        for (k, mut defs) in given {
            if defs.len() > 1 && defs.iter().any(|d| d.audience().is_none()) {
                defs.drain(..defs.len() - 1);
            }
            let reach = reach.get_or_insert_with(Reach::nobody);
            let now = Defs(defs.into());
            match next.insert(k, now.clone()) {
                Some(old) if old.0.len() == 1 && now.0.len() == 1 => {
                    reach.widen_to_replaced(&**old.first(), &**now.first());
                }
                // Alternatives on either side, each for some callers: those who now get
                // what is listed otherwise than what they got (or nothing, or something),
                // asked of each listener.
                Some(old) if old.iter().chain(now.iter()).all(|d| d.audience().is_some()) => {
                    let (before, after) = (old.clone(), now.clone());
                    reach.widen(Reach::only(crate::Audience::when(move |p| {
                        match (before.for_caller(Some(p)), after.for_caller(Some(p))) {
                            (None, None) => false,
                            (Some(a), Some(b)) => !a.listed_alike(b),
                            _ => true,
                        }
                    })));
                }
                // One of them for everyone: whoever sees any of them, before or now.
                Some(old) => old
                    .iter()
                    .chain(now.iter())
                    .for_each(|d| reach.widen_to(&**d)),
                None => now.iter().for_each(|d| reach.widen_to(&**d)),
            }
        }
        self.0.store(Arc::new(next));
        // Replaced with what lists the same, to the same callers: news to nobody.
        reach.filter(|r| !r.is_nobody())
    }
    /// Removes names; returns who the change concerns (those who could see a removed
    /// definition), `None` when nothing was removed.
    pub(crate) fn remove(&self, names: &[String]) -> Option<Reach> {
        let _writer = self.1.lock().unwrap_or_else(|p| p.into_inner());
        let mut next = IndexMap::clone(&self.0.load());
        let mut reach: Option<Reach> = None;
        for n in names {
            if let Some(old) = next.shift_remove(n) {
                let reach = reach.get_or_insert_with(Reach::nobody);
                old.iter().for_each(|d| reach.widen_to(&**d));
            }
        }
        if reach.is_some() {
            self.0.store(Arc::new(next));
        }
        reach
    }
}

/// One page of a listing, with the cache hints the caller's generation gets.
pub(crate) struct Page<T> {
    pub(crate) items: Vec<T>,
    pub(crate) next_cursor: Option<String>,
    pub(crate) ttl_ms: Option<u64>,
    pub(crate) cache_scope: Option<toolyard_proto::CacheScope>,
}

/// The page of `registry` that `cursor` points at, of what a caller with `principal` may
/// see (`crate::Audience`); modern callers get `ttlMs`/`cacheScope`, the scope `private`
/// when any definition has an audience (the listing then differs from caller to caller).
pub(crate) fn list_page<D: Audienced, T>(
    registry: &Registry<D>,
    cursor: Option<&str>,
    list: &crate::ListSettings,
    modern: bool,
    principal: Option<&str>,
    item: impl Fn(&D) -> T,
) -> Result<Page<T>, toolyard_proto::ErrorObject> {
    let snapshot = registry.load();
    let restricted = snapshot.values().any(Defs::restricted);
    let (items, next_cursor) = if restricted {
        let visible: Vec<&Arc<D>> = snapshot
            .values()
            .filter_map(|d| d.for_caller(principal))
            .collect();
        let (range, next) = cursor::page(visible.len(), cursor, list.page_size)?;
        (visible[range].iter().map(|d| item(d)).collect(), next)
    } else {
        let (range, next) = cursor::page(snapshot.len(), cursor, list.page_size)?;
        (
            snapshot[range].values().map(|d| item(d.first())).collect(),
            next,
        )
    };
    let cache_scope = if restricted {
        toolyard_proto::CacheScope::Private
    } else {
        list.cache_scope
    };
    Ok(Page {
        items,
        next_cursor,
        ttl_ms: modern.then_some(list.ttl_ms),
        cache_scope: modern.then_some(cache_scope),
    })
}

/// Opaque pagination cursors: an offset the client must not interpret.
pub(crate) mod cursor {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
    use base64::Engine;
    use toolyard_proto::ErrorObject;

    pub(crate) fn encode(offset: usize) -> String {
        B64.encode(format!("o{offset}"))
    }

    pub(crate) fn decode(cursor: Option<&str>) -> Result<usize, ErrorObject> {
        let Some(c) = cursor else { return Ok(0) };
        B64.decode(c)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .and_then(|s| s.strip_prefix('o').and_then(|n| n.parse().ok()))
            .ok_or_else(|| ErrorObject::invalid_params("Invalid cursor"))
    }

    /// The page `[start, start + size)` of `len` items and the next cursor.
    pub(crate) fn page(
        len: usize,
        cursor: Option<&str>,
        size: usize,
    ) -> Result<(std::ops::Range<usize>, Option<String>), ErrorObject> {
        let start = decode(cursor)?;
        if start > len {
            return Err(ErrorObject::invalid_params("Invalid cursor"));
        }
        let end = (start + size.max(1)).min(len);
        Ok((start..end, (end < len).then(|| encode(end))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audience::{Audience, Item as Def};

    fn put(registry: &Registry<Def>, name: &str, def: Def) -> Option<Reach> {
        registry.insert([(name.to_owned(), Arc::new(def))])
    }

    #[test]
    fn a_change_says_whose_listing_it_changes_and_a_like_for_like_one_says_nobody() {
        let registry = Registry::default();
        let alice = || Some(Audience::principals(["alice"]));
        let added = put(&registry, "t", Def("t", alice())).unwrap();
        assert!(added.admits(Some("alice")) && !added.admits(Some("bob")));
        // Replaced by its like, for the same callers: nobody's listing changed.
        assert!(put(&registry, "u", Def("u", None)).unwrap().is_everyone());
        assert!(put(&registry, "u", Def("u", None)).is_none());
        // Listed differently: whoever sees it, before or now.
        let changed = put(&registry, "t", Def("t2", alice())).unwrap();
        assert!(changed.admits(Some("alice")) && !changed.admits(Some("bob")));
        assert!(registry.insert(Vec::new()).is_none(), "nothing given");
        let removed = registry
            .remove(&["t".to_owned(), "gone".to_owned()])
            .unwrap();
        assert!(removed.admits(Some("alice")) && !removed.admits(None));
        assert!(registry.remove(&["gone".to_owned()]).is_none());
        assert_eq!(registry.load().len(), 1);
    }

    #[test]
    fn a_name_given_twice_with_audiences_is_each_callers_own_and_otherwise_the_last_wins() {
        let registry = Registry::default();
        let only = |p: &str| Some(Audience::principals([p]));
        let def = |n: &'static str, a| {
            (
                n.split('/').next().unwrap_or(n).to_owned(),
                Arc::new(Def(n, a)),
            )
        };
        let both = registry
            .insert([def("t/alice", only("alice")), def("t/bob", only("bob"))])
            .unwrap();
        assert!(both.admits(Some("alice")) && both.admits(Some("bob")));
        assert!(!both.admits(Some("carol")));
        let got = |who| registry.get_for("t", who).map(|d| d.0);
        assert_eq!(got(Some("alice")), Some("t/alice"));
        assert_eq!(got(Some("bob")), Some("t/bob"));
        assert_eq!(got(Some("carol")), None);
        let listed = |who| {
            list_page(
                &registry,
                None,
                &crate::ListSettings::default(),
                true,
                who,
                |d| d.0,
            )
            .unwrap()
            .items
        };
        assert_eq!(listed(Some("alice")), ["t/alice"]);
        assert_eq!(listed(Some("bob")), ["t/bob"]);
        assert!(listed(None).is_empty());
        // carol's version joins: news to carol alone (alice and bob get what they got).
        let joined = registry
            .insert([
                def("t/alice", only("alice")),
                def("t/bob", only("bob")),
                def("t/carol", only("carol")),
            ])
            .unwrap();
        assert!(joined.admits(Some("carol")));
        assert!(!joined.admits(Some("alice")) && !joined.admits(Some("bob")));
        // A later registration of the name replaces them all: news to those whose
        // definition went or changed.
        let replaced = registry.insert([def("t/alice", only("alice"))]).unwrap();
        assert!(replaced.admits(Some("bob")) && replaced.admits(Some("carol")));
        assert!(!replaced.admits(Some("alice")) && !replaced.admits(None));
        assert_eq!(got(Some("bob")), None);
        let changed = registry
            .insert([def("t/alice2", only("alice")), def("t/bob", only("bob"))])
            .unwrap();
        assert!(changed.admits(Some("alice")) && changed.admits(Some("bob")));
        assert!(!changed.admits(Some("carol")));
        // Without an audience on each, the last given is the definition.
        registry.insert([def("u/first", None), def("u/last", only("alice"))]);
        assert_eq!(
            registry.get_for("u", Some("alice")).map(|d| d.0),
            Some("u/last")
        );
        assert_eq!(registry.load()["u"].iter().count(), 1);
        let gone = registry.remove(&["t".to_owned()]).unwrap();
        assert!(gone.admits(Some("alice")) && gone.admits(Some("bob")));
        assert!(!gone.admits(Some("carol")));
    }
}
