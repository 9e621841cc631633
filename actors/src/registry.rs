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
pub(crate) type Snapshot<T> = Arc<IndexMap<String, Arc<T>>>;

/// Definitions by name.
pub(crate) struct Registry<T>(ArcSwap<IndexMap<String, Arc<T>>>, Mutex<()>);

impl<T> Default for Registry<T> {
    fn default() -> Self {
        Registry(ArcSwap::from_pointee(IndexMap::new()), Mutex::new(()))
    }
}

impl<T> Registry<T> {
    pub(crate) fn load(&self) -> Snapshot<T> {
        self.0.load_full()
    }
    pub(crate) fn get(&self, name: &str) -> Option<Arc<T>> {
        self.0.load().get(name).cloned()
    }
}

impl<T: Audienced> Registry<T> {
    /// Inserts or replaces; returns whose listing the change changes (`Reach`), `None` when
    /// nobody's does (nothing given, or each replaced by what lists the same to the same
    /// callers).
    pub(crate) fn insert(
        &self,
        items: impl IntoIterator<Item = (String, Arc<T>)>,
    ) -> Option<Reach> {
        let _writer = self.1.lock().unwrap_or_else(|p| p.into_inner());
        let mut next = IndexMap::clone(&self.0.load());
        let mut reach: Option<Reach> = None;
        for (k, v) in items {
            let reach = reach.get_or_insert_with(Reach::nobody);
            match next.insert(k, v.clone()) {
                Some(old) => reach.widen_to_replaced(&*old, &*v),
                None => reach.widen_to(&*v),
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
                reach.get_or_insert_with(Reach::nobody).widen_to(&*old);
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
    let restricted = snapshot.values().any(|d| d.audience().is_some());
    let (items, next_cursor) = if restricted {
        let visible: Vec<&Arc<D>> = snapshot.values().filter(|d| d.admits(principal)).collect();
        let (range, next) = cursor::page(visible.len(), cursor, list.page_size)?;
        (visible[range].iter().map(|d| item(d)).collect(), next)
    } else {
        let (range, next) = cursor::page(snapshot.len(), cursor, list.page_size)?;
        (snapshot[range].values().map(|d| item(d)).collect(), next)
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
}
