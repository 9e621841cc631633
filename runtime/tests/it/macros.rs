//! `#[controller]`, `#[tool]`, `#[resource]` and `#[prompt]`, checked over the wire.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use toolyard::{controller, tool, HandlerError, Json, RequestContext, Server, ServerBuilder};
use toolyard_testkit::RawClient;

#[derive(Deserialize, JsonSchema)]
struct DivArgs {
    /// The number to divide.
    dividend: f64,
    /// What to divide by.
    divisor: f64,
}

#[derive(Serialize, JsonSchema)]
struct Quotient {
    value: f64,
}

#[derive(Deserialize)]
struct Point {
    x: f64,
    y: f64,
}

const POINT_SCHEMA: &str = r##"{
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {"point": {"$ref": "#/$defs/point"}},
    "required": ["point"],
    "additionalProperties": false,
    "$defs": {
        "point": {
            "type": "object",
            "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
            "required": ["x", "y"]
        }
    }
}"##;

struct Calc {
    offset: i64,
    calls: AtomicUsize,
}

#[controller]
impl Calc {
    /// Adds two numbers.
    ///
    /// The second one is optional.
    #[tool(read_only, idempotent = true, title = "Add numbers")]
    async fn add(
        &self,
        #[arg(description = "The first addend")] a: i64,
        #[arg(description = "The second addend")] b: Option<i64>,
    ) -> Result<String, HandlerError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        Ok((a + b.unwrap_or(0) + self.offset).to_string())
    }

    /// Divides one number by another.
    #[tool(name = "divide", destructive = false, open_world = false)]
    fn div(&self, ctx: &RequestContext, #[args] req: DivArgs) -> Result<Json<Quotient>, String> {
        let _ = ctx.request_id();
        if req.divisor == 0.0 {
            return Err("division by zero".to_owned());
        }
        Ok(Json(Quotient {
            value: req.dividend / req.divisor,
        }))
    }

    /// Distance of a point from the origin.
    #[tool(input_schema = r##"{
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {"point": {"$ref": "#/$defs/point"}},
        "required": ["point"],
        "additionalProperties": false,
        "$defs": {
            "point": {
                "type": "object",
                "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                "required": ["x", "y"]
            }
        }
    }"##)]
    fn norm(&self, point: Point) -> String {
        format!("{}", (point.x * point.x + point.y * point.y).sqrt())
    }

    /// Repeats a word; the schema is deliberately loose, so serde finds the bad field.
    #[tool(input_schema = r#"{"type":"object"}"#)]
    fn repeat(&self, word: String, times: u32) -> String {
        word.repeat(times as usize)
    }

    /// How many additions ran.
    #[tool]
    fn count(self: Arc<Self>) -> String {
        self.calls.load(Ordering::Relaxed).to_string()
    }

    /// About the calculator.
    #[resource("calc://about", mime_type = "text/markdown")]
    fn about(&self) -> String {
        format!("# Calc\noffset {}", self.helper())
    }

    /// A named constant.
    #[resource("calc://constants/{name}", name = "constant", mime_type = "text/plain")]
    async fn constant(&self, ctx: RequestContext, name: String) -> Result<String, HandlerError> {
        let _ = ctx.request_id();
        match name.as_str() {
            "pi" => Ok(std::f64::consts::PI.to_string()),
            "e" => Ok(std::f64::consts::E.to_string()),
            other => Err(HandlerError::failed(format!("no constant `{other}`"))),
        }
    }

    /// The calculator's version, with result metadata: a whole read result.
    #[resource("calc://version")]
    fn version(&self) -> toolyard::proto::ReadResourceResult {
        toolyard::proto::ReadResourceResult {
            meta: json!({"build": "abc"}).as_object().cloned(),
            ..vec![toolyard::proto::ResourceContents::text(
                "calc://version",
                None,
                "1.0",
            )]
            .into()
        }
    }

    /// Explains an operation.
    #[prompt(name = "explain")]
    fn explain_prompt(
        &self,
        #[arg(description = "The operation")] op: String,
        #[arg(description = "beginner or expert")] level: Option<String>,
    ) -> String {
        format!(
            "Explain {op} for a {} audience.",
            level.as_deref().unwrap_or("general")
        )
    }

    /// Not a tool: stays an ordinary method.
    fn helper(&self) -> i64 {
        self.offset
    }
}

#[derive(Serialize, JsonSchema)]
struct User {
    id: u32,
    name: String,
}

struct Users;

#[toolyard::controller]
impl Users {
    /// Gets a user.
    #[toolyard::tool]
    fn get_user(&self, id: u32) -> Json<User> {
        Json(User {
            id,
            name: format!("user{id}"),
        })
    }

    /// Gets a user's name.
    #[tool]
    fn get_name(&self, id: u32) -> String {
        format!("user{id}")
    }

    /// Deletes a user.
    #[tool(destructive, requires = "elicitation")]
    async fn delete_user(&self, id: u32) -> Result<(), HandlerError> {
        let _ = id;
        Ok(())
    }
}

/// Echoes the message back.
#[tool(open_world = false)]
async fn echo(
    ctx: RequestContext,
    #[arg(description = "What to echo")] message: String,
) -> Result<String, HandlerError> {
    let _ = ctx.request_id();
    Ok(message)
}

/// Shouts.
#[tool(name = "shout")]
pub(crate) fn loud(text: String) -> String {
    text.to_uppercase()
}

async fn start() -> (Server, RawClient) {
    let server = ServerBuilder::new("macros", "0")
        .controller(Calc {
            offset: 0,
            calls: AtomicUsize::new(0),
        })
        .controller(Users)
        .try_tool(echo_tool())
        .try_tool(loud_tool())
        .expose("svc", Users, &["get_*"])
        .start()
        .await
        .unwrap();
    let client = RawClient::connect(&server).await.unwrap();
    client
        .request(
            "initialize",
            json!({"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}),
        )
        .await
        .unwrap();
    client
        .notify("notifications/initialized", json!({}))
        .unwrap();
    (server, client)
}

async fn tools(client: &RawClient) -> Vec<Value> {
    let r = client.request("tools/list", json!({})).await.unwrap();
    r["tools"].as_array().unwrap().clone()
}

fn find<'a>(tools: &'a [Value], name: &str) -> &'a Value {
    tools
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no tool `{name}` in {tools:?}"))
}

async fn call(client: &RawClient, name: &str, args: Value) -> Value {
    client
        .request("tools/call", json!({"name": name, "arguments": args}))
        .await
        .unwrap()
}

#[tokio::test]
async fn controllers_and_free_tools_are_listed_with_names_descriptions_and_annotations() {
    let (_server, client) = start().await;
    let tools = tools(&client).await;
    let mut names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "add",
            "count",
            "delete_user",
            "divide",
            "echo",
            "get_name",
            "get_user",
            "norm",
            "repeat",
            "shout",
            "svc_get_name",
            "svc_get_user",
        ]
    );

    let add = find(&tools, "add");
    assert_eq!(
        add["description"],
        "Adds two numbers.\n\nThe second one is optional."
    );
    assert_eq!(add["title"], "Add numbers");
    assert_eq!(
        add["annotations"],
        json!({"title": "Add numbers", "readOnlyHint": true, "idempotentHint": true})
    );
    let divide = find(&tools, "divide");
    assert_eq!(divide["description"], "Divides one number by another.");
    assert_eq!(
        divide["annotations"],
        json!({"destructiveHint": false, "openWorldHint": false})
    );
    assert_eq!(
        find(&tools, "delete_user")["annotations"],
        json!({"destructiveHint": true})
    );
    assert!(find(&tools, "get_name").get("annotations").is_none());
    assert_eq!(
        find(&tools, "echo")["description"],
        "Echoes the message back."
    );
    assert_eq!(find(&tools, "shout")["description"], "Shouts.");
}

#[tokio::test]
async fn input_schemas_have_required_and_optional_properties_with_descriptions() {
    let (_server, client) = start().await;
    let tools = tools(&client).await;

    let add = &find(&tools, "add")["inputSchema"];
    assert_eq!(add["type"], "object");
    assert_eq!(add["required"], json!(["a"]));
    assert_eq!(add["properties"]["a"]["type"], "integer");
    assert_eq!(add["properties"]["a"]["description"], "The first addend");
    assert_eq!(add["properties"]["b"]["description"], "The second addend");
    assert!(add.get("title").is_none(), "{add}");

    // `#[args]`: the user's struct is the schema, doc comments included.
    let divide = &find(&tools, "divide")["inputSchema"];
    assert_eq!(divide["required"], json!(["dividend", "divisor"]));
    assert_eq!(
        divide["properties"]["divisor"]["description"],
        "What to divide by."
    );

    // A tool without parameters still has an object schema.
    let count = &find(&tools, "count")["inputSchema"];
    assert_eq!(count, &json!({"type": "object", "properties": {}}));

    let echo = &find(&tools, "echo")["inputSchema"];
    assert_eq!(echo["required"], json!(["message"]));
    assert_eq!(echo["properties"]["message"]["description"], "What to echo");
    assert!(echo["properties"].get("ctx").is_none(), "{echo}");
}

#[tokio::test]
async fn a_hand_written_schema_is_passed_through_verbatim() {
    let (_server, client) = start().await;
    let tools = tools(&client).await;
    let expected: Value = serde_json::from_str(POINT_SCHEMA).unwrap();
    let norm = &find(&tools, "norm")["inputSchema"];
    assert_eq!(norm, &expected);
    assert_eq!(
        norm["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    assert_eq!(norm["additionalProperties"], false);
    assert_eq!(norm["$defs"]["point"]["required"], json!(["x", "y"]));

    let r = call(&client, "norm", json!({"point": {"x": 3, "y": 4}})).await;
    assert_eq!(r["content"][0]["text"], "5");
    // The verbatim schema is enforced: no extra properties.
    let r = call(&client, "norm", json!({"point": {"x": 3, "y": 4}, "z": 1})).await;
    assert_eq!(r["isError"], true, "{r}");
}

#[tokio::test]
async fn json_results_declare_an_output_schema_and_return_structured_content() {
    let (_server, client) = start().await;
    let tools = tools(&client).await;
    let out = &find(&tools, "divide")["outputSchema"];
    assert_eq!(out["type"], "object");
    assert_eq!(out["required"], json!(["value"]));
    let user = &find(&tools, "get_user")["outputSchema"];
    assert_eq!(user["required"], json!(["id", "name"]));
    assert!(find(&tools, "add").get("outputSchema").is_none());

    let r = call(&client, "divide", json!({"dividend": 7, "divisor": 2})).await;
    assert_eq!(r["structuredContent"], json!({"value": 3.5}), "{r}");
    assert!(r.get("isError").is_none() || r["isError"] == false, "{r}");

    let r = call(&client, "get_user", json!({"id": 7})).await;
    assert_eq!(r["structuredContent"], json!({"id": 7, "name": "user7"}));
}

#[tokio::test]
async fn calls_return_text_and_errors_become_error_results() {
    let (_server, client) = start().await;
    let r = call(&client, "add", json!({"a": 2, "b": 40})).await;
    assert_eq!(r["content"][0]["text"], "42");
    let r = call(&client, "add", json!({"a": 2})).await;
    assert_eq!(r["content"][0]["text"], "2");
    let r = call(&client, "count", json!({})).await;
    assert_eq!(r["content"][0]["text"], "2");

    let r = call(&client, "echo", json!({"message": "hi"})).await;
    assert_eq!(r["content"][0]["text"], "hi");
    let r = call(&client, "shout", json!({"text": "hi"})).await;
    assert_eq!(r["content"][0]["text"], "HI");

    // `Err(String)` from the method: an error result with the message.
    let r = call(&client, "divide", json!({"dividend": 1, "divisor": 0})).await;
    assert_eq!(r["isError"], true);
    assert!(
        r["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("division by zero"),
        "{r}"
    );
}

#[tokio::test]
async fn a_wrong_typed_argument_gives_an_error_result_naming_the_field() {
    let (_server, client) = start().await;
    // Caught by the generated schema.
    let r = call(&client, "add", json!({"a": "two"})).await;
    assert_eq!(r["isError"], true, "{r}");
    let text = r["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("/a") || text.contains("`a`"), "{text}");

    // The schema allows it; deserialization names the field.
    let r = call(&client, "repeat", json!({"word": "ab", "times": "many"})).await;
    assert_eq!(r["isError"], true, "{r}");
    let text = r["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("`times`"), "{text}");
    let r = call(&client, "repeat", json!({"word": "ab"})).await;
    assert_eq!(r["isError"], true, "{r}");
    let text = r["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("times"), "{text}");
    let r = call(&client, "repeat", json!({"word": "ab", "times": 3})).await;
    assert_eq!(r["content"][0]["text"], "ababab");
}

#[tokio::test]
async fn a_tool_requiring_a_capability_is_refused_without_it() {
    let (_server, client) = start().await;
    let r = client
        .request(
            "tools/call",
            json!({"name": "delete_user", "arguments": {"id": 1}}),
        )
        .await;
    // The test client declared no capabilities; the tool requires elicitation.
    match r {
        Err(toolyard_testkit::RawClientError::Rpc(e)) => assert_eq!(e.code, -32021, "{e}"),
        other => panic!("expected -32021, got {other:?}"),
    }
    let (_server2, _) = start().await;
    let capable = RawClient::connect(&_server2).await.unwrap();
    capable
        .initialize(json!({"elicitation": {}}))
        .await
        .unwrap();
    let r = call(&capable, "delete_user", json!({"id": 1})).await;
    assert!(r.get("isError").is_none(), "{r}");
}

#[tokio::test]
async fn resources_and_templates_are_listed_and_read() {
    let (_server, client) = start().await;
    let r = client.request("resources/list", json!({})).await.unwrap();
    let about = &r["resources"][0];
    assert_eq!(about["uri"], "calc://about");
    assert_eq!(about["name"], "about");
    assert_eq!(about["description"], "About the calculator.");
    assert_eq!(about["mimeType"], "text/markdown");

    let r = client
        .request("resources/templates/list", json!({}))
        .await
        .unwrap();
    let t = &r["resourceTemplates"][0];
    assert_eq!(t["uriTemplate"], "calc://constants/{name}");
    assert_eq!(t["name"], "constant");
    assert_eq!(t["description"], "A named constant.");

    let r = client
        .request("resources/read", json!({"uri": "calc://about"}))
        .await
        .unwrap();
    assert_eq!(r["contents"][0]["text"], "# Calc\noffset 0");
    assert_eq!(r["contents"][0]["mimeType"], "text/markdown");

    // A method returning a whole read result sets its `_meta`.
    let r = client
        .request("resources/read", json!({"uri": "calc://version"}))
        .await
        .unwrap();
    assert_eq!(r["contents"][0]["text"], "1.0");
    assert_eq!(r["_meta"], json!({"build": "abc"}));

    let r = client
        .request("resources/read", json!({"uri": "calc://constants/pi"}))
        .await
        .unwrap();
    assert_eq!(r["contents"][0]["uri"], "calc://constants/pi");
    assert!(
        r["contents"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("3.14159"),
        "{r}"
    );
    assert_eq!(r["contents"][0]["mimeType"], "text/plain");

    let r = client
        .request("resources/read", json!({"uri": "calc://constants/tau"}))
        .await;
    match r {
        Err(toolyard_testkit::RawClientError::Rpc(e)) => assert!(e.message.contains("tau"), "{e}"),
        other => panic!("expected an error, got {other:?}"),
    }
}

#[tokio::test]
async fn prompts_are_listed_and_got_with_arguments() {
    let (_server, client) = start().await;
    let r = client.request("prompts/list", json!({})).await.unwrap();
    let p = &r["prompts"][0];
    assert_eq!(p["name"], "explain");
    assert_eq!(p["description"], "Explains an operation.");
    assert_eq!(
        p["arguments"],
        json!([
            {"name": "op", "description": "The operation", "required": true},
            {"name": "level", "description": "beginner or expert", "required": false},
        ])
    );

    let r = client
        .request(
            "prompts/get",
            json!({"name": "explain", "arguments": {"op": "division", "level": "beginner"}}),
        )
        .await
        .unwrap();
    assert_eq!(r["messages"][0]["role"], "user");
    assert_eq!(
        r["messages"][0]["content"]["text"],
        "Explain division for a beginner audience."
    );
    let r = client
        .request(
            "prompts/get",
            json!({"name": "explain", "arguments": {"op": "addition"}}),
        )
        .await
        .unwrap();
    assert_eq!(
        r["messages"][0]["content"]["text"],
        "Explain addition for a general audience."
    );
    let r = client
        .request("prompts/get", json!({"name": "explain", "arguments": {}}))
        .await;
    assert!(r.is_err(), "a missing required argument is an error: {r:?}");
}

#[tokio::test]
async fn expose_prefixes_names_and_filters_by_glob() {
    let (_server, client) = start().await;
    let tools = tools(&client).await;
    assert!(tools.iter().all(|t| t["name"] != "svc_delete_user"));
    let r = call(&client, "svc_get_name", json!({"id": 3})).await;
    assert_eq!(r["content"][0]["text"], "user3");
    let r = call(&client, "svc_get_user", json!({"id": 4})).await;
    assert_eq!(r["structuredContent"]["name"], "user4");
}

#[test]
fn a_free_tool_definition_can_be_inspected() {
    let def = echo_tool().unwrap();
    assert_eq!(def.tool().name, "echo");
    assert_eq!(
        def.tool().description.as_deref(),
        Some("Echoes the message back.")
    );
    let def = loud_tool().unwrap();
    assert_eq!(def.tool().name, "shout");
}
