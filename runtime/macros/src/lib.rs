//! `#[controller]`, `#[tool]`, `#[resource]` and `#[prompt]` for Toolyard.
//!
//! Use them through the `toolyard` crate (`toolyard::controller`, `toolyard::tool`, ...); the
//! generated code only names items under `::toolyard::__private`.
//!
//! ```ignore
//! use toolyard::{controller, Json, RequestContext, HandlerError};
//!
//! struct Library { /* ... */ }
//!
//! #[controller]
//! impl Library {
//!     /// Finds books by title.
//!     #[tool(read_only, title = "Search books")]
//!     async fn search(
//!         &self,
//!         #[arg(description = "Words of the title")] query: String,
//!         limit: Option<u32>,
//!     ) -> Result<Json<Vec<Book>>, HandlerError> { /* ... */ }
//!
//!     /// A book's record.
//!     #[resource("books://{isbn}", mime_type = "application/json")]
//!     fn book(&self, isbn: String) -> Result<String, HandlerError> { /* ... */ }
//!
//!     /// Asks for a review of a book.
//!     #[prompt(name = "review")]
//!     fn review(&self, title: String, tone: Option<String>) -> String { /* ... */ }
//! }
//! ```

mod controller;
mod opts;
mod prompt;
mod resource;
mod sig;
mod tool;

use proc_macro::TokenStream;

/// Turns the `#[tool]`, `#[resource]` and `#[prompt]` methods of an inherent impl block into
/// an `impl toolyard::Controller` (the block itself is kept, minus those attributes).
///
/// Methods take `&self` (or `self: Arc<Self>`); the controller is shared by the handlers in an
/// `Arc`. An invalid definition that can only be detected at run time (a hand-written
/// `input_schema` the JSON Schema compiler rejects) panics when the controller is added to a
/// `ServerBuilder`.
#[proc_macro_attribute]
pub fn controller(attr: TokenStream, item: TokenStream) -> TokenStream {
    controller::expand(attr.into(), item.into()).into()
}

/// A tool: a method of a `#[controller]` impl block, or a free function (which then gets a
/// sibling `fn <name>_tool() -> Result<ToolDef, DefinitionError>`).
///
/// Options: `name = "..."` (default: the function's name), `title = "..."`,
/// `description = "..."` (default: the doc comments, else the name), the annotation flags
/// `read_only`, `destructive`, `idempotent`, `open_world` (each also `= true` / `= false`),
/// `input_schema = "{...}"` (a hand-written JSON Schema used verbatim; the arguments are still
/// deserialized into the parameters) and `requires = "elicitation, sampling"` (client
/// capabilities the tool needs).
///
/// Parameters: an optional `RequestContext` / `&RequestContext`; every other parameter is a
/// property of the input schema (`Option<T>`: not required), described by
/// `#[arg(description = "...")]` and renamed by `#[arg(rename = "...")]`; `#[serde(...)]` and
/// `#[schemars(...)]` on a parameter go to the generated field. Or a single `#[args] a: T`
/// where `T: Deserialize + JsonSchema` is the whole argument object.
///
/// Returns `R` or `Result<R, E>` with `R: IntoCallToolResult` and `E: Into<HandlerError>`;
/// `Json<T>` also declares `outputSchema` from `T`.
#[proc_macro_attribute]
pub fn tool(attr: TokenStream, item: TokenStream) -> TokenStream {
    tool::free(attr.into(), item.into()).into()
}

/// A resource: `#[resource("scheme://path", name = "...", title = "...", description = "...",
/// mime_type = "...")]` on a method of a `#[controller]` impl block. A URI with `{var}`s is a
/// template: every variable is a `String` parameter of the same name (`Option<String>` for an
/// optional query variable). Returns `R` or `Result<R, E>` with `R: IntoReadResult`.
#[proc_macro_attribute]
pub fn resource(_attr: TokenStream, item: TokenStream) -> TokenStream {
    outside_controller("resource", item.into()).into()
}

/// A prompt: `#[prompt(name = "...", title = "...", description = "...")]` on a method of a
/// `#[controller]` impl block. Parameters are `String` (required argument) or `Option<String>`
/// (optional), described by `#[arg(description = "...")]`, plus an optional
/// `RequestContext`. Returns `R` or `Result<R, E>` with `R: IntoPromptResult`.
#[proc_macro_attribute]
pub fn prompt(_attr: TokenStream, item: TokenStream) -> TokenStream {
    outside_controller("prompt", item.into()).into()
}

/// `#[resource]` / `#[prompt]` reached on their own: the impl block is not a controller.
fn outside_controller(what: &str, item: proc_macro2::TokenStream) -> proc_macro2::TokenStream {
    let e = syn::Error::new(
        proc_macro2::Span::call_site(),
        format!(
            "`#[{what}]` only works on methods of an impl block marked `#[toolyard::controller]`"
        ),
    )
    .to_compile_error();
    let item = match syn::parse2::<syn::ItemFn>(item.clone()) {
        Ok(mut f) => {
            sig::strip_param_attrs(&mut f.sig);
            quote::quote!(#f)
        }
        Err(_) => match syn::parse2::<syn::ImplItemFn>(item.clone()) {
            Ok(mut f) => {
                sig::strip_param_attrs(&mut f.sig);
                quote::quote!(#f)
            }
            Err(_) => item,
        },
    };
    quote::quote!(#e #item)
}
