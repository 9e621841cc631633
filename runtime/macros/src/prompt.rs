//! `#[prompt(...)]`: a prompt whose arguments are the method's `String` / `Option<String>`
//! parameters.

use crate::opts::{self, Opt};
use crate::sig::{self, FnInfo, Kind};
use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::ext::IdentExt;
use syn::LitStr;

/// The options of `#[prompt(...)]`.
#[derive(Default)]
pub(crate) struct PromptOpts {
    name: Option<LitStr>,
    title: Option<LitStr>,
    description: Option<LitStr>,
}

const KEYS: &[&str] = &["name", "title", "description"];

impl PromptOpts {
    /// Reads the options.
    pub(crate) fn parse(list: Vec<Opt>) -> syn::Result<Self> {
        let mut o = PromptOpts::default();
        sig::each_opt(list, |opt| {
            match opt.key().map(ToString::to_string).as_deref() {
                Some("name") => opts::set_once(&mut o.name, opt.string()?, opt),
                Some("title") => opts::set_once(&mut o.title, opt.string()?, opt),
                Some("description") => opts::set_once(&mut o.description, opt.string()?, opt),
                _ => Err(opts::unknown(opt, "`#[prompt]`", KEYS)),
            }
        })?;
        Ok(o)
    }
}

/// A `PromptDef` expression for the method (expects `self: &Arc<Self>` in scope).
pub(crate) fn def_expr(o: &PromptOpts, f: &FnInfo) -> syn::Result<TokenStream> {
    let p = quote!(::toolyard::__private);
    let mut errors = opts::Errors::default();
    for prm in f.values() {
        if let Some(a) = prm.forward.first() {
            errors.push(syn::Error::new_spanned(
                a,
                "only tool parameters take `#[serde]` / `#[schemars]` attributes",
            ));
        }
        if prm.kind == Kind::Args {
            errors.push(prm.error(
                "prompt arguments are separate `String` / `Option<String>` parameters; \
                 `#[args]` is for tools",
            ));
        } else if !sig::is_string(&prm.ty) && !sig::is_option_string(&prm.ty) {
            errors.push(prm.error(
                "prompt arguments are strings: use `String` (required) or `Option<String>` \
                 (optional)",
            ));
        }
    }
    let mut seen = Vec::new();
    for prm in f.values() {
        let n = prm.wire_name();
        if seen.contains(&n) {
            errors.push(prm.error(format!("argument `{n}` appears twice")));
        }
        seen.push(n);
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

    let arguments: Vec<TokenStream> = f
        .values()
        .map(|prm| {
            let arg = prm.wire_name();
            let desc = sig::opt_string(prm.description.as_ref().map(LitStr::value).as_deref());
            let required = !sig::is_option_string(&prm.ty);
            quote! {
                #p::PromptArgument {
                    name: ::std::string::String::from(#arg),
                    description: #desc,
                    required: ::core::option::Option::Some(#required),
                    ..::core::default::Default::default()
                }
            }
        })
        .collect();
    let arguments = if arguments.is_empty() {
        quote!(::core::option::Option::None)
    } else {
        quote!(::core::option::Option::Some(::std::vec![#(#arguments),*]))
    };

    let take = f.values().map(|prm| {
        let local = prm.local();
        let key = prm.wire_name();
        if sig::is_option_string(&prm.ty) {
            quote!(let #local = __toolyard_args.remove(#key);)
        } else {
            let msg = format!("missing required argument `{key}`");
            quote! {
                let #local = match __toolyard_args.remove(#key) {
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
    let has_args = f.values().next().is_some();
    let (args_pat, rebind) = if has_args {
        (
            quote!(__toolyard_args),
            quote!(let mut __toolyard_args = __toolyard_args;),
        )
    } else {
        (quote!(_), TokenStream::new())
    };
    let call = f.call(|prm| {
        let l = prm.local();
        quote!(#l)
    });
    let into = quote_spanned! {f.output.span=>
        #p::IntoPromptResult::into_prompt_result
    };
    let convert = f.convert_output(|v| quote!(#into(#v)));
    let capture = f.capture_this();
    let clone = f.clone_this();
    let ctx_pat = f.ctx_pat();

    Ok(quote! {{
        #capture
        let __toolyard_get: #p::PromptFn = #p::Arc::new(
            move |#ctx_pat: #p::RequestContext,
                  #args_pat: ::std::collections::HashMap<::std::string::String, ::std::string::String>| {
                #clone
                ::std::boxed::Box::pin(async move {
                    #rebind
                    #(#take)*
                    let __toolyard_r = #call;
                    #convert
                })
            },
        );
        #p::PromptDef::new(
            #p::Prompt {
                name: ::std::string::String::from(#name),
                title: #title,
                description: #description,
                arguments: #arguments,
                ..::core::default::Default::default()
            },
            __toolyard_get,
        )
    }})
}
