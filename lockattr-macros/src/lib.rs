//! Procedural macros of [`lockattr`](https://docs.rs/lockattr): `#[redis_lock]`
//! and `#[derive(LockKey)]`. Use them through the `lockattr` crate, whose
//! documentation describes every option; the generated code calls
//! `::lockattr::__private` only.
#![forbid(unsafe_code)]

mod attr;
mod derive;
mod duration;
mod expand;
mod rwmode;
mod semaphore;
mod set;
mod validate;

use proc_macro::TokenStream;
use quote::ToTokens;

/// The code it generates names `::lockattr`: use the attribute through the `lockattr` crate.
#[proc_macro_attribute]
pub fn redis_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    let item2 = proc_macro2::TokenStream::from(item.clone());
    let function: syn::ItemFn = match syn::parse(item) {
        Ok(f) => f,
        Err(_) => return with_original(not_a_function(item2.clone()), item2),
    };
    let attr::Parsed { options, errors } = match syn::parse::<attr::Parsed>(args) {
        Ok(parsed) => parsed,
        Err(e) => return with_original(e, item2),
    };
    // Mistakes in the options and in how they fit the function, all at once.
    match (errors, validate::plan(options, &function)) {
        (None, Ok(plan)) => expand::expand(plan, function).into(),
        (Some(e), Ok(_)) | (None, Err(e)) => with_original(e, quiet(function)),
        (Some(mut e), Err(more)) => {
            e.combine(more);
            with_original(e, quiet(function))
        }
    }
}

/// The error for an item that is not a function with a body, at the token
/// that says what it is instead.
fn not_a_function(item: proc_macro2::TokenStream) -> syn::Error {
    use syn::spanned::Spanned;
    if let Ok(method) = syn::parse2::<syn::TraitItemFn>(item.clone())
        && method.default.is_none()
    {
        let span = method
            .semi_token
            .map_or_else(|| method.sig.ident.span(), |semi| semi.span);
        return syn::Error::new(
            span,
            format!(
                "#[redis_lock] needs a body to wrap, and this declaration of `{}` has none; \
                 put the attribute on the method in each `impl` of the trait instead",
                method.sig.ident
            ),
        );
    }
    let (what, span) = match syn::parse2::<syn::Item>(item) {
        Ok(syn::Item::Struct(i)) => ("a struct", i.struct_token.span),
        Ok(syn::Item::Enum(i)) => ("an enum", i.enum_token.span),
        Ok(syn::Item::Union(i)) => ("a union", i.union_token.span),
        Ok(syn::Item::Trait(i)) => ("a trait", i.trait_token.span),
        Ok(syn::Item::TraitAlias(i)) => ("a trait alias", i.trait_token.span),
        Ok(syn::Item::Impl(i)) => ("an `impl` block", i.impl_token.span),
        Ok(syn::Item::Mod(i)) => ("a module", i.mod_token.span),
        Ok(syn::Item::Const(i)) => ("a constant", i.const_token.span),
        Ok(syn::Item::Static(i)) => ("a static", i.static_token.span),
        Ok(syn::Item::Type(i)) => ("a type alias", i.type_token.span),
        Ok(syn::Item::Use(i)) => ("a `use` declaration", i.use_token.span),
        Ok(syn::Item::ExternCrate(i)) => ("an `extern crate`", i.extern_token.span),
        Ok(syn::Item::ForeignMod(i)) => ("an `extern` block", i.abi.extern_token.span),
        Ok(syn::Item::Macro(i)) => ("a macro invocation", i.mac.path.span()),
        _ => ("this item", proc_macro2::Span::call_site()),
    };
    syn::Error::new(
        span,
        format!(
            "#[redis_lock] goes on a function with a body (a free function, or a method in an `impl` block), \
             not on {what}"
        ),
    )
}

/// Derives `LockKey` from the fields marked `#[lock_key]`. See the `lockattr` crate.
#[proc_macro_derive(LockKey, attributes(lock_key))]
pub fn derive_lock_key(input: TokenStream) -> TokenStream {
    let input = syn::parse_macro_input!(input as syn::DeriveInput);
    derive::expand(input)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// The function as written, for when the attribute is refused: arguments
/// only used in the lock name would look unused, and rustc would suggest
/// renaming them (which would break the name once the real mistake is fixed).
fn quiet(mut function: syn::ItemFn) -> proc_macro2::TokenStream {
    function
        .attrs
        .push(syn::parse_quote!(#[allow(unused_variables)]));
    function.into_token_stream()
}

/// The error, and the function unchanged, so the rest of the crate still
/// type-checks and only the real mistake is reported.
fn with_original(e: syn::Error, original: proc_macro2::TokenStream) -> TokenStream {
    let mut out = e.into_compile_error();
    out.extend(original);
    out.into()
}
