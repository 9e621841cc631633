//! Drive v3 over HTTP: `files.list`, `files.get` (metadata and `alt=media` with `Range`),
//! `files.export`, `changes.getStartPageToken` and `changes.list`, each with the shared-drive
//! flags (`supportsAllDrives=true`; on lists also `includeItemsFromAllDrives=true` and a
//! `corpora`) that most Drive servers forget, so files in shared drives are not a 404.
//!
//! Every request carries a bearer token from [`Auth`]; a `401` drops that token and the
//! request is sent once more with a fresh one. Google's error bodies
//! (`{"error":{"code":403,"message":…,"errors":[{"reason":"rateLimitExceeded"}]}}`) become
//! [`DriveError`]s that say what happened and what to do. Shortcuts are followed one hop.

use super::auth::{Auth, AuthError};
use crate::http::{Api, ApiError, Reply};
use reqwest::StatusCode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The Google-native type of a shortcut.
pub(crate) const SHORTCUT: &str = "application/vnd.google-apps.shortcut";

/// The metadata fields asked for on every file.
const FILE_FIELDS: &str = "id,name,mimeType,modifiedTime,createdTime,size,parents,webViewLink,driveId,trashed,shortcutDetails(targetId,targetMimeType),owners(displayName,emailAddress)";

/// A file's metadata, under Drive's own field names.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct File {
    /// The file's id (pass it to the other tools).
    pub id: String,
    /// The file's name.
    #[serde(default)]
    pub name: String,
    /// Its MIME type (`application/vnd.google-apps.*` for Google Docs, Sheets, Slides…).
    #[serde(default)]
    pub mime_type: String,
    /// Last modified (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modified_time: Option<String>,
    /// Created (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_time: Option<String>,
    /// The size in bytes (absent for Google-native files), as Drive writes it: a string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<String>,
    /// The folders it is in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parents: Option<Vec<String>>,
    /// Where a person opens it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub web_view_link: Option<String>,
    /// The shared drive it is in, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drive_id: Option<String>,
    /// In the trash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trashed: Option<bool>,
    /// For a shortcut: what it points at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shortcut_details: Option<ShortcutDetails>,
    /// Its owners (files in shared drives have none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owners: Option<Vec<Owner>>,
}

impl File {
    /// The size Drive reports, as a number.
    pub(crate) fn bytes(&self) -> Option<u64> {
        self.size.as_deref().and_then(|s| s.parse().ok())
    }
}

/// A shortcut's target.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShortcutDetails {
    /// The target's id.
    #[serde(default)]
    pub target_id: String,
    /// The target's MIME type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_mime_type: Option<String>,
}

/// A file's owner.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Owner {
    /// The owner's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// The owner's address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub email_address: Option<String>,
}

/// `files.list`'s answer.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FileList {
    #[serde(default)]
    pub files: Vec<File>,
    #[serde(default)]
    pub next_page_token: Option<String>,
    #[serde(default)]
    pub incomplete_search: bool,
}

/// `changes.list`'s answer.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ChangeList {
    #[serde(default)]
    pub changes: Vec<Change>,
    #[serde(default)]
    pub next_page_token: Option<String>,
    #[serde(default)]
    pub new_start_page_token: Option<String>,
}

/// One change.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Change {
    #[serde(default)]
    pub file_id: Option<String>,
}

/// What a `files.list` asks for.
#[derive(Debug, Default)]
pub(crate) struct ListRequest {
    pub q: String,
    pub page_size: u32,
    pub page_token: Option<String>,
    pub drive_id: Option<String>,
    pub order_by: Option<String>,
}

/// Why a Drive request has no usable answer. Each message is the tool error the caller sees.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum DriveError {
    /// The transport or a status the shared client knows.
    #[error(transparent)]
    Api(#[from] ApiError),
    /// No token.
    #[error(transparent)]
    Auth(#[from] AuthError),
    /// No such file, or not visible to these credentials.
    #[error("Google Drive has no file `{id}` that these credentials can see (shared drives are searched too)")]
    NotFound { id: String },
    /// Drive's 10 MB export limit.
    #[error("Google Drive cannot export this file as {mime}: the export would be larger than Drive's 10 MB export limit (exportSizeLimitExceeded)")]
    ExportTooLarge { mime: String },
    /// Drive refused for a reason of its own.
    #[error("Google Drive refused the request (HTTP {status}, {reason}): {detail}")]
    Refused {
        status: u16,
        reason: String,
        detail: String,
    },
    /// The range asked for starts past the end.
    #[error("the offset is past the end of the file")]
    PastEnd,
}

impl From<DriveError> for toolyard::HandlerError {
    fn from(e: DriveError) -> toolyard::HandlerError {
        toolyard::HandlerError::failed(e.to_string())
    }
}

/// The Drive v3 client.
pub(crate) struct Drive {
    api: Api,
    base: String,
    auth: Auth,
}

/// A parameter list.
type Params = Vec<(&'static str, String)>;

impl Drive {
    /// A client of the API at `base` (no trailing `/`).
    /// The connector's state actor (its access token).
    pub(crate) fn state(&self) -> &crate::actor::Supervised<super::auth::DriveState> {
        self.auth.state()
    }

    pub(crate) fn new(api: Api, base: String, auth: Auth) -> Drive {
        Drive { api, base, auth }
    }

    /// The credential's kind (for `Debug`).
    pub(crate) fn credential_kind(&self) -> &'static str {
        self.auth.kind()
    }

    /// The base URL (for `Debug`).
    pub(crate) fn base(&self) -> &str {
        &self.base
    }

    /// GETs `path` with `params` (and a byte `range`), renewing a refused token once.
    async fn get(
        &self,
        path: &str,
        params: &Params,
        range: Option<(u64, u64)>,
    ) -> Result<Reply, DriveError> {
        let url = format!("{}{}", self.base, path);
        let mut renewed = false;
        loop {
            let token = self.auth.token().await?;
            let reply = self
                .api
                .send(true, |c| {
                    let mut r = c.get(&url).query(params).bearer_auth(token.expose());
                    if let Some((start, end)) = range {
                        r = r.header(reqwest::header::RANGE, format!("bytes={start}-{end}"));
                    }
                    r
                })
                .await?;
            if reply.status == StatusCode::UNAUTHORIZED {
                if !self.auth.renews() {
                    return Err(AuthError::StaticRefused.into());
                }
                if !renewed {
                    renewed = true;
                    self.auth.invalidate(&token).await?;
                    continue;
                }
            }
            return check(reply);
        }
    }

    /// GETs JSON.
    async fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        params: &Params,
    ) -> Result<T, DriveError> {
        Ok(self.get(path, params, None).await?.json()?)
    }

    /// `files.list` across every drive (or the one shared drive asked for).
    pub(crate) async fn list(&self, request: &ListRequest) -> Result<FileList, DriveError> {
        let mut params: Params = vec![
            ("q", request.q.clone()),
            ("pageSize", request.page_size.to_string()),
            (
                "fields",
                format!("nextPageToken,incompleteSearch,files({FILE_FIELDS})"),
            ),
            ("supportsAllDrives", "true".into()),
            ("includeItemsFromAllDrives", "true".into()),
        ];
        match &request.drive_id {
            Some(drive) => {
                params.push(("corpora", "drive".into()));
                params.push(("driveId", drive.clone()));
            }
            None => params.push(("corpora", "allDrives".into())),
        }
        if let Some(token) = &request.page_token {
            params.push(("pageToken", token.clone()));
        }
        if let Some(order) = &request.order_by {
            params.push(("orderBy", order.clone()));
        }
        self.get_json("/drive/v3/files", &params).await
    }

    /// `files.get`: one file's metadata.
    pub(crate) async fn metadata(&self, id: &str) -> Result<File, DriveError> {
        let params: Params = vec![
            ("fields", FILE_FIELDS.into()),
            ("supportsAllDrives", "true".into()),
        ];
        self.get_json(&file_path(id)?, &params)
            .await
            .map_err(|e| not_found_as(e, id))
    }

    /// The file `id`, or the target of the shortcut `id` (one hop: a shortcut to a shortcut
    /// is not followed). The second value is the shortcut, when there was one.
    pub(crate) async fn resolve(&self, id: &str) -> Result<(File, Option<File>), DriveError> {
        let file = self.metadata(id).await?;
        if file.mime_type != SHORTCUT {
            return Ok((file, None));
        }
        let target = file
            .shortcut_details
            .as_ref()
            .map(|d| d.target_id.clone())
            .filter(|t| !t.is_empty())
            .ok_or_else(|| DriveError::Refused {
                status: 200,
                reason: "shortcutWithoutTarget".into(),
                detail: format!("the shortcut `{id}` names no target"),
            })?;
        let resolved = self.metadata(&target).await?;
        if resolved.mime_type == SHORTCUT {
            return Err(DriveError::Refused {
                status: 200,
                reason: "shortcutToShortcut".into(),
                detail: format!(
                    "the shortcut `{id}` points at another shortcut (`{target}`), which is not followed"
                ),
            });
        }
        Ok((resolved, Some(file)))
    }

    /// `files.get?alt=media`: the bytes, or the bytes `range` (inclusive) of them. The reply
    /// is `206` with `Content-Range` when Drive honoured the range.
    pub(crate) async fn media(
        &self,
        id: &str,
        range: Option<(u64, u64)>,
    ) -> Result<Reply, DriveError> {
        let params: Params = vec![
            ("alt", "media".into()),
            ("supportsAllDrives", "true".into()),
        ];
        match self.get(&file_path(id)?, &params, range).await {
            Err(DriveError::Api(ApiError::Status { status: 416, .. })) => Err(DriveError::PastEnd),
            other => other.map_err(|e| not_found_as(e, id)),
        }
    }

    /// `files.export`: a Google-native file in `mime`.
    pub(crate) async fn export(&self, id: &str, mime: &str) -> Result<Reply, DriveError> {
        let params: Params = vec![
            ("mimeType", mime.to_owned()),
            ("supportsAllDrives", "true".into()),
        ];
        let path = format!("{}/export", file_path(id)?);
        match self.get(&path, &params, None).await {
            Err(DriveError::Refused { reason, .. }) if reason == "exportSizeLimitExceeded" => {
                Err(DriveError::ExportTooLarge {
                    mime: mime.to_owned(),
                })
            }
            other => other.map_err(|e| not_found_as(e, id)),
        }
    }

    /// `changes.getStartPageToken`.
    pub(crate) async fn start_page_token(&self) -> Result<String, DriveError> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Start {
            start_page_token: String,
        }
        let params: Params = vec![("supportsAllDrives", "true".into())];
        let start: Start = self
            .get_json("/drive/v3/changes/startPageToken", &params)
            .await?;
        Ok(start.start_page_token)
    }

    /// `changes.list` from `token`.
    pub(crate) async fn changes(&self, token: &str) -> Result<ChangeList, DriveError> {
        let params: Params = vec![
            ("pageToken", token.to_owned()),
            ("pageSize", "1000".into()),
            (
                "fields",
                "nextPageToken,newStartPageToken,changes(fileId,removed,time)".into(),
            ),
            ("supportsAllDrives", "true".into()),
            ("includeItemsFromAllDrives", "true".into()),
        ];
        self.get_json("/drive/v3/changes", &params).await
    }
}

/// `/drive/v3/files/{id}`, refusing ids that are not Drive ids (they would change the path).
fn file_path(id: &str) -> Result<String, DriveError> {
    let ok = !id.is_empty()
        && id.len() <= 200
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !ok {
        return Err(DriveError::NotFound {
            id: id.chars().filter(|c| !c.is_control()).take(80).collect(),
        });
    }
    Ok(format!("/drive/v3/files/{id}"))
}

/// A plain 404 of a request about `id` becomes [`DriveError::NotFound`].
fn not_found_as(e: DriveError, id: &str) -> DriveError {
    match e {
        DriveError::Refused { status: 404, .. }
        | DriveError::Api(ApiError::Status { status: 404, .. }) => {
            DriveError::NotFound { id: id.to_owned() }
        }
        other => other,
    }
}

/// Google's error body.
#[derive(Deserialize)]
struct GoogleError {
    error: GoogleErrorBody,
}

#[derive(Deserialize)]
struct GoogleErrorBody {
    #[serde(default)]
    message: String,
    #[serde(default)]
    errors: Vec<GoogleReason>,
}

#[derive(Deserialize)]
struct GoogleReason {
    #[serde(default)]
    reason: String,
}

/// The reply when it succeeded; otherwise the error its status and Google's reason mean.
fn check(reply: Reply) -> Result<Reply, DriveError> {
    if reply.status.is_success() {
        return Ok(reply);
    }
    let status = reply.status.as_u16();
    let google = serde_json::from_slice::<GoogleError>(&reply.body).ok();
    let reason = google
        .as_ref()
        .and_then(|g| g.error.errors.first())
        .map(|r| r.reason.clone())
        .unwrap_or_default();
    match reason.as_str() {
        "rateLimitExceeded" | "userRateLimitExceeded" | "sharingRateLimitExceeded" => {
            return Err(ApiError::RateLimited {
                service: "Google Drive",
                retry_after: None,
            }
            .into())
        }
        "" => {}
        _ if status == 401 || status == 416 => {}
        _ => {
            let detail: String = google
                .map(|g| g.error.message)
                .unwrap_or_default()
                .chars()
                .filter(|c| !c.is_control())
                .take(300)
                .collect();
            return Err(DriveError::Refused {
                status,
                reason,
                detail,
            });
        }
    }
    Err(reply
        .error_for_status()
        .err()
        .unwrap_or(ApiError::Status {
            service: "Google Drive",
            status,
            detail: String::new(),
        })
        .into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_that_would_change_the_path_is_refused() {
        assert!(file_path("1AbC-_x").is_ok());
        assert!(file_path("../changes").is_err());
        assert!(file_path("a/b").is_err());
        assert!(file_path("a?alt=media").is_err());
        assert!(file_path("").is_err());
    }
}
