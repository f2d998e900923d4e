//! `permits = N`: the function takes one of the N permits of a semaphore
//! named by `name` instead of a lock.
//!
//! Input: `#[redis_lock(name = "gpu", permits = 4)]`. Output: the same
//! expansion as a lock's, with `acquire_semaphore(locker, name, 4, options)`
//! (or `acquire_semaphore_blocking`) in place of `acquire`.
//!
//! A literal is checked here (1 to 256, the runtime's `MAX_PERMITS`); any
//! other expression must be a `u32` (a `const`, a field) and is checked at
//! run time. `reentrant` is refused with `permits`: a semaphore is never
//! re-entered (a nested call takes a permit of its own).

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Expr, ExprLit, ExprUnary, Lit, UnOp};

/// The runtime's `MAX_PERMITS`.
const MAX_PERMITS: u64 = 256;

const TAKES: &str = "`permits` takes a whole number of permits from 1 to 256 (`permits = 4`), \
                     or a `u32` constant";

/// The value of `permits = ...`.
pub(crate) enum PermitsArg {
    /// A checked literal.
    Literal(u32, Span),
    /// Any other expression: a `u32`, checked at run time.
    Expr(Expr),
}

impl PermitsArg {
    pub(crate) fn parse(value: Expr) -> syn::Result<PermitsArg> {
        match &value {
            Expr::Lit(ExprLit {
                lit: Lit::Int(int), ..
            }) => {
                let n: u64 = int
                    .base10_parse()
                    .map_err(|_| syn::Error::new(int.span(), TAKES))?;
                if n == 0 {
                    return Err(syn::Error::new(
                        int.span(),
                        "`permits = 0`: a semaphore of no permits could never be taken; use at \
                         least 1",
                    ));
                }
                if n > MAX_PERMITS {
                    return Err(syn::Error::new(
                        int.span(),
                        format!(
                            "`permits = {n}` is more than {MAX_PERMITS}, the most a semaphore may \
                             have; split the work over several names"
                        ),
                    ));
                }
                Ok(PermitsArg::Literal(
                    u32::try_from(n).unwrap_or(u32::MAX),
                    int.span(),
                ))
            }
            Expr::Unary(ExprUnary {
                op: UnOp::Neg(_), ..
            }) => Err(syn::Error::new_spanned(
                &value,
                format!("a negative number of permits; {TAKES}"),
            )),
            Expr::Lit(_) => Err(syn::Error::new_spanned(&value, TAKES)),
            _ => Ok(PermitsArg::Expr(value)),
        }
    }

    /// A `u32` expression.
    pub(crate) fn to_tokens(&self) -> TokenStream {
        match self {
            PermitsArg::Literal(n, span) => {
                let mut lit = proc_macro2::Literal::u32_suffixed(*n);
                lit.set_span(*span);
                lit.into_token_stream()
            }
            PermitsArg::Expr(expr) => {
                quote_spanned!(expr.span()=> { let permits: u32 = #expr; permits })
            }
        }
    }
}

/// Refuses what does not go with `permits`: `reentrant` (on).
pub(crate) fn check(
    _permits: &PermitsArg,
    reentrant: Option<&(bool, TokenStream)>,
    push: &mut dyn FnMut(syn::Error),
) {
    if let Some((true, written)) = reentrant {
        push(syn::Error::new_spanned(
            written,
            "`reentrant` cannot go with `permits`: a semaphore is never re-entered (a nested call \
             takes a permit of its own); remove `reentrant`",
        ));
    }
}

/// The call that takes a permit.
pub(crate) fn acquire(
    is_async: bool,
    (locker, name): (&TokenStream, &TokenStream),
    permits: &TokenStream,
    options: &TokenStream,
) -> TokenStream {
    let name = quote!(::core::convert::AsRef::<str>::as_ref(&#name));
    if is_async {
        quote!(::lockattr::__private::acquire_semaphore(#locker, #name, #permits, #options).await)
    } else {
        quote!(::lockattr::__private::acquire_semaphore_blocking(#locker, #name, #permits, #options))
    }
}
