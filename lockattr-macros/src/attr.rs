//! Parsing the options of `#[redis_lock(...)]`.
//!
//! Input: `name = "order:{id}", expire = 30, acquire_time = "250ms", locker = &self.locks, guard = g,
//! renew, on_lost = "ignore", reentrant = false, hold_at_least = "5s", renew_for = "1h",
//! mode = "read"`.
//! Output: [`Parsed`]: the [`Options`], every value a real Rust expression,
//! and all mistakes found in one pass, each at its own token.

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote};
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{Expr, ExprLit, ExprPath, Ident, Lit, LitStr, Token};

use crate::duration::DurationArg;

/// The options this attribute knows, for messages.
pub(crate) const VALID: &str = "name, expire, acquire_time, locker, guard, renew, renew_for, on_lost, reentrant, hold_at_least, permits, mode";

/// The options that stand alone as `true` (`renew` means `renew = true`).
const FLAGS: [&str; 2] = ["renew", "reentrant"];

/// How the lock is named.
pub(crate) enum NameArg {
    /// A string literal: a format string whose `{captures}` name arguments.
    Format(LitStr),
    /// Any expression whose value implements `LockKey`.
    Expr(Expr),
    /// Several names at once: `name = ["account:{from}", "account:{to}"]`
    /// (see [`crate::set`]).
    Set(syn::ExprArray),
}

/// The parsed options, before they are checked against the function.
#[derive(Default)]
pub(crate) struct Options {
    pub(crate) name: Option<NameArg>,
    pub(crate) expire: Option<DurationArg>,
    pub(crate) acquire_time: Option<DurationArg>,
    pub(crate) locker: Option<Expr>,
    pub(crate) guard: Option<Ident>,
    /// The value, and the option as written (`renew = false`), for the
    /// error about `renew_for` with renewal off.
    pub(crate) renew: Option<(bool, TokenStream)>,
    /// The value, and the option as written (`reentrant`, `reentrant = true`),
    /// for errors about where it cannot go.
    pub(crate) reentrant: Option<(bool, TokenStream)>,
    pub(crate) on_lost: Option<(OnLost, Span)>,
    pub(crate) hold_at_least: Option<DurationArg>,
    pub(crate) renew_for: Option<DurationArg>,
    /// `permits = N`: a semaphore of N permits (see `crate::semaphore`).
    pub(crate) permits: Option<crate::semaphore::PermitsArg>,
    /// `mode = "read"` or `"write"`: a side of a read-write lock (see
    /// `crate::rwmode`).
    pub(crate) mode: Option<crate::rwmode::ModeArg>,
}

/// What an annotated function does when its lock is lost mid-body.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum OnLost {
    /// Drop the body's future and return `Err(Lost)` (async only).
    Abort,
    /// Let the body finish, then return `Err(Lost)` instead of an `Ok`:
    /// the default.
    Error,
    /// Let the body finish and return its result: the loss is only a WARN
    /// event and the guard's `is_lost()`.
    Ignore,
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
            if value.is_none() && FLAGS.contains(&name.as_str()) {
                let written = key.to_token_stream();
                let duplicate = if name == "renew" {
                    options.renew.replace((true, written)).is_some()
                } else {
                    options.reentrant.replace((true, written)).is_some()
                };
                if duplicate {
                    push(twice(&key));
                }
                continue;
            }
            let Some(value) = value else {
                push(if name == "on_lost" {
                    syn::Error::new(
                        key.span(),
                        format!("`on_lost` needs a value: {ON_LOST_CHOICES}"),
                    )
                } else if name == "mode" {
                    crate::rwmode::needs_value(&key)
                } else if VALID.split(", ").any(|v| v == name) {
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
                "expire" | "acquire_time" | "hold_at_least" | "renew_for" => {
                    match DurationArg::parse(&name, value) {
                        Ok(d) => {
                            let slot = match name.as_str() {
                                "expire" => &mut options.expire,
                                "acquire_time" => &mut options.acquire_time,
                                "renew_for" => &mut options.renew_for,
                                _ => &mut options.hold_at_least,
                            };
                            slot.replace(d).is_some()
                        }
                        Err(e) => {
                            push(e);
                            false
                        }
                    }
                }
                "locker" => options.locker.replace(value).is_some(),
                "guard" => match guard_ident(value) {
                    Ok(ident) => options.guard.replace(ident).is_some(),
                    Err(e) => {
                        push(e);
                        false
                    }
                },
                "renew" | "reentrant" => match flag(&name, &value) {
                    Ok(on) => {
                        let written = quote!(#key = #value);
                        let slot = if name == "renew" {
                            &mut options.renew
                        } else {
                            &mut options.reentrant
                        };
                        slot.replace((on, written)).is_some()
                    }
                    Err(e) => {
                        push(e);
                        false
                    }
                },
                "permits" => match crate::semaphore::PermitsArg::parse(value) {
                    Ok(permits) => options.permits.replace(permits).is_some(),
                    Err(e) => {
                        push(e);
                        false
                    }
                },
                "mode" => match crate::rwmode::ModeArg::parse(&key, value) {
                    Ok(mode) => options.mode.replace(mode).is_some(),
                    Err(e) => {
                        push(e);
                        false
                    }
                },
                "on_lost" => match on_lost(value) {
                    Ok(mode) => options.on_lost.replace(mode).is_some(),
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
                push(twice(&key));
            }
        }
        Ok(Parsed { options, errors })
    }
}

fn twice(key: &Ident) -> syn::Error {
    syn::Error::new(key.span(), format!("`{key}` is given twice"))
}

/// `renew = true`, `reentrant = false`: a literal `true` or `false`.
fn flag(name: &str, value: &Expr) -> syn::Result<bool> {
    if let Expr::Lit(ExprLit {
        lit: Lit::Bool(b), ..
    }) = value
    {
        return Ok(b.value);
    }
    Err(syn::Error::new_spanned(
        value,
        format!("`{name}` takes `true` or `false`, or stands alone for `true`: `{name}`"),
    ))
}

/// The values of `on_lost`, for messages.
const ON_LOST_CHOICES: &str = "`on_lost = \"error\"` (the default: let the body finish, then return \
                               the loss as an error), `on_lost = \"abort\"` (stop the body at once) or \
                               `on_lost = \"ignore\"` (let it finish and return its result)";

/// `on_lost = "error"`, `"abort"` or `"ignore"`.
fn on_lost(value: Expr) -> syn::Result<(OnLost, Span)> {
    const CHOICES: &str = ON_LOST_CHOICES;
    if let Expr::Path(ExprPath {
        path, qself: None, ..
    }) = &value
        && let Some(ident) = path.get_ident()
        && ["abort", "error", "ignore"].contains(&ident.to_string().as_str())
    {
        return Err(syn::Error::new_spanned(
            ident,
            format!("`on_lost` takes a string: `on_lost = \"{ident}\"`"),
        ));
    }
    match &value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) => match lit.value().as_str() {
            "abort" => Ok((OnLost::Abort, lit.span())),
            "error" => Ok((OnLost::Error, lit.span())),
            "ignore" => Ok((OnLost::Ignore, lit.span())),
            other => Err(syn::Error::new(
                lit.span(),
                format!("unknown `on_lost` value \"{other}\"; use {CHOICES}"),
            )),
        },
        _ => Err(syn::Error::new_spanned(
            value,
            format!("`on_lost` takes a string: {CHOICES}"),
        )),
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
        Expr::Array(array) => NameArg::Set(array),
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
