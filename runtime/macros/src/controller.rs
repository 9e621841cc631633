//! `#[controller]`: collects the `#[tool]`, `#[resource]` and `#[prompt]` methods of an impl
//! block into an `impl Controller`.

use crate::opts::{self, Errors};
use crate::prompt::{self, PromptOpts};
use crate::resource::{self, ResourceKind, ResourceOpts};
use crate::sig::{self, FnInfo};
use crate::tool::{self, ToolOpts};
use proc_macro2::TokenStream;
use quote::quote;
use syn::{Attribute, ImplItem, ItemImpl};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Marker {
    Tool,
    Resource,
    Prompt,
}

impl Marker {
    fn name(self) -> &'static str {
        match self {
            Marker::Tool => "tool",
            Marker::Resource => "resource",
            Marker::Prompt => "prompt",
        }
    }
}

/// `#[tool]`, `#[toolyard::tool]`, `#[::toolyard::tool]` (and the same for the others).
fn marker(attr: &Attribute) -> Option<Marker> {
    let path = attr.path();
    let segs: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
    let last = match segs.as_slice() {
        [one] if path.leading_colon.is_none() => one,
        [krate, one] if krate == "toolyard" => one,
        _ => return None,
    };
    match last.as_str() {
        "tool" => Some(Marker::Tool),
        "resource" => Some(Marker::Resource),
        "prompt" => Some(Marker::Prompt),
        _ => None,
    }
}

/// The expansion of `#[controller] impl X { ... }`.
#[allow(
    clippy::needless_pass_by_value,
    reason = "takes ownership: callers hand the value over and never use it again, so a borrow would only add noise at every call site"
)]
pub(crate) fn expand(attr: TokenStream, item: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    if !attr.is_empty() {
        errors.push(syn::Error::new_spanned(
            &attr,
            "`#[controller]` takes no options",
        ));
    }
    let mut imp: ItemImpl = match syn::parse2(item.clone()) {
        Ok(i) => i,
        Err(_) => {
            let e = syn::Error::new(
                proc_macro2::Span::call_site(),
                "`#[controller]` goes on an inherent impl block: `#[toolyard::controller] impl \
                 MyController { ... }`",
            )
            .to_compile_error();
            return quote!(#e #item);
        }
    };
    if let Some((_, path, _)) = &imp.trait_ {
        errors.push(syn::Error::new_spanned(
            path,
            "`#[controller]` goes on an inherent impl block, not a trait impl",
        ));
        let e = errors.to_compile_errors();
        return quote!(#e #imp);
    }

    let mut tools = Vec::new();
    let mut resources = Vec::new();
    let mut templates = Vec::new();
    let mut prompts = Vec::new();
    for item in &mut imp.items {
        let ImplItem::Fn(method) = item else {
            continue;
        };
        let mut found: Vec<(Marker, Attribute)> = Vec::new();
        method.attrs.retain(|a| match marker(a) {
            Some(m) => {
                found.push((m, a.clone()));
                false
            }
            None => true,
        });
        let Some((kind, attr)) = found.first().cloned() else {
            continue;
        };
        if let Some((other, a)) = found.get(1) {
            let msg = if *other == kind {
                format!("`#[{}]` is given twice", kind.name())
            } else {
                format!(
                    "a method is one thing: it is already a `#[{}]`, so it cannot also be a \
                     `#[{}]`",
                    kind.name(),
                    other.name()
                )
            };
            errors.push(syn::Error::new_spanned(a, msg));
        }
        let info = FnInfo::analyze(&mut method.sig, &method.attrs, true);
        sig::strip_param_attrs(&mut method.sig);
        let Some(info) = errors.ok(info) else {
            continue;
        };
        let Some(list) = errors.ok(opts::of_attr(&attr)) else {
            continue;
        };
        match kind {
            Marker::Tool => {
                let def = ToolOpts::parse(list).and_then(|o| tool::def_expr(&o, &info));
                if let Some(d) = errors.ok(def) {
                    tools.push(d);
                }
            }
            Marker::Resource => {
                let def =
                    ResourceOpts::parse(list, &attr).and_then(|o| resource::def_expr(&o, &info));
                match errors.ok(def) {
                    Some(ResourceKind::Static(d)) => resources.push(d),
                    Some(ResourceKind::Template(d)) => templates.push(d),
                    None => {}
                }
            }
            Marker::Prompt => {
                let def = PromptOpts::parse(list).and_then(|o| prompt::def_expr(&o, &info));
                if let Some(d) = errors.ok(def) {
                    prompts.push(d);
                }
            }
        }
    }

    let p = quote!(::toolyard::__private);
    let self_ty = &imp.self_ty;
    let (impl_generics, _, where_clause) = imp.generics.split_for_impl();
    let type_name = quote!(#self_ty).to_string();
    let unwrap = |d: &TokenStream| {
        quote! {
            match #d {
                ::core::result::Result::Ok(__toolyard_d) => __toolyard_d,
                ::core::result::Result::Err(__toolyard_e) => ::core::panic!(
                    "toolyard: invalid definition in controller `{}`: {}",
                    #type_name,
                    __toolyard_e
                ),
            }
        }
    };
    let body = if errors.is_empty() {
        let mut fns = Vec::new();
        if !tools.is_empty() {
            let tools = tools.iter().map(unwrap);
            fns.push(quote! {
                fn tools(self: &#p::Arc<Self>) -> ::std::vec::Vec<#p::ToolDef> {
                    ::std::vec![#(#tools),*]
                }
            });
        }
        if !resources.is_empty() {
            fns.push(quote! {
                fn resources(self: &#p::Arc<Self>) -> ::std::vec::Vec<#p::ResourceDef> {
                    ::std::vec![#(#resources),*]
                }
            });
        }
        if !templates.is_empty() {
            let templates = templates.iter().map(unwrap);
            fns.push(quote! {
                fn templates(self: &#p::Arc<Self>) -> ::std::vec::Vec<#p::TemplateDef> {
                    ::std::vec![#(#templates),*]
                }
            });
        }
        if !prompts.is_empty() {
            fns.push(quote! {
                fn prompts(self: &#p::Arc<Self>) -> ::std::vec::Vec<#p::PromptDef> {
                    ::std::vec![#(#prompts),*]
                }
            });
        }
        quote!(#(#fns)*)
    } else {
        // Still implement the trait, so that the errors above are the only ones.
        TokenStream::new()
    };
    let errors = errors.to_compile_errors();
    quote! {
        #errors
        #imp
        #[allow(clippy::all, clippy::pedantic, clippy::nursery)]
        impl #impl_generics #p::Controller for #self_ty #where_clause {
            #body
        }
    }
}
