//! Parsing the options of `#[redis_lock(...)]`.
//!
//! Input: `name = "order:{id}", expire = 30, acquire_time = "250ms", locker = &self.locks, guard = g`.
//! Output: [`Parsed`]: the [`Options`], every value a real Rust expression,
//! and all mistakes found in one pass, each at its own token.

use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{Expr, ExprLit, ExprPath, Ident, Lit, LitStr, Token};

use crate::duration::DurationArg;

/// The options this attribute knows, for messages.
pub(crate) const VALID: &str = "name, expire, acquire_time, locker, guard";

/// How the lock is named.
pub(crate) enum NameArg {
    /// A string literal: a format string whose `{captures}` name arguments.
    Format(LitStr),
    /// Any expression whose value implements `LockKey`.
    Expr(Expr),
}

/// The parsed options, before they are checked against the function.
#[derive(Default)]
pub(crate) struct Options {
    pub(crate) name: Option<NameArg>,
    pub(crate) expire: Option<DurationArg>,
    pub(crate) acquire_time: Option<DurationArg>,
    pub(crate) locker: Option<Expr>,
    pub(crate) guard: Option<Ident>,
}

/// `key` or `key = value`.
struct RawOption {
    key: Ident,
    value: Option<Expr>,
}

impl Parse for RawOption {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let key: Ident = input.call(syn::ext::IdentExt::parse_any)?;
        let value = if input.peek(Token![=]) {
            input.parse::<Token![=]>()?;
            Some(input.parse()?)
        } else {
            None
        };
        Ok(RawOption { key, value })
    }
}

/// The options, and every mistake found in them. Mistakes in a value leave
/// that option unset, so the function can still be checked against the rest
/// and all errors reported at once; only a syntax error stops parsing.
pub(crate) struct Parsed {
    pub(crate) options: Options,
    pub(crate) errors: Option<syn::Error>,
}

impl Parse for Parsed {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let raw = Punctuated::<RawOption, Token![,]>::parse_terminated(input)?;
        let mut options = Options::default();
        let mut errors: Option<syn::Error> = None;
        let mut push = |e: syn::Error| match &mut errors {
            Some(all) => all.combine(e),
            None => errors = Some(e),
        };
        for RawOption { key, value } in raw {
            let name = key.to_string();
            let Some(value) = value else {
                push(if VALID.split(", ").any(|v| v == name) {
                    syn::Error::new(
                        key.span(),
                        format!("`{name}` needs a value: `{name} = ...`"),
                    )
                } else {
                    unknown(&key)
                });
                continue;
            };
            let duplicate = match name.as_str() {
                "name" => options.name.replace(name_arg(value)).is_some(),
                "expire" | "acquire_time" => match DurationArg::parse(&name, value) {
                    Ok(d) => {
                        let slot = if name == "expire" {
                            &mut options.expire
                        } else {
                            &mut options.acquire_time
                        };
                        slot.replace(d).is_some()
                    }
                    Err(e) => {
                        push(e);
                        false
                    }
                },
                "locker" => options.locker.replace(value).is_some(),
                "guard" => match guard_ident(value) {
                    Ok(ident) => options.guard.replace(ident).is_some(),
                    Err(e) => {
                        push(e);
                        false
                    }
                },
                _ => {
                    push(unknown(&key));
                    false
                }
            };
            if duplicate {
                push(syn::Error::new(
                    key.span(),
                    format!("`{name}` is given twice"),
                ));
            }
        }
        Ok(Parsed { options, errors })
    }
}

fn unknown(key: &Ident) -> syn::Error {
    syn::Error::new(
        key.span(),
        format!("unknown option `{key}`; #[redis_lock] takes: {VALID}"),
    )
}

fn name_arg(value: Expr) -> NameArg {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) => NameArg::Format(lit),
        other => NameArg::Expr(other),
    }
}

fn guard_ident(value: Expr) -> syn::Result<Ident> {
    if let Expr::Path(ExprPath {
        path, qself: None, ..
    }) = &value
        && let Some(ident) = path.get_ident()
    {
        return Ok(ident.clone());
    }
    Err(syn::Error::new_spanned(
        value,
        "`guard` takes the name of a variable to bind the lock guard to: `guard = g`",
    ))
}
