//! A controller with tools, resources and prompts, served over stdio.
//!
//! ```sh
//! cargo run --example controller
//! ```
//! Then speak MCP on stdin (or point any MCP client at the command).
#![allow(
    clippy::needless_pass_by_value,
    reason = "#[tool], #[resource] and #[prompt] methods take their arguments by value, as users write them"
)]

use std::collections::HashMap;
use std::sync::Mutex;
use toolyard::{controller, HandlerError, RequestContext, ServerBuilder};

/// A tiny note store.
struct Notes {
    notes: Mutex<HashMap<String, String>>,
}

#[controller]
impl Notes {
    /// Saves a note under a title, replacing any note with that title.
    #[tool(idempotent, title = "Save a note")]
    fn save(
        &self,
        #[arg(description = "The note's title")] title: String,
        #[arg(description = "The note's text")] text: String,
    ) -> String {
        self.lock().insert(title.clone(), text);
        format!("saved `{title}`")
    }

    /// Lists the titles of all notes.
    #[tool(read_only)]
    fn list(&self) -> String {
        let mut titles: Vec<_> = self.lock().keys().cloned().collect();
        titles.sort();
        titles.join("\n")
    }

    /// Deletes a note after asking the user to confirm.
    #[tool(destructive)]
    async fn delete(&self, ctx: RequestContext, title: String) -> Result<String, HandlerError> {
        let schema = serde_json::from_value(serde_json::json!({
            "type": "object",
            "properties": {"confirm": {"type": "boolean"}},
            "required": ["confirm"]
        }))?;
        let answer = ctx
            .elicit(
                "confirm",
                toolyard::proto::ElicitRequestParams::form(format!("Delete `{title}`?"), schema),
            )
            .await?;
        let confirmed = answer
            .content
            .and_then(|c| c.get("confirm").and_then(|v| v.as_bool()))
            .unwrap_or(false);
        if confirmed && self.lock().remove(&title).is_some() {
            Ok(format!("deleted `{title}`"))
        } else {
            Ok("nothing deleted".into())
        }
    }

    /// One note's text.
    #[resource("notes://{title}", mime_type = "text/plain")]
    fn note(&self, title: String) -> Result<String, HandlerError> {
        self.lock()
            .get(&title)
            .cloned()
            .ok_or_else(|| HandlerError::failed(format!("no note `{title}`")))
    }

    /// Asks the model to summarize a note.
    #[prompt]
    fn summarize(&self, title: String) -> String {
        let text = self.lock().get(&title).cloned().unwrap_or_default();
        format!("Summarize this note titled `{title}`:\n\n{text}")
    }
}

impl Notes {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.notes.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let server = ServerBuilder::new("notes", "1.0")
        .controller(Notes {
            notes: Mutex::new(HashMap::new()),
        })
        .start()
        .await?;
    toolyard::serve_stdio(&server, Default::default()).await?;
    Ok(())
}
