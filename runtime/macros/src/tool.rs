//! `#[tool]`: the options and the expression building a `ToolDef`.

use crate::opts::{self, Opt};
use crate::sig::{self, FnInfo, Kind};
use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use std::collections::BTreeMap;
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::LitStr;

/// The options of `#[tool(...)]`.
#[derive(Default)]
pub(crate) struct ToolOpts {
    name: Option<LitStr>,
    title: Option<LitStr>,
    description: Option<LitStr>,
    read_only: Option<bool>,
    destructive: Option<bool>,
    idempotent: Option<bool>,
    open_world: Option<bool>,
    input_schema: Option<LitStr>,
    requires: Option<LitStr>,
}

const KEYS: &[&str] = &[
    "name",
    "title",
    "description",
    "read_only",
    "destructive",
    "idempotent",
    "open_world",
    "input_schema",
    "requires",
];

impl ToolOpts {
    /// Reads the options.
    pub(crate) fn parse(list: Vec<Opt>) -> syn::Result<ToolOpts> {
        let mut o = ToolOpts::default();
        sig::each_opt(list, |opt| {
            let Some(key) = opt.key() else {
                return Err(opt.error(
                    "`#[tool]` takes `key = value` options, e.g. `#[tool(name = \"search\")]`",
                ));
            };
            match key.to_string().as_str() {
                "name" => opts::set_once(&mut o.name, opt.string()?, opt),
                "title" => opts::set_once(&mut o.title, opt.string()?, opt),
                "description" => opts::set_once(&mut o.description, opt.string()?, opt),
                "read_only" => opts::set_once(&mut o.read_only, opt.flag()?, opt),
                "destructive" => opts::set_once(&mut o.destructive, opt.flag()?, opt),
                "idempotent" => opts::set_once(&mut o.idempotent, opt.flag()?, opt),
                "open_world" => opts::set_once(&mut o.open_world, opt.flag()?, opt),
                "input_schema" => opts::set_once(&mut o.input_schema, opt.string()?, opt),
                "requires" => opts::set_once(&mut o.requires, opt.string()?, opt),
                _ => Err(opts::unknown(opt, "`#[tool]`", KEYS)),
            }
        })?;
        Ok(o)
    }
}

/// Whether `name` is a valid tool name: 1–128 of `A-Z a-z 0-9 _ - .`.
fn valid_tool_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// Checks a hand-written input schema: JSON, an object, `"type": "object"`.
fn check_input_schema(lit: &LitStr) -> syn::Result<()> {
    let value: serde_json::Value = serde_json::from_str(&lit.value()).map_err(|e| {
        syn::Error::new(lit.span(), format!("`input_schema` is not valid JSON: {e}"))
    })?;
    let Some(obj) = value.as_object() else {
        return Err(syn::Error::new(
            lit.span(),
            "`input_schema` must be a JSON object",
        ));
    };
    if obj.get("type").and_then(|t| t.as_str()) != Some("object") {
        return Err(syn::Error::new(
            lit.span(),
            "`input_schema` must declare `\"type\": \"object\"` (tool arguments are an object)",
        ));
    }
    Ok(())
}

/// A tree of capability names: `"sampling.tools"` is `{"sampling": {"tools": {}}}`.
#[derive(Default)]
struct CapTree(BTreeMap<String, CapTree>);

impl CapTree {
    fn parse(lit: &LitStr) -> syn::Result<CapTree> {
        let mut tree = CapTree::default();
        let text = lit.value();
        for item in text.split(',').map(str::trim) {
            let valid = !item.is_empty()
                && item.split('.').all(|part| {
                    !part.is_empty()
                        && part
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
                });
            if !valid {
                return Err(syn::Error::new(
                    lit.span(),
                    format!(
                        "`requires` is a comma list of client capabilities such as \
                         \"elicitation, sampling.tools\"; `{item}` is not one"
                    ),
                ));
            }
            let mut node = &mut tree;
            for part in item.split('.') {
                node = node.0.entry(part.to_owned()).or_default();
            }
        }
        Ok(tree)
    }

    /// An expression building this tree as a `JsonObject`.
    fn to_tokens(&self) -> TokenStream {
        let p = quote!(::toolyard::__private);
        let inserts = self.0.iter().map(|(k, v)| {
            let inner = v.to_tokens();
            quote! {
                __toolyard_m.insert(
                    ::std::string::String::from(#k),
                    #p::serde_json::Value::Object(#inner),
                );
            }
        });
        quote! {{
            #[allow(unused_mut)]
            let mut __toolyard_m = #p::JsonObject::new();
            #(#inserts)*
            __toolyard_m
        }}
    }
}

/// An expression of type `Result<ToolDef, DefinitionError>` for the function. For methods it
/// expects `self: &Arc<Self>` in scope.
pub(crate) fn def_expr(o: &ToolOpts, f: &FnInfo) -> syn::Result<TokenStream> {
    let p = quote!(::toolyard::__private);
    let mut errors = opts::Errors::default();

    let (name, name_span) = match &o.name {
        Some(l) => (l.value(), l.span()),
        None => (f.ident.unraw().to_string(), f.ident.span()),
    };
    if !valid_tool_name(&name) {
        errors.push(syn::Error::new(
            name_span,
            format!("invalid tool name `{name}`: use 1 to 128 of the characters A-Z a-z 0-9 _ - ."),
        ));
    }
    let description = o
        .description
        .as_ref()
        .map(LitStr::value)
        .or_else(|| f.docs.clone())
        .unwrap_or_else(|| name.clone());
    if let Some(s) = &o.input_schema {
        errors.ok(check_input_schema(s));
    }
    let requires = o
        .requires
        .as_ref()
        .and_then(|l| errors.ok(CapTree::parse(l)));

    // Arguments: an `#[args]` struct, or a generated struct of the value parameters.
    let args_params: Vec<_> = f.values().filter(|p| p.kind == Kind::Args).collect();
    let plain: Vec<_> = f.values().filter(|p| p.kind == Kind::Value).collect();
    if let Some(extra) = args_params.get(1) {
        errors.push(extra.error("only one `#[args]` parameter is allowed"));
    }
    if let (Some(_), Some(other)) = (args_params.first(), plain.first()) {
        errors.push(other.error(
            "with an `#[args]` parameter, every other parameter must be the `RequestContext`",
        ));
    }
    let hand_written = o.input_schema.is_some();
    if hand_written {
        for prm in &plain {
            if prm.description.is_some()
                || prm.forward.iter().any(|a| a.path().is_ident("schemars"))
            {
                errors.push(prm.error(
                    "with `input_schema`, the schema is used verbatim: describe this argument \
                     there instead of with `#[arg(description)]` / `#[schemars]`",
                ));
            }
        }
    }
    errors.finish()?;

    let (args_struct, args_ty, parse) = match args_params.first() {
        Some(a) => (TokenStream::new(), a.ty.clone(), true),
        None => {
            let fields = plain.iter().map(|prm| {
                let ident = &prm.ident;
                let ty = &prm.ty;
                let description = prm
                    .description
                    .as_ref()
                    .map(|d| quote!(#[schemars(description = #d)]))
                    .unwrap_or_default();
                let rename = prm
                    .rename
                    .as_ref()
                    .map(|r| quote!(#[serde(rename = #r)]))
                    .unwrap_or_default();
                let forward = &prm.forward;
                quote! {
                    #description
                    #rename
                    #(#forward)*
                    #ident: #ty
                }
            });
            let derive_schema = (!hand_written).then(|| quote!(, #p::schemars::JsonSchema));
            let schemars_crate = (!hand_written)
                .then(|| quote!(#[schemars(crate = "::toolyard::__private::schemars")]));
            // No parameters: no struct (the schema is an empty object, nothing is parsed).
            let s = if plain.is_empty() {
                TokenStream::new()
            } else {
                quote! {
                    #[derive(#p::serde::Deserialize #derive_schema)]
                    #[serde(crate = "::toolyard::__private::serde")]
                    #schemars_crate
                    #[allow(non_camel_case_types)]
                    struct __ToolyardArgs {
                        #(#fields,)*
                    }
                }
            };
            (s, syn::parse_quote!(__ToolyardArgs), !plain.is_empty())
        }
    };

    let input_schema = match &o.input_schema {
        Some(lit) => quote! {
            match #p::serde_json::from_str::<#p::JsonObject>(#lit) {
                ::core::result::Result::Ok(__toolyard_s) => ::core::result::Result::Ok(__toolyard_s),
                ::core::result::Result::Err(__toolyard_e) => {
                    ::core::result::Result::Err(#p::DefinitionError::Schema {
                        tool: ::std::string::String::from(#name),
                        which: "input",
                        reason: ::std::string::ToString::to_string(&__toolyard_e),
                    })
                }
            }
        },
        None if !parse => quote! {{
            let mut __toolyard_s = #p::JsonObject::new();
            __toolyard_s.insert(
                ::std::string::String::from("type"),
                #p::serde_json::Value::from("object"),
            );
            __toolyard_s.insert(
                ::std::string::String::from("properties"),
                #p::serde_json::Value::Object(#p::JsonObject::new()),
            );
            ::core::result::Result::Ok(__toolyard_s)
        }},
        None => {
            let ty_span = args_ty.span();
            let schema_for = quote_spanned!(ty_span=> #p::schema_object_for::<#args_ty>);
            quote!(::core::result::Result::Ok(#schema_for()))
        }
    };

    let output_schema = f
        .output
        .ok
        .as_ref()
        .and_then(sig::last_segment)
        .filter(|s| s.ident == "Json")
        .and_then(|s| sig::type_arg(s, 0))
        .map(|t| {
            let schema_for = quote_spanned!(t.span()=> #p::schema_object_for::<#t>);
            quote!(.with_output_schema(#schema_for()))
        });
    let requires = requires.map(|t| {
        let obj = t.to_tokens();
        quote!(.requires_capabilities(#obj))
    });

    let flag = |v: Option<bool>| match v {
        Some(b) => quote!(::core::option::Option::Some(#b)),
        None => quote!(::core::option::Option::None),
    };
    let title = sig::opt_string(o.title.as_ref().map(LitStr::value).as_deref());
    let annotated = o.title.is_some()
        || o.read_only.is_some()
        || o.destructive.is_some()
        || o.idempotent.is_some()
        || o.open_world.is_some();
    let annotations = if annotated {
        let (ro, de, id, ow) = (
            flag(o.read_only),
            flag(o.destructive),
            flag(o.idempotent),
            flag(o.open_world),
        );
        quote! {
            ::core::option::Option::Some(#p::ToolAnnotations {
                title: #title,
                read_only_hint: #ro,
                destructive_hint: #de,
                idempotent_hint: #id,
                open_world_hint: #ow,
                ..::core::default::Default::default()
            })
        }
    } else {
        quote!(::core::option::Option::None)
    };

    // When the struct does not deserialize, name the first field that does not (serde's
    // messages do not say which field had the wrong type). Only on the error path.
    let diagnose = plain
        .iter()
        .filter(|prm| prm.forward.iter().all(|a| !a.path().is_ident("serde")))
        .map(|prm| {
            let ty = &prm.ty;
            let key = prm.wire_name();
            quote! {
                if let ::core::option::Option::Some(__toolyard_f) = __toolyard_args.value().get(#key) {
                    if let ::core::result::Result::Err(__toolyard_fe) =
                        <#ty as #p::serde::Deserialize>::deserialize(__toolyard_f)
                    {
                        return ::core::result::Result::Err(#p::HandlerError::invalid_arguments(
                            ::std::format!("`{}`: {}", #key, __toolyard_fe),
                        ));
                    }
                }
            }
        });
    let parse_args = if parse {
        quote! {
            let __toolyard_a: #args_ty = match __toolyard_args.parse::<#args_ty>() {
                ::core::result::Result::Ok(__toolyard_a) => __toolyard_a,
                ::core::result::Result::Err(__toolyard_e) => {
                    #(#diagnose)*
                    return ::core::result::Result::Err(__toolyard_e);
                }
            };
        }
    } else {
        TokenStream::new()
    };
    let args_pat = if parse {
        quote!(__toolyard_args)
    } else {
        quote!(_)
    };
    let call = f.call(|prm| match prm.kind {
        Kind::Args => quote!(__toolyard_a),
        _ => {
            let i = &prm.ident;
            quote!(__toolyard_a.#i)
        }
    });
    let into = quote_spanned! {f.output.span=>
        #p::IntoCallToolResult::into_call_tool_result
    };
    let convert = f.convert_output(|v| quote!(#into(#v)));
    let capture = f.capture_this();
    let clone = f.clone_this();
    let ctx_pat = f.ctx_pat();

    Ok(quote! {{
        #args_struct
        let __toolyard_input: ::core::result::Result<#p::JsonObject, #p::DefinitionError> =
            #input_schema;
        match __toolyard_input {
            ::core::result::Result::Err(__toolyard_e) => ::core::result::Result::Err(__toolyard_e),
            ::core::result::Result::Ok(__toolyard_input) => {
                let __toolyard_tool = #p::Tool {
                    name: ::std::string::String::from(#name),
                    title: #title,
                    description: ::core::option::Option::Some(::std::string::String::from(#description)),
                    input_schema: __toolyard_input,
                    annotations: #annotations,
                    ..::core::default::Default::default()
                };
                #capture
                let __toolyard_handler: #p::ToolFn = #p::Arc::new(
                    move |#ctx_pat: #p::RequestContext, #args_pat: #p::ToolArgs| {
                        #clone
                        ::std::boxed::Box::pin(async move {
                            #parse_args
                            let __toolyard_r = #call;
                            #convert
                        })
                    },
                );
                match #p::ToolDef::new(__toolyard_tool, __toolyard_handler) {
                    ::core::result::Result::Ok(__toolyard_d) => {
                        ::core::result::Result::Ok(__toolyard_d #output_schema #requires)
                    }
                    ::core::result::Result::Err(__toolyard_e) => ::core::result::Result::Err(__toolyard_e),
                }
            }
        }
    }})
}

/// `#[tool]` on a free function: the function plus `fn <name>_tool()`.
#[allow(
    clippy::needless_pass_by_value,
    reason = "takes ownership: callers hand the value over and never use it again, so a borrow would only add noise at every call site"
)]
pub(crate) fn free(attr: TokenStream, item: TokenStream) -> TokenStream {
    let mut func: syn::ItemFn = match syn::parse2(item.clone()) {
        Ok(f) => f,
        Err(_) => {
            let e = syn::Error::new(
                Span::call_site(),
                "`#[tool]` goes on a function, or on a method of an impl block marked \
                 `#[toolyard::controller]`",
            );
            let e = e.to_compile_error();
            return quote!(#e #item);
        }
    };
    let result = opts::parse(attr).and_then(ToolOpts::parse).and_then(|o| {
        let info = FnInfo::analyze(&mut func.sig, &func.attrs, false)?;
        def_expr(&o, &info)
    });
    sig::strip_param_attrs(&mut func.sig);
    match result {
        Ok(def) => {
            let vis = &func.vis;
            let fn_name = quote::format_ident!("{}_tool", func.sig.ident.unraw());
            let doc = format!(" The tool definition of [`{}`].", func.sig.ident.unraw());
            quote! {
                #func

                #[doc = #doc]
                #[allow(clippy::all, clippy::pedantic, clippy::nursery)]
                #vis fn #fn_name() -> ::core::result::Result<
                    ::toolyard::__private::ToolDef,
                    ::toolyard::__private::DefinitionError,
                > {
                    #def
                }
            }
        }
        Err(e) => {
            let e = e.to_compile_error();
            quote!(#e #func)
        }
    }
}
