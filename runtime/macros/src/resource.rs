//! `#[resource("uri", ...)]`: a static resource, or a template when the URI has `{...}`.

use crate::opts::{self, Opt};
use crate::sig::{self, FnInfo, Kind};
use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::ext::IdentExt;
use syn::LitStr;

/// The options of `#[resource(...)]`.
#[derive(Default)]
pub(crate) struct ResourceOpts {
    uri: Option<LitStr>,
    name: Option<LitStr>,
    title: Option<LitStr>,
    description: Option<LitStr>,
    mime_type: Option<LitStr>,
}

const KEYS: &[&str] = &["uri", "name", "title", "description", "mime_type"];

impl ResourceOpts {
    /// Reads the options; the URI is required.
    pub(crate) fn parse(list: Vec<Opt>, attr: &syn::Attribute) -> syn::Result<Self> {
        let mut o = ResourceOpts::default();
        sig::each_opt(list, |opt| {
            match opt.key().map(ToString::to_string).as_deref() {
                None | Some("uri") => opts::set_once(&mut o.uri, opt.string()?, opt),
                Some("name") => opts::set_once(&mut o.name, opt.string()?, opt),
                Some("title") => opts::set_once(&mut o.title, opt.string()?, opt),
                Some("description") => opts::set_once(&mut o.description, opt.string()?, opt),
                Some("mime_type") => opts::set_once(&mut o.mime_type, opt.string()?, opt),
                Some(_) => Err(opts::unknown(opt, "`#[resource]`", KEYS)),
            }
        })?;
        if o.uri.is_none() {
            return Err(syn::Error::new_spanned(
                attr,
                "`#[resource]` needs a URI: `#[resource(\"docs://readme\")]` or a template \
                 such as `#[resource(\"users://{id}/profile\")]`",
            ));
        }
        Ok(o)
    }
}

/// The variables of a URI template, checked with the runtime's grammar (`{var}`, `{+var}`,
/// `{?a,b}`, ...; explode and prefix modifiers allowed). `Ok(vec![])`: not a template.
fn template_vars(lit: &LitStr) -> syn::Result<Vec<String>> {
    let err = |m: String| syn::Error::new(lit.span(), m);
    let source = lit.value();
    let mut vars = Vec::new();
    let mut rest = source.as_str();
    while let Some(open) = rest.find('{') {
        if rest[..open].contains('}') {
            return Err(err("unmatched `}` in the URI template".into()));
        }
        let Some(len) = rest[open..].find('}') else {
            return Err(err("unclosed `{` in the URI template".into()));
        };
        let body = &rest[open + 1..open + len];
        let list = body
            .strip_prefix(['+', '#', '/', '.', '?', '&', ';'])
            .unwrap_or(body);
        for v in list.split(',') {
            let v = v.trim_end_matches('*').split(':').next().unwrap_or("");
            if v.is_empty()
                || !v
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '%')
            {
                return Err(err(format!(
                    "bad variable list `{{{body}}}` in the URI template"
                )));
            }
            // A variable may appear more than once (RFC 6570); it is one parameter.
            if !vars.iter().any(|x| x == v) {
                vars.push(v.to_owned());
            }
        }
        rest = &rest[open + len + 1..];
    }
    if rest.contains('}') {
        return Err(err("unmatched `}` in the URI template".into()));
    }
    Ok(vars)
}

/// What a `#[resource]` method becomes.
pub(crate) enum ResourceKind {
    /// A `ResourceDef` expression.
    Static(TokenStream),
    /// A `Result<TemplateDef, DefinitionError>` expression.
    Template(TokenStream),
}

/// The definition of a `#[resource]` method (expects `self: &Arc<Self>` in scope).
pub(crate) fn def_expr(o: &ResourceOpts, f: &FnInfo) -> syn::Result<ResourceKind> {
    let p = quote!(::toolyard::__private);
    let Some(uri) = &o.uri else {
        return Err(syn::Error::new(f.ident.span(), "`#[resource]` needs a URI"));
    };
    if uri.value().is_empty() {
        return Err(syn::Error::new(uri.span(), "the resource URI is empty"));
    }
    let vars = template_vars(uri)?;
    let is_template = uri.value().contains('{');

    let mut errors = opts::Errors::default();
    for prm in f.values() {
        if let Some(a) = prm.forward.first() {
            errors.push(syn::Error::new_spanned(
                a,
                "only tool parameters take `#[serde]` / `#[schemars]` attributes",
            ));
        }
        if prm.kind == Kind::Args || prm.description.is_some() || prm.rename.is_some() {
            errors.push(prm.error("resource parameters take no `#[arg]` / `#[args]` attributes"));
            continue;
        }
        let name = prm.ident.unraw().to_string();
        if !is_template {
            errors.push(prm.error(format!(
                "a static resource takes no parameters (besides a `RequestContext`); \
                     to read `{name}` from the URI, make it a template such as \
                     \"scheme://path/{{{name}}}\""
            )));
        } else if !vars.contains(&name) {
            errors.push(prm.error(format!(
                "`{name}` is not a variable of the URI template `{}`",
                uri.value()
            )));
        } else if !sig::is_string(&prm.ty) && !sig::is_option_string(&prm.ty) {
            errors.push(prm.error(
                "URI template variables are strings: use `String` (or `Option<String>` for an \
                 optional query variable)",
            ));
        }
    }
    for v in &vars {
        if !f.values().any(|prm| prm.ident.unraw() == v) {
            errors.push(syn::Error::new(
                f.ident.span(),
                format!("the URI template variable `{v}` needs a parameter `{v}: String`"),
            ));
        }
    }
    errors.finish()?;

    let name = o
        .name
        .as_ref()
        .map(LitStr::value)
        .unwrap_or_else(|| f.ident.unraw().to_string());
    let description = sig::opt_string(
        o.description
            .as_ref()
            .map(LitStr::value)
            .or_else(|| f.docs.clone())
            .as_deref(),
    );
    let title = sig::opt_string(o.title.as_ref().map(LitStr::value).as_deref());
    let mime = sig::opt_string(o.mime_type.as_ref().map(LitStr::value).as_deref());
    let mime_ref = match &o.mime_type {
        Some(m) => quote!(::core::option::Option::Some(#m)),
        None => quote!(::core::option::Option::None),
    };

    let take_vars = f.values().map(|prm| {
        let local = prm.local();
        let key = prm.ident.unraw().to_string();
        if sig::is_option_string(&prm.ty) {
            quote!(let #local = __toolyard_vars.remove(#key);)
        } else {
            let msg = format!("missing URI template variable `{key}`");
            quote! {
                let #local = match __toolyard_vars.remove(#key) {
                    ::core::option::Option::Some(__toolyard_v) => __toolyard_v,
                    ::core::option::Option::None => {
                        return ::core::result::Result::Err(
                            #p::HandlerError::invalid_arguments(#msg),
                        )
                    }
                };
            }
        }
    });
    let vars_binding = if f.values().next().is_some() {
        quote!(let mut __toolyard_vars = __toolyard_req.vars;)
    } else {
        TokenStream::new()
    };
    let call = f.call(|prm| {
        let l = prm.local();
        quote!(#l)
    });
    let into = quote_spanned! {f.output.span=>
        #p::IntoReadResult::into_read_result
    };
    let convert = f.convert_output(|v| quote!(#into(#v, &__toolyard_req.uri, #mime_ref)));
    let capture = f.capture_this();
    let clone = f.clone_this();
    let ctx_pat = f.ctx_pat();
    let read = quote! {{
        #capture
        let __toolyard_read: #p::ResourceFn = #p::Arc::new(
            move |#ctx_pat: #p::RequestContext, __toolyard_req: #p::ResourceRequest| {
                #clone
                ::std::boxed::Box::pin(async move {
                    #vars_binding
                    #(#take_vars)*
                    let __toolyard_r = #call;
                    #convert
                })
            },
        );
        __toolyard_read
    }};

    Ok(if is_template {
        ResourceKind::Template(quote! {
            #p::TemplateDef::new(
                #p::ResourceTemplate {
                    uri_template: ::std::string::String::from(#uri),
                    name: ::std::string::String::from(#name),
                    title: #title,
                    description: #description,
                    mime_type: #mime,
                    ..::core::default::Default::default()
                },
                #read,
            )
        })
    } else {
        ResourceKind::Static(quote! {
            #p::ResourceDef::new(
                #p::Resource {
                    uri: ::std::string::String::from(#uri),
                    name: ::std::string::String::from(#name),
                    title: #title,
                    description: #description,
                    mime_type: #mime,
                    ..::core::default::Default::default()
                },
                #read,
            )
        })
    })
}
