//! What the macros need to know about an annotated function: its receiver, parameters (with
//! their `#[arg]` / `#[args]` attributes, which are stripped here), asyncness, return type and
//! doc comments.

use crate::opts::{self, Opt};
use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{
    Attribute, Expr, ExprLit, FnArg, GenericArgument, Ident, Lit, LitStr, Meta, Pat, PathArguments,
    PathSegment, ReturnType, Signature, Type,
};

/// How the function is reached.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Recv {
    /// A free function: called by name.
    Free,
    /// An associated function without `self`: `Self::f(..)`.
    Assoc,
    /// `&self`.
    Ref,
    /// `self: Arc<Self>`.
    Arc,
    /// `self: &Arc<Self>`.
    RefArc,
}

/// What a parameter is.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `RequestContext` (`by_ref`: `&RequestContext`).
    Ctx { by_ref: bool },
    /// An ordinary value parameter.
    Value,
    /// `#[args] x: T`: the whole argument object.
    Args,
}

/// One parameter (other than `self`).
pub(crate) struct Param {
    /// The binding name (`mut` dropped).
    pub(crate) ident: Ident,
    pub(crate) ty: Type,
    pub(crate) kind: Kind,
    /// `#[arg(description = "...")]`.
    pub(crate) description: Option<LitStr>,
    /// `#[arg(rename = "...")]`.
    pub(crate) rename: Option<LitStr>,
    /// `#[serde(..)]` / `#[schemars(..)]` to put on the generated field.
    pub(crate) forward: Vec<Attribute>,
    /// `name: Type`, for error spans.
    pub(crate) tokens: TokenStream,
}

impl Param {
    /// The name clients use: the rename or the identifier without `r#`.
    pub(crate) fn wire_name(&self) -> String {
        self.rename
            .as_ref()
            .map(LitStr::value)
            .unwrap_or_else(|| self.ident.unraw().to_string())
    }

    /// An error pointing at the parameter.
    pub(crate) fn error(&self, message: impl std::fmt::Display) -> syn::Error {
        syn::Error::new_spanned(&self.tokens, message)
    }

    /// A local variable holding this parameter's value.
    pub(crate) fn local(&self) -> Ident {
        format_ident!("__toolyard_p_{}", self.ident.unraw())
    }
}

/// The return type, as far as syntax tells.
pub(crate) struct Output {
    /// Written as `...Result<..>`.
    pub(crate) is_result: bool,
    /// The success type (`None` for `()`-returning functions or a `Result` without arguments).
    pub(crate) ok: Option<Type>,
    /// Where to point errors about the success type.
    pub(crate) span: Span,
    /// Where to point errors about the error type.
    pub(crate) err_span: Span,
}

/// An analyzed function.
pub(crate) struct FnInfo {
    pub(crate) ident: Ident,
    pub(crate) is_async: bool,
    pub(crate) recv: Recv,
    pub(crate) params: Vec<Param>,
    pub(crate) output: Output,
    /// The doc comments, joined by newlines and trimmed (`None` if empty).
    pub(crate) docs: Option<String>,
}

/// Whether an attribute is one of the parameter attributes the macros own.
fn param_attr_name(attr: &Attribute) -> Option<&'static str> {
    let path = attr.path();
    ["arg", "args", "serde", "schemars"]
        .into_iter()
        .find(|n| path.is_ident(n))
}

/// Removes `#[arg]`, `#[args]`, `#[serde]` and `#[schemars]` from the parameters (so that a
/// function that failed analysis still compiles without "unknown attribute" noise).
pub(crate) fn strip_param_attrs(sig: &mut Signature) {
    for input in &mut sig.inputs {
        if let FnArg::Typed(pt) = input {
            pt.attrs.retain(|a| param_attr_name(a).is_none());
        }
    }
}

impl FnInfo {
    /// Analyzes a signature and strips the parameter attributes from it. `in_impl`: the
    /// function is a method of a controller (else a free function).
    pub(crate) fn analyze(
        sig: &mut Signature,
        attrs: &[Attribute],
        in_impl: bool,
    ) -> syn::Result<FnInfo> {
        let mut errors = opts::Errors::default();
        if !sig.generics.params.is_empty() {
            errors.push(syn::Error::new_spanned(
                &sig.generics,
                "a tool, resource or prompt function cannot be generic",
            ));
        }
        if let Some(w) = &sig.generics.where_clause {
            errors.push(syn::Error::new_spanned(
                w,
                "a tool, resource or prompt function cannot have a `where` clause",
            ));
        }
        if let Some(u) = &sig.unsafety {
            errors.push(syn::Error::new(u.span(), "cannot be `unsafe`"));
        }
        if let Some(a) = &sig.abi {
            errors.push(syn::Error::new_spanned(a, "cannot have an ABI"));
        }
        if let Some(v) = &sig.variadic {
            errors.push(syn::Error::new_spanned(v, "cannot be variadic"));
        }

        let mut recv = if in_impl { Recv::Assoc } else { Recv::Free };
        let mut params = Vec::new();
        for input in &mut sig.inputs {
            match input {
                FnArg::Receiver(r) => {
                    if !in_impl {
                        errors.push(syn::Error::new_spanned(
                            &*r,
                            "a `#[tool]` method must be inside an impl block marked \
                             `#[toolyard::controller]`",
                        ));
                        continue;
                    }
                    match receiver_kind(r) {
                        Ok(k) => recv = k,
                        Err(e) => errors.push(e),
                    }
                }
                FnArg::Typed(pt) => {
                    let taken: Vec<Attribute> = pt
                        .attrs
                        .iter()
                        .filter(|a| param_attr_name(a).is_some())
                        .cloned()
                        .collect();
                    pt.attrs.retain(|a| param_attr_name(a).is_none());
                    if let Some(p) = errors.ok(param(&pt.pat, &pt.ty, &taken)) {
                        params.push(p);
                    }
                }
            }
        }
        let ctx: Vec<&Param> = params
            .iter()
            .filter(|p| matches!(p.kind, Kind::Ctx { .. }))
            .collect();
        if let Some(extra) = ctx.get(1) {
            errors.push(extra.error("only one `RequestContext` parameter is allowed"));
        }
        errors.finish()?;

        Ok(FnInfo {
            ident: sig.ident.clone(),
            is_async: sig.asyncness.is_some(),
            recv,
            params,
            output: output(&sig.output),
            docs: doc_string(attrs),
        })
    }

    /// Whether the handler needs the controller (`__this`).
    pub(crate) fn has_this(&self) -> bool {
        matches!(self.recv, Recv::Ref | Recv::Arc | Recv::RefArc)
    }

    /// Whether a context parameter is taken.
    pub(crate) fn has_ctx(&self) -> bool {
        self.params
            .iter()
            .any(|p| matches!(p.kind, Kind::Ctx { .. }))
    }

    /// The parameters that are not the context.
    pub(crate) fn values(&self) -> impl Iterator<Item = &Param> {
        self.params
            .iter()
            .filter(|p| !matches!(p.kind, Kind::Ctx { .. }))
    }

    /// Outside the handler closure: captures the controller.
    pub(crate) fn capture_this(&self) -> TokenStream {
        if self.has_this() {
            quote! {
                let __toolyard_this = ::toolyard::__private::Arc::clone(self);
            }
        } else {
            TokenStream::new()
        }
    }

    /// Inside the handler closure, before the future: a clone for the future.
    pub(crate) fn clone_this(&self) -> TokenStream {
        if self.has_this() {
            quote! {
                let __toolyard_this = ::toolyard::__private::Arc::clone(&__toolyard_this);
            }
        } else {
            TokenStream::new()
        }
    }

    /// The call, with `.await` when async. `value` gives the expression of each non-context
    /// parameter; the context is `__toolyard_ctx`.
    pub(crate) fn call(&self, mut value: impl FnMut(&Param) -> TokenStream) -> TokenStream {
        let ident = &self.ident;
        let mut args = Vec::new();
        match self.recv {
            Recv::Ref => args.push(quote!(&*__toolyard_this)),
            Recv::Arc => args.push(quote!(__toolyard_this)),
            Recv::RefArc => args.push(quote!(&__toolyard_this)),
            Recv::Free | Recv::Assoc => {}
        }
        for p in &self.params {
            args.push(match p.kind {
                Kind::Ctx { by_ref: false } => quote!(__toolyard_ctx),
                Kind::Ctx { by_ref: true } => quote!(&__toolyard_ctx),
                Kind::Value | Kind::Args => value(p),
            });
        }
        let path = match self.recv {
            Recv::Free => quote!(#ident),
            _ => quote!(Self::#ident),
        };
        if self.is_async {
            quote!(#path(#(#args),*).await)
        } else {
            quote!(#path(#(#args),*))
        }
    }

    /// The pattern of the handler closure's context parameter.
    pub(crate) fn ctx_pat(&self) -> TokenStream {
        if self.has_ctx() {
            quote!(__toolyard_ctx)
        } else {
            quote!(_)
        }
    }

    /// Converts `__toolyard_r` (the call's value) into `Result<Out, HandlerError>`; `convert`
    /// turns an expression of the success value into the output.
    pub(crate) fn convert_output(
        &self,
        convert: impl Fn(TokenStream) -> TokenStream,
    ) -> TokenStream {
        let span = self.output.span;
        let err_span = self.output.err_span;
        let into_err = quote_spanned! {err_span=>
            ::core::convert::Into::<::toolyard::__private::HandlerError>::into
        };
        // The uses carry the return type's spans, so that an unsatisfied bound points there.
        let v = Ident::new("__toolyard_v", span);
        let e = Ident::new("__toolyard_e", err_span);
        if self.output.is_result {
            let ok = convert(quote!(#v));
            quote! {
                match __toolyard_r {
                    ::core::result::Result::Ok(__toolyard_v) => ::core::result::Result::Ok(#ok),
                    ::core::result::Result::Err(__toolyard_e) => {
                        ::core::result::Result::Err(#into_err(#e))
                    }
                }
            }
        } else {
            let r = Ident::new("__toolyard_r", span);
            let ok = convert(quote!(#r));
            quote!(::core::result::Result::Ok(#ok))
        }
    }
}

fn receiver_kind(r: &syn::Receiver) -> syn::Result<Recv> {
    let bad = || {
        syn::Error::new_spanned(
            r,
            "controller methods take `&self` (or `self: Arc<Self>`): the controller is shared",
        )
    };
    match &*r.ty {
        Type::Reference(rf) => {
            if rf.mutability.is_some() {
                return Err(bad());
            }
            if is_self(&rf.elem) {
                Ok(Recv::Ref)
            } else if is_arc_self(&rf.elem) {
                Ok(Recv::RefArc)
            } else {
                Err(bad())
            }
        }
        ty if is_arc_self(ty) => Ok(Recv::Arc),
        _ => Err(bad()),
    }
}

fn is_self(ty: &Type) -> bool {
    matches!(peel(ty), Type::Path(p) if p.qself.is_none() && p.path.is_ident("Self"))
}

fn is_arc_self(ty: &Type) -> bool {
    last_segment(ty)
        .filter(|s| s.ident == "Arc")
        .and_then(|s| type_arg(s, 0))
        .is_some_and(is_self)
}

/// Analyzes one typed parameter.
fn param(pat: &Pat, ty: &Type, attrs: &[Attribute]) -> syn::Result<Param> {
    let ident = match pat {
        Pat::Ident(pi) if pi.by_ref.is_none() && pi.subpat.is_none() => pi.ident.clone(),
        _ => {
            return Err(syn::Error::new_spanned(
                pat,
                "parameters of a tool, resource or prompt must be plain names (`name: Type`)",
            ))
        }
    };
    let mut description = None;
    let mut rename = None;
    let mut is_args = false;
    let mut forward = Vec::new();
    for attr in attrs {
        if attr.path().is_ident("args") {
            if !matches!(attr.meta, Meta::Path(_)) {
                return Err(syn::Error::new_spanned(attr, "`#[args]` takes no options"));
            }
            is_args = true;
        } else if attr.path().is_ident("arg") {
            for opt in opts::of_attr(attr)? {
                match opt.key().map(Ident::to_string).as_deref() {
                    Some("description") => opts::set_once(&mut description, opt.string()?, &opt)?,
                    Some("rename") => opts::set_once(&mut rename, opt.string()?, &opt)?,
                    _ => return Err(opts::unknown(&opt, "`#[arg]`", &["description", "rename"])),
                }
            }
        } else {
            forward.push(attr.clone());
        }
    }
    let kind = match ctx_type(ty) {
        Some(by_ref) => {
            if is_args || description.is_some() || rename.is_some() || !forward.is_empty() {
                return Err(syn::Error::new_spanned(
                    pat,
                    "the `RequestContext` parameter takes no attributes",
                ));
            }
            Kind::Ctx { by_ref }
        }
        None if is_args => {
            if description.is_some() || rename.is_some() || !forward.is_empty() {
                return Err(syn::Error::new_spanned(
                    pat,
                    "an `#[args]` parameter takes no other attributes (describe the fields of \
                     its type instead)",
                ));
            }
            Kind::Args
        }
        None => Kind::Value,
    };
    if kind != (Kind::Ctx { by_ref: true }) {
        if let Type::Reference(r) = peel(ty) {
            return Err(syn::Error::new_spanned(
                r,
                "arguments are deserialized into owned values: use e.g. `String` instead of \
                 `&str`",
            ));
        }
        if let Type::ImplTrait(t) = peel(ty) {
            return Err(syn::Error::new_spanned(
                t,
                "`impl Trait` parameters are not supported",
            ));
        }
    }
    Ok(Param {
        ident,
        ty: ty.clone(),
        kind,
        description,
        rename,
        forward,
        tokens: quote!(#pat: #ty),
    })
}

/// `Some(by_ref)` if the type is `RequestContext` or `&RequestContext` (any path ending so).
fn ctx_type(ty: &Type) -> Option<bool> {
    match peel(ty) {
        Type::Reference(r) if r.mutability.is_none() => last_segment(&r.elem)
            .filter(|s| s.ident == "RequestContext")
            .map(|_| true),
        t => last_segment(t)
            .filter(|s| s.ident == "RequestContext")
            .map(|_| false),
    }
}

/// Strips invisible groups and parentheses.
pub(crate) fn peel(ty: &Type) -> &Type {
    match ty {
        Type::Group(g) => peel(&g.elem),
        Type::Paren(p) => peel(&p.elem),
        t => t,
    }
}

/// The last path segment of a path type.
pub(crate) fn last_segment(ty: &Type) -> Option<&PathSegment> {
    match peel(ty) {
        Type::Path(p) if p.qself.is_none() => p.path.segments.last(),
        _ => None,
    }
}

/// The `n`th type argument of a path segment.
pub(crate) fn type_arg(seg: &PathSegment, n: usize) -> Option<&Type> {
    match &seg.arguments {
        PathArguments::AngleBracketed(a) => a
            .args
            .iter()
            .filter_map(|g| match g {
                GenericArgument::Type(t) => Some(t),
                _ => None,
            })
            .nth(n),
        _ => None,
    }
}

/// Whether the type is (syntactically) `String`.
pub(crate) fn is_string(ty: &Type) -> bool {
    last_segment(ty).is_some_and(|s| s.ident == "String" && s.arguments.is_empty())
}

/// Whether the type is (syntactically) `Option<String>`.
pub(crate) fn is_option_string(ty: &Type) -> bool {
    last_segment(ty)
        .filter(|s| s.ident == "Option")
        .and_then(|s| type_arg(s, 0))
        .is_some_and(is_string)
}

fn output(ret: &ReturnType) -> Output {
    match ret {
        ReturnType::Default => Output {
            is_result: false,
            ok: None,
            span: Span::call_site(),
            err_span: Span::call_site(),
        },
        ReturnType::Type(_, ty) => match last_segment(ty) {
            Some(seg) if seg.ident == "Result" => Output {
                is_result: true,
                ok: type_arg(seg, 0).cloned(),
                span: type_arg(seg, 0).map_or_else(|| ty.span(), Spanned::span),
                err_span: type_arg(seg, 1).map_or_else(|| ty.span(), Spanned::span),
            },
            _ => Output {
                is_result: false,
                ok: Some((**ty).clone()),
                span: ty.span(),
                err_span: ty.span(),
            },
        },
    }
}

/// The doc comments, one line each with the conventional leading space removed, joined by
/// newlines and trimmed.
pub(crate) fn doc_string(attrs: &[Attribute]) -> Option<String> {
    let mut lines = Vec::new();
    for attr in attrs {
        if !attr.path().is_ident("doc") {
            continue;
        }
        if let Meta::NameValue(nv) = &attr.meta {
            if let Expr::Lit(ExprLit {
                lit: Lit::Str(s), ..
            }) = &nv.value
            {
                for line in s.value().split('\n') {
                    lines.push(line.strip_prefix(' ').unwrap_or(line).trim_end().to_owned());
                }
            }
        }
    }
    let text = lines.join("\n");
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_owned())
}

/// Reads one option list, calling `each` on every item.
#[allow(
    clippy::needless_pass_by_value,
    reason = "takes ownership: callers hand the value over and never use it again, so a borrow would only add noise at every call site"
)]
pub(crate) fn each_opt(
    opts: Vec<Opt>,
    mut each: impl FnMut(&Opt) -> syn::Result<()>,
) -> syn::Result<()> {
    let mut errors = opts::Errors::default();
    for opt in &opts {
        if let Err(e) = each(opt) {
            errors.push(e);
        }
    }
    errors.finish()
}

/// `Some(String::from(lit))` or `None`.
pub(crate) fn opt_string(s: Option<&str>) -> TokenStream {
    match s {
        Some(s) => quote!(::core::option::Option::Some(::std::string::String::from(#s))),
        None => quote!(::core::option::Option::None),
    }
}
