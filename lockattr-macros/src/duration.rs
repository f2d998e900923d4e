//! Durations in attribute options: checked at compile time when literal.
//!
//! Input: `30`, `0.25`, `"250ms"`, `"1.5s"`, `"2m"`, `Duration::from_secs(n)`.
//! Output: `::core::time::Duration::from_nanos(N)` for literals, the
//! expression itself (which must be a `Duration`) otherwise.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Expr, ExprLit, ExprUnary, Lit, UnOp};

/// A duration option's value.
pub(crate) enum DurationArg {
    /// Known at compile time, in nanoseconds.
    Literal { nanos: u64, span: Span },
    /// A `Duration` expression, evaluated per call.
    Runtime(Expr),
}

const UNITS: &str = "ns, us, ms, s, m, h";

impl DurationArg {
    pub(crate) fn parse(option: &str, expr: Expr) -> syn::Result<DurationArg> {
        let span = expr.span();
        let seconds = |value: f64| -> syn::Result<DurationArg> {
            let nanos = value * 1e9;
            if !nanos.is_finite() || nanos >= u64::MAX as f64 {
                return Err(syn::Error::new(span, format!("`{option}` is too long")));
            }
            Ok(DurationArg::Literal {
                nanos: nanos.round() as u64,
                span,
            })
        };
        match &expr {
            Expr::Lit(ExprLit { lit, .. }) => match lit {
                Lit::Int(int) => {
                    let secs: u64 = int
                        .base10_parse()
                        .map_err(|_| syn::Error::new(span, format!("`{option}` is too long")))?;
                    secs.checked_mul(1_000_000_000)
                        .map(|nanos| DurationArg::Literal { nanos, span })
                        .ok_or_else(|| syn::Error::new(span, format!("`{option}` is too long")))
                }
                Lit::Float(float) => seconds(float.base10_parse::<f64>()?),
                Lit::Str(text) => {
                    let text = text.value();
                    let number_end = text
                        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                        .unwrap_or(text.len());
                    let (number, unit) = text.split_at(number_end);
                    let number: f64 = number.parse().map_err(|_| {
                        syn::Error::new(
                            span,
                            format!(
                                "`{option}` must be a number with a unit, like \"250ms\" or \"1.5s\" (units: {UNITS})"
                            ),
                        )
                    })?;
                    let scale = match unit.trim() {
                        "ns" => 1e-9,
                        "us" | "µs" => 1e-6,
                        "ms" => 1e-3,
                        "s" => 1.0,
                        "m" => 60.0,
                        "h" => 3600.0,
                        "" => {
                            return Err(syn::Error::new(
                                span,
                                format!(
                                    "`{option}` needs a unit, like \"{text}s\" (units: {UNITS})"
                                ),
                            ));
                        }
                        other => {
                            return Err(syn::Error::new(
                                span,
                                format!(
                                    "unknown unit `{other}` in `{option}`; use one of: {UNITS}"
                                ),
                            ));
                        }
                    };
                    seconds(number * scale)
                }
                _ => Err(syn::Error::new(
                    span,
                    format!(
                        "`{option}` takes seconds (`30`, `0.25`), a string with a unit (\"250ms\"), or a `Duration` expression"
                    ),
                )),
            },
            Expr::Unary(ExprUnary {
                op: UnOp::Neg(_), ..
            }) => Err(syn::Error::new(
                span,
                format!("`{option}` cannot be negative"),
            )),
            _ => Ok(DurationArg::Runtime(expr)),
        }
    }

    pub(crate) fn is_zero(&self) -> bool {
        matches!(self, DurationArg::Literal { nanos: 0, .. })
    }

    pub(crate) fn nanos(&self) -> Option<(u64, Span)> {
        match self {
            DurationArg::Literal { nanos, span } => Some((*nanos, *span)),
            DurationArg::Runtime(_) => None,
        }
    }

    pub(crate) fn to_tokens_or(this: Option<&DurationArg>, default_secs: u64) -> TokenStream {
        match this {
            None => quote!(::core::time::Duration::from_secs(#default_secs)),
            Some(DurationArg::Literal { nanos, span }) => {
                quote_spanned!(*span=> ::core::time::Duration::from_nanos(#nanos))
            }
            Some(DurationArg::Runtime(expr)) => {
                let span = expr.span();
                let var = quote_spanned!(Span::mixed_site()=> __lockattr_duration);
                quote_spanned!(span=> {
                    let #var: ::core::time::Duration = #expr;
                    #var
                })
            }
        }
    }
}
