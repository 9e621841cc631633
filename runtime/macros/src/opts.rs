//! The option lists of `#[tool(...)]`, `#[resource(...)]`, `#[prompt(...)]` and
//! `#[arg(...)]`: a comma list of `"positional"`, `flag` and `key = literal` items.

use proc_macro2::TokenStream;
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream, Parser};
use syn::punctuated::Punctuated;
use syn::{Attribute, Ident, Lit, LitStr, Meta, Token};

/// One item of an option list.
pub(crate) enum Opt {
    /// `"text"`
    Positional(LitStr),
    /// `key`
    Flag(Ident),
    /// `key = literal`
    Pair(Ident, Lit),
}

impl Parse for Opt {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        if input.peek(LitStr) {
            return Ok(Opt::Positional(input.parse()?));
        }
        if !input.peek(Ident::peek_any) {
            return Err(input.error("expected an option: `key`, `key = \"value\"` or `key = true`"));
        }
        let key = input.call(Ident::parse_any)?;
        if input.peek(Token![=]) {
            input.parse::<Token![=]>()?;
            if !input.peek(Lit) {
                return Err(input.error(format!(
                    "expected a literal after `{key} =` (a string or `true`/`false`)"
                )));
            }
            Ok(Opt::Pair(key, input.parse()?))
        } else {
            Ok(Opt::Flag(key))
        }
    }
}

impl Opt {
    /// The key, unless positional.
    pub(crate) fn key(&self) -> Option<&Ident> {
        match self {
            Opt::Positional(_) => None,
            Opt::Flag(k) | Opt::Pair(k, _) => Some(k),
        }
    }

    /// An error pointing at the whole item.
    pub(crate) fn error(&self, message: impl std::fmt::Display) -> syn::Error {
        match self {
            Opt::Positional(l) => syn::Error::new_spanned(l, message),
            Opt::Flag(k) => syn::Error::new_spanned(k, message),
            Opt::Pair(k, v) => syn::Error::new_spanned(quote::quote!(#k = #v), message),
        }
    }

    /// The string value of `key = "..."`.
    pub(crate) fn string(&self) -> syn::Result<LitStr> {
        match self {
            Opt::Positional(l) | Opt::Pair(_, Lit::Str(l)) => Ok(l.clone()),
            Opt::Flag(k) => Err(syn::Error::new(
                k.span(),
                format!("`{k}` needs a value: `{k} = \"...\"`"),
            )),
            Opt::Pair(k, v) => Err(syn::Error::new(
                v.span(),
                format!("`{k}` takes a string literal"),
            )),
        }
    }

    /// The value of a flag: `key` is `true`, or `key = true` / `key = false`.
    pub(crate) fn flag(&self) -> syn::Result<bool> {
        match self {
            Opt::Flag(_) => Ok(true),
            Opt::Pair(_, Lit::Bool(b)) => Ok(b.value),
            Opt::Pair(k, v) => Err(syn::Error::new(
                v.span(),
                format!("`{k}` takes `true` or `false` (or just `{k}`)"),
            )),
            Opt::Positional(l) => Err(syn::Error::new(l.span(), "unexpected string")),
        }
    }
}

/// Parses an option list.
pub(crate) fn parse(tokens: TokenStream) -> syn::Result<Vec<Opt>> {
    let parser = Punctuated::<Opt, Token![,]>::parse_terminated;
    Ok(parser.parse2(tokens)?.into_iter().collect())
}

/// The option list of an attribute: `#[name]` (none) or `#[name(...)]`.
pub(crate) fn of_attr(attr: &Attribute) -> syn::Result<Vec<Opt>> {
    match &attr.meta {
        Meta::Path(_) => Ok(Vec::new()),
        Meta::List(list) => parse(list.tokens.clone()),
        Meta::NameValue(nv) => Err(syn::Error::new_spanned(
            nv,
            "expected a parenthesized option list: `#[name(key = \"value\", ...)]`",
        )),
    }
}

/// Stores an option, rejecting a repeated key.
pub(crate) fn set_once<T>(slot: &mut Option<T>, value: T, opt: &Opt) -> syn::Result<()> {
    if slot.is_some() {
        let what = opt
            .key()
            .map(|k| format!("`{k}` is given twice"))
            .unwrap_or_else(|| "the positional value is given twice".to_owned());
        return Err(opt.error(what));
    }
    *slot = Some(value);
    Ok(())
}

/// The error for an unknown key.
pub(crate) fn unknown(opt: &Opt, what: &str, known: &[&str]) -> syn::Error {
    let list = known
        .iter()
        .map(|k| format!("`{k}`"))
        .collect::<Vec<_>>()
        .join(", ");
    match opt.key() {
        Some(k) => syn::Error::new(
            k.span(),
            format!("unknown {what} option `{k}`; expected one of {list}"),
        ),
        None => opt.error(format!(
            "unexpected string in {what} options; expected one of {list}"
        )),
    }
}

/// Collects several errors into one.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    /// Records an error.
    pub(crate) fn push(&mut self, e: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(e),
            None => self.0 = Some(e),
        }
    }

    /// Records the error of a result and returns its value.
    pub(crate) fn ok<T>(&mut self, r: syn::Result<T>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                self.push(e);
                None
            }
        }
    }

    /// `compile_error!`s for everything recorded.
    pub(crate) fn to_compile_errors(&self) -> TokenStream {
        self.0
            .as_ref()
            .map(syn::Error::to_compile_error)
            .unwrap_or_default()
    }

    /// Whether nothing was recorded.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// The recorded errors as a result.
    pub(crate) fn finish(self) -> syn::Result<()> {
        match self.0 {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}
