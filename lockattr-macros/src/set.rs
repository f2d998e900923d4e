//! `#[redis_lock(name = ["account:{from}", "account:{to}"])]`: several
//! names at once.
//!
//! Input: the array, each element a name as `name = ...` takes one (a
//! format string capturing arguments, or an expression implementing
//! `LockKey`). Output: an expression evaluating to a `Vec<String>` of the
//! names, the `&'static str` kind of the set for metrics
//! (`"[account:{from}, account:{to}]"`), and every mistake at its token: an
//! empty array, a capture naming no argument, a literal given twice, a set
//! inside the set, `hold_at_least` (not supported on a set).
//!
//! The expansion is the single lock's ([`crate::expand`]), calling
//! `::lockattr::__private::set` instead of `::lockattr::__private`: that
//! module offers the same functions for a `LockSetGuard`. The user's body
//! is never rewritten.

use proc_macro2::TokenStream;
use quote::{ToTokens, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Expr, ExprArray, ExprLit, Lit, LitStr};

use crate::duration::DurationArg;

/// The names of the set and its kind, or every mistake in them. `format`
/// checks one format-string element against the function's arguments.
pub(crate) fn names(
    array: &ExprArray,
    format: impl Fn(&LitStr) -> syn::Result<TokenStream>,
) -> syn::Result<(TokenStream, TokenStream)> {
    let mut errors: Option<syn::Error> = None;
    let mut push = |e: syn::Error| match &mut errors {
        Some(all) => all.combine(e),
        None => errors = Some(e),
    };
    if array.elems.is_empty() {
        push(syn::Error::new(
            array.span(),
            "`name = []` names no lock; give the set at least one name: \
             `name = [\"account:{from}\", \"account:{to}\"]`",
        ));
    }
    let mut seen: Vec<String> = Vec::new();
    let mut names = Vec::new();
    let mut templates = Vec::new();
    for elem in &array.elems {
        match elem {
            Expr::Lit(ExprLit {
                lit: Lit::Str(lit), ..
            }) => {
                let text = lit.value();
                if seen.contains(&text) {
                    push(syn::Error::new(
                        lit.span(),
                        format!(
                            "\"{text}\" is given twice in the set of names; each name is \
                             locked once, so drop the repeat"
                        ),
                    ));
                    continue;
                }
                seen.push(text.clone());
                templates.push(text);
                match format(lit) {
                    Ok(tokens) => names.push(
                        quote_spanned!(lit.span()=> ::lockattr::__private::set::name_of(#tokens)),
                    ),
                    Err(e) => push(e),
                }
            }
            Expr::Array(inner) => push(syn::Error::new(
                inner.span(),
                "a name in the set cannot itself be a set; list every name in one array",
            )),
            expr => {
                templates.push(expr.to_token_stream().to_string());
                let span = expr.span();
                names.push(quote_spanned!(span=> ::lockattr::__private::set::key_of(&(#expr))));
            }
        }
    }
    if let Some(e) = errors {
        return Err(e);
    }
    let kind = LitStr::new(&format!("[{}]", templates.join(", ")), array.span());
    Ok((quote!(::std::vec![#(#names),*]), quote!(#kind)))
}

/// The error for `hold_at_least` on a set, at its value.
pub(crate) fn hold_refused(hold: &DurationArg) -> syn::Error {
    let span = match hold {
        DurationArg::Literal { span, .. } => *span,
        DurationArg::Runtime(expr) => expr.span(),
    };
    syn::Error::new(
        span,
        "`hold_at_least` is not supported with several names (`name = [..]`); lock the set \
         without it, or use one name",
    )
}

/// The error for `permits` with several names, at its value: a set of
/// semaphores is not supported.
pub(crate) fn permits_refused(permits: &crate::semaphore::PermitsArg) -> syn::Error {
    let span = match permits {
        crate::semaphore::PermitsArg::Literal(_, span) => *span,
        crate::semaphore::PermitsArg::Expr(expr) => expr.span(),
    };
    syn::Error::new(
        span,
        "`permits` is not supported with several names (`name = [..]`); take a semaphore on one \
         name, or lock the set without `permits`",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_names_every_element() {
        let array: ExprArray = syn::parse_quote!(["a:{x}", key(y), "b"]);
        let (names, kind) = names(&array, |lit| Ok(quote!(#lit))).unwrap();
        let names = names.to_string();
        assert!(names.contains("key_of"), "{names}");
        assert_eq!(kind.to_string(), "\"[a:{x}, key (y), b]\"");
    }

    #[test]
    fn mistakes_in_a_set_are_refused() {
        let empty: ExprArray = syn::parse_quote!([]);
        assert!(names(&empty, |lit| Ok(quote!(#lit))).is_err());
        let twice: ExprArray = syn::parse_quote!(["a", "a"]);
        let e = names(&twice, |lit| Ok(quote!(#lit))).unwrap_err();
        assert!(e.to_string().contains("twice"));
        let nested: ExprArray = syn::parse_quote!([["a"]]);
        assert!(names(&nested, |lit| Ok(quote!(#lit))).is_err());
    }
}
