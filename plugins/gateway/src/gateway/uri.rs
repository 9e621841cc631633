//! The namespacing of resource URIs: `<source>+<uri>`, a valid URI that routes a read back
//! to its source without a lookup table.

use toolyard_proto::ResourceContents;

/// `<source>+<uri>`: a valid URI (the scheme gains a `+` part), reversible by splitting at
/// the first `+`.
pub fn expose_uri(source: &str, upstream: &str) -> String {
    format!("{source}+{upstream}")
}

/// The upstream URI of an exposed one.
pub fn upstream_uri<'a>(source: &str, exposed: &'a str) -> Option<&'a str> {
    exposed.strip_prefix(source)?.strip_prefix('+')
}

pub(super) fn rename_contents(mut c: ResourceContents, source: &str) -> ResourceContents {
    match &mut c {
        ResourceContents::Text(t) => t.uri = expose_uri(source, &t.uri),
        ResourceContents::Blob(b) => b.uri = expose_uri(source, &b.uri),
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_round_trip() {
        let exposed = expose_uri("everything", "test://static/resource/1");
        assert_eq!(exposed, "everything+test://static/resource/1");
        assert_eq!(
            upstream_uri("everything", &exposed),
            Some("test://static/resource/1")
        );
        assert_eq!(upstream_uri("time", &exposed), None);
    }
}
