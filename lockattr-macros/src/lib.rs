//! Procedural macros of [`lockattr`](https://docs.rs/lockattr): `#[redis_lock]`
//! and `#[derive(LockKey)]`. Use them through the `lockattr` crate, whose
//! documentation describes every option; the generated code calls
//! `::lockattr::__private` only.

mod attr;
mod derive;
mod duration;
mod expand;
mod validate;

use proc_macro::TokenStream;
use quote::ToTokens;

/// Takes a Redis lock around the function's body. See the `lockattr` crate.
#[proc_macro_attribute]
pub fn redis_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    let item2 = proc_macro2::TokenStream::from(item.clone());
    let function: syn::ItemFn = match syn::parse(item) {
        Ok(f) => f,
        Err(_) => {
            let e = syn::Error::new(
                proc_macro2::Span::call_site(),
                "#[redis_lock] goes on a function with a body (a free function, or a method in an `impl` block)",
            );
            return with_original(e, item2);
        }
    };
    let options = match syn::parse::<attr::Options>(args) {
        Ok(o) => o,
        Err(e) => return with_original(e, item2),
    };
    match validate::plan(options, &function) {
        Ok(plan) => expand::expand(plan, function).into(),
        Err(e) => with_original(e, function.into_token_stream()),
    }
}

/// Derives `LockKey` from the fields marked `#[lock_key]`. See the `lockattr` crate.
#[proc_macro_derive(LockKey, attributes(lock_key))]
pub fn derive_lock_key(input: TokenStream) -> TokenStream {
    let input = syn::parse_macro_input!(input as syn::DeriveInput);
    derive::expand(input)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// The error, and the function unchanged, so the rest of the crate still
/// type-checks and only the real mistake is reported.
fn with_original(e: syn::Error, original: proc_macro2::TokenStream) -> TokenStream {
    let mut out = e.into_compile_error();
    out.extend(original);
    out.into()
}
