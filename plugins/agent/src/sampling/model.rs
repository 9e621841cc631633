//! Which model answers a server's sampling request. A server may only *hint*
//! (`modelPreferences.hints[].name`, matched as a substring, in order) and state priorities;
//! the answer is always a model the configuration allows, so no server can make the client
//! pay for an arbitrary model. Without a matching hint, the priorities pick from the allowed
//! list, which is ordered from the cheapest and fastest to the most capable: intelligence
//! first means the last, cost or speed first the first; otherwise the configured default.

use toolyard_proto::ModelPreferences;

/// The first allowed model a hint names (case-insensitive substring), else `default`.
pub(crate) fn choose<'a>(
    preferences: Option<&ModelPreferences>,
    allowed: &'a [String],
    default: &'a str,
) -> &'a str {
    let hints = preferences
        .and_then(|p| p.hints.as_deref())
        .unwrap_or_default();
    for hint in hints.iter().filter_map(|h| h.name.as_deref()) {
        let hint = hint.to_lowercase();
        if hint.is_empty() {
            continue;
        }
        if let Some(m) = allowed.iter().find(|m| m.to_lowercase().contains(&hint)) {
            return m;
        }
    }
    let priority = |f: fn(&ModelPreferences) -> Option<f64>| {
        preferences
            .and_then(f)
            .filter(|p| p.is_finite())
            .unwrap_or(0.0)
    };
    let intelligence = priority(|p| p.intelligence_priority);
    let thrift = priority(|p| p.cost_priority).max(priority(|p| p.speed_priority));
    let pick = if intelligence > thrift {
        allowed.last()
    } else if thrift > intelligence {
        allowed.first()
    } else {
        None
    };
    pick.map_or(default, String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolyard_proto::ModelHint;

    fn prefs(hints: &[&str]) -> ModelPreferences {
        ModelPreferences {
            hints: Some(
                hints
                    .iter()
                    .map(|h| ModelHint {
                        name: Some((*h).to_owned()),
                    })
                    .collect(),
            ),
            ..ModelPreferences::default()
        }
    }

    #[test]
    fn the_first_hint_that_names_an_allowed_model_wins_and_others_are_ignored() {
        let allowed = vec![
            "gpt-4o-mini".to_owned(),
            "gpt-4o".to_owned(),
            "claude-3-5-sonnet".to_owned(),
        ];
        assert_eq!(
            choose(Some(&prefs(&["o3-pro", "Sonnet"])), &allowed, "gpt-4o-mini"),
            "claude-3-5-sonnet"
        );
        assert_eq!(
            choose(Some(&prefs(&["gpt-4o"])), &allowed, "x"),
            "gpt-4o-mini"
        );
        assert_eq!(
            choose(Some(&prefs(&["o3-pro"])), &allowed, "gpt-4o-mini"),
            "gpt-4o-mini"
        );
        assert_eq!(choose(None, &allowed, "gpt-4o-mini"), "gpt-4o-mini");
    }

    #[test]
    fn without_a_matching_hint_the_priorities_pick_an_end_of_the_allowed_list() {
        let allowed = vec!["mini".to_owned(), "mid".to_owned(), "max".to_owned()];
        let smart = ModelPreferences {
            intelligence_priority: Some(0.9),
            cost_priority: Some(0.2),
            ..ModelPreferences::default()
        };
        let cheap = ModelPreferences {
            intelligence_priority: Some(0.1),
            speed_priority: Some(0.8),
            ..ModelPreferences::default()
        };
        assert_eq!(choose(Some(&smart), &allowed, "mid"), "max");
        assert_eq!(choose(Some(&cheap), &allowed, "mid"), "mini");
        assert_eq!(
            choose(Some(&ModelPreferences::default()), &allowed, "mid"),
            "mid"
        );
        assert_eq!(choose(Some(&smart), &[], "mid"), "mid");
    }
}
