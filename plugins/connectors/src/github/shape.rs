//! What the tools return: GitHub's objects cut down to what a model needs (users as logins,
//! labels as names: github-mcp-server's "minimal" types), untrusted text sanitised on the
//! way ([`super::sanitize`]), and the `fields` projection that keeps only the keys a caller
//! asked for.

use super::sanitize;
use serde_json::{json, Map, Value};
use toolyard::HandlerError;

/// Text a person wrote (Markdown): sanitised; absent stays `null`.
pub(crate) fn text(v: &Value) -> Value {
    match v.as_str() {
        Some(s) => Value::String(sanitize::markdown(s)),
        None => Value::Null,
    }
}

/// A user as `{login, id, profile_url}`.
pub(crate) fn user(v: &Value) -> Value {
    if v.is_null() {
        return Value::Null;
    }
    json!({"login": v["login"], "id": v["id"], "profile_url": v["html_url"]})
}

/// Logins of a user array.
fn logins(v: &Value) -> Value {
    Value::Array(
        v.as_array()
            .map(|a| a.iter().map(|u| u["login"].clone()).collect())
            .unwrap_or_default(),
    )
}

/// Names of a label array (sanitised: anyone with triage rights names labels).
fn label_names(v: &Value) -> Value {
    Value::Array(
        v.as_array()
            .map(|a| a.iter().map(|l| text(&l["name"])).collect())
            .unwrap_or_default(),
    )
}

/// A REST issue.
pub(crate) fn issue(v: &Value) -> Value {
    let mut out = json!({
        "number": v["number"],
        "title": text(&v["title"]),
        "body": text(&v["body"]),
        "state": v["state"],
        "state_reason": v["state_reason"],
        "html_url": v["html_url"],
        "user": user(&v["user"]),
        "labels": label_names(&v["labels"]),
        "assignees": logins(&v["assignees"]),
        "comments": v["comments"],
        "created_at": v["created_at"],
        "updated_at": v["updated_at"],
        "closed_at": v["closed_at"],
    });
    if v.get("pull_request").is_some_and(|p| !p.is_null()) {
        out["pull_request"] = Value::Bool(true);
    }
    if let Some(m) = v["milestone"]["title"].as_str() {
        out["milestone"] = Value::String(sanitize::markdown(m));
    }
    out
}

/// A comment (issue, review or review comment).
pub(crate) fn comment(v: &Value) -> Value {
    let mut out = json!({
        "id": v["id"],
        "user": user(&v["user"]),
        "body": text(&v["body"]),
        "author_association": v["author_association"],
        "html_url": v["html_url"],
        "created_at": v["created_at"],
        "updated_at": v["updated_at"],
    });
    for key in [
        "path",
        "line",
        "state",
        "submitted_at",
        "commit_id",
        "in_reply_to_id",
    ] {
        if let Some(x) = v.get(key).filter(|x| !x.is_null()) {
            out[key] = x.clone();
        }
    }
    out
}

/// A branch end of a pull request (`head`, `base`).
fn pr_ref(v: &Value) -> Value {
    if v.is_null() {
        return Value::Null;
    }
    json!({
        "ref": v["ref"],
        "sha": v["sha"],
        "repo": if v["repo"].is_null() { Value::Null } else {
            json!({"full_name": v["repo"]["full_name"], "description": text(&v["repo"]["description"])})
        },
    })
}

/// A pull request.
pub(crate) fn pull(v: &Value) -> Value {
    json!({
        "number": v["number"],
        "title": text(&v["title"]),
        "body": text(&v["body"]),
        "state": v["state"],
        "draft": v["draft"],
        "merged": v["merged"],
        "mergeable_state": v["mergeable_state"],
        "html_url": v["html_url"],
        "user": user(&v["user"]),
        "labels": label_names(&v["labels"]),
        "assignees": logins(&v["assignees"]),
        "requested_reviewers": logins(&v["requested_reviewers"]),
        "merged_by": v["merged_by"]["login"],
        "head": pr_ref(&v["head"]),
        "base": pr_ref(&v["base"]),
        "additions": v["additions"],
        "deletions": v["deletions"],
        "changed_files": v["changed_files"],
        "commits": v["commits"],
        "comments": v["comments"],
        "created_at": v["created_at"],
        "updated_at": v["updated_at"],
        "closed_at": v["closed_at"],
        "merged_at": v["merged_at"],
        "milestone": v["milestone"]["title"],
    })
}

/// A commit (list entry or `get_commit`); `files` with their patches when present.
pub(crate) fn commit(v: &Value, with_files: bool) -> Value {
    let person = |p: &Value| json!({"name": p["name"], "email": p["email"], "date": p["date"]});
    let mut out = json!({
        "sha": v["sha"],
        "html_url": v["html_url"],
        "commit": {
            "message": text(&v["commit"]["message"]),
            "author": person(&v["commit"]["author"]),
            "committer": person(&v["commit"]["committer"]),
        },
        "author": user(&v["author"]),
        "committer": user(&v["committer"]),
    });
    if !v["stats"].is_null() {
        out["stats"] = v["stats"].clone();
    }
    if with_files {
        if let Some(files) = v["files"].as_array() {
            out["files"] = Value::Array(files.iter().map(file).collect());
        }
    }
    out
}

/// A changed file of a commit or pull request; its patch with invisible characters
/// removed (a diff is code: Trojan Source hides there).
pub(crate) fn file(v: &Value) -> Value {
    json!({
        "filename": v["filename"],
        "status": v["status"],
        "additions": v["additions"],
        "deletions": v["deletions"],
        "changes": v["changes"],
        "previous_filename": v["previous_filename"],
        "patch": v["patch"].as_str().map(sanitize::invisible),
    })
}

/// A repository, minimal.
pub(crate) fn repo(v: &Value) -> Value {
    json!({
        "id": v["id"],
        "name": v["name"],
        "full_name": v["full_name"],
        "description": text(&v["description"]),
        "html_url": v["html_url"],
        "language": v["language"],
        "stargazers_count": v["stargazers_count"],
        "forks_count": v["forks_count"],
        "open_issues_count": v["open_issues_count"],
        "updated_at": v["updated_at"],
        "created_at": v["created_at"],
        "topics": v["topics"],
        "private": v["private"],
        "fork": v["fork"],
        "archived": v["archived"],
        "default_branch": v["default_branch"],
    })
}

/// Keeps only `fields` of each object in `items` (all of them when `fields` is absent or
/// empty); a name not in `allowed` is an argument error naming the allowed ones.
pub(crate) fn project(
    items: Vec<Value>,
    fields: Option<&[String]>,
    allowed: &[&str],
) -> Result<Vec<Value>, HandlerError> {
    let Some(fields) = fields.filter(|f| !f.is_empty()) else {
        return Ok(items);
    };
    if let Some(bad) = fields.iter().find(|f| !allowed.contains(&f.as_str())) {
        return Err(HandlerError::invalid_arguments(format!(
            "fields: `{bad}` is not one of {}",
            allowed.join(", ")
        )));
    }
    Ok(items
        .into_iter()
        .map(|item| match item {
            Value::Object(map) => Value::Object(
                map.into_iter()
                    .filter(|(k, _)| fields.iter().any(|f| f == k))
                    .collect::<Map<String, Value>>(),
            ),
            other => other,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_keep_only_the_asked_keys() {
        let items = vec![json!({"number": 1, "title": "a", "body": "long"})];
        let fields = vec!["number".to_owned(), "title".to_owned()];
        let out = project(items.clone(), Some(&fields), &["number", "title", "body"]).unwrap();
        assert_eq!(out, vec![json!({"number": 1, "title": "a"})]);
        assert_eq!(project(items.clone(), None, &["number"]).unwrap(), items);
        assert_eq!(
            project(items.clone(), Some(&[]), &["number"]).unwrap(),
            items
        );
    }

    #[test]
    fn an_unknown_field_is_refused_with_the_allowed_ones() {
        let e = project(vec![], Some(&["nope".to_owned()]), &["number", "title"]).unwrap_err();
        let text = format!("{e:?}");
        assert!(
            text.contains("nope") && text.contains("number, title"),
            "{text}"
        );
    }

    #[test]
    fn an_issue_is_minimal_and_its_text_sanitised() {
        let v = json!({"number": 3, "title": "T\u{200B}itle", "body": "hi<!-- secret -->",
            "state": "open", "user": {"login": "u", "id": 1, "html_url": "h", "avatar_url": "a"},
            "labels": [{"name": "bug", "color": "f00"}], "assignees": [{"login": "x"}],
            "pull_request": {"url": "u"}});
        let out = issue(&v);
        assert_eq!(out["title"], "Title");
        assert_eq!(out["body"], "hi");
        assert_eq!(
            out["user"],
            json!({"login": "u", "id": 1, "profile_url": "h"})
        );
        assert_eq!(out["labels"], json!(["bug"]));
        assert_eq!(out["assignees"], json!(["x"]));
        assert_eq!(out["pull_request"], true);
    }
}
