//! Checking the options against the function they annotate.
//!
//! Input: the parsed [`Options`] and the function. Output: a [`Plan`] the
//! expansion follows without further checks, or every problem found, each
//! spanned at the token to fix.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::visit::Visit;
use syn::{FnArg, Ident, ItemFn, LitStr, Pat, PatIdent, ReturnType, Type};

use crate::attr::{NameArg, OnLost, Options};
use crate::duration::DurationArg;
use crate::rwmode::RwMode;

/// The longest lease accepted, as the runtime's `MAX_EXPIRE` (30 days).
const MAX_EXPIRE_NANOS: u64 = 30 * 24 * 3600 * 1_000_000_000;
/// The longest acquire time accepted, as the runtime's `MAX_ACQUIRE_TIMEOUT`.
const MAX_ACQUIRE_TIME_NANOS: u64 = MAX_EXPIRE_NANOS;
/// A millisecond: Redis keeps leases in whole milliseconds.
const MILLISECOND_NANOS: u64 = 1_000_000;
/// The lease when `expire` is not given, as the runtime's `DEFAULT_EXPIRE`.
const DEFAULT_EXPIRE_NANOS: u64 = 10 * 1_000_000_000;

/// Everything the expansion needs, checked.
pub(crate) struct Plan {
    /// An expression evaluating to the lock's name (`&str` or `String`).
    pub(crate) name: TokenStream,
    /// A `&'static str` expression: the name's template, for metrics.
    pub(crate) kind: TokenStream,
    /// The lease, when the attribute sets one.
    pub(crate) expire: Option<TokenStream>,
    pub(crate) acquire_time: TokenStream,
    /// The minimum hold, when the attribute sets one.
    pub(crate) hold_at_least: Option<TokenStream>,
    /// The cap on renewal, when the attribute sets one (renewal is then on).
    pub(crate) renew_for: Option<TokenStream>,
    pub(crate) locker: Option<syn::Expr>,
    pub(crate) guard: Option<Ident>,
    pub(crate) renew: bool,
    /// Re-enter a lock the caller holds: by default for an async function
    /// (its call chain), only with `reentrant = true` for a sync one (its
    /// thread); never for a read-write hold.
    pub(crate) reentrant: bool,
    /// What a lock lost mid-body does: `Error` unless the attribute says.
    pub(crate) on_lost: OnLost,
    /// Where errors about the return type point.
    pub(crate) return_span: Span,
    /// The declared return type, when it can be written inside the body
    /// (no `impl Trait`).
    pub(crate) nameable_return: Option<Type>,
    /// Several names at once (`name = [..]`): `name` is a `Vec<String>`.
    pub(crate) set: bool,
    /// A semaphore's number of permits (`permits = N`): a `u32` expression.
    pub(crate) permits: Option<TokenStream>,
    /// A side of a read-write lock (`mode = "read"` or `"write"`).
    pub(crate) mode: Option<RwMode>,
}

/// Collects errors so that one pass reports them all.
#[derive(Default)]
struct Errors(Option<syn::Error>);

impl Errors {
    fn push(&mut self, e: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(e),
            None => self.0 = Some(e),
        }
    }
}

pub(crate) fn plan(options: Options, item: &ItemFn) -> syn::Result<Plan> {
    let mut errors = Errors::default();
    let sig = &item.sig;

    if let Some(constness) = &sig.constness {
        errors.push(syn::Error::new(
            constness.span(),
            "#[redis_lock] cannot go on a `const fn`: taking a lock needs Redis at run time",
        ));
    }
    if let Some(variadic) = &sig.variadic {
        errors.push(syn::Error::new(
            variadic.span(),
            "#[redis_lock] does not support variadic functions",
        ));
    }
    let (return_span, nameable_return) = match &sig.output {
        ReturnType::Default => {
            errors.push(syn::Error::new(
                sig.ident.span(),
                format!(
                    "#[redis_lock] needs `{}` to return `Result<T, E>` where `E: From<lockattr::LockError>`: \
                     the lock can fail, and the function must be able to say so",
                    sig.ident
                ),
            ));
            (sig.ident.span(), None)
        }
        ReturnType::Type(_, ty) => {
            let mut finder = ImplTraitFinder(false);
            finder.visit_type(ty);
            (error_type_span(ty), (!finder.0).then(|| (**ty).clone()))
        }
    };

    let expire = options.expire.as_ref();
    if let Some(d) = expire {
        if d.is_zero() {
            let (_, span) = d.nanos().unwrap_or((0, Span::call_site()));
            errors.push(syn::Error::new(
                span,
                "`expire` cannot be zero: the lock would free itself at once",
            ));
        } else if let Some((nanos, span)) = d.nanos()
            && nanos > MAX_EXPIRE_NANOS
        {
            errors.push(syn::Error::new(
                span,
                "`expire` is longer than 30 days; is the unit right?",
            ));
        } else if let Some((nanos, span)) = d.nanos()
            && nanos < MILLISECOND_NANOS
        {
            errors.push(syn::Error::new(
                span,
                "`expire` is shorter than a millisecond: Redis keeps leases in whole milliseconds",
            ));
        }
    }
    if let Some((nanos, span)) = options.acquire_time.as_ref().and_then(DurationArg::nanos)
        && nanos > MAX_ACQUIRE_TIME_NANOS
    {
        errors.push(syn::Error::new(
            span,
            "`acquire_time` is longer than 30 days; is the unit right?",
        ));
    }

    if let Some(hold) = &options.hold_at_least {
        check_hold(hold, expire, &mut errors);
    }

    if let Some(renew_for) = &options.renew_for {
        check_renew_for(renew_for, &mut errors);
        if let Some((false, written)) = &options.renew {
            errors.push(syn::Error::new_spanned(
                written,
                "`renew_for` caps renewal, and `renew = false` turns it off: there is nothing to \
                 cap; drop `renew = false` (`renew_for` turns renewal on) or drop `renew_for`",
            ));
        }
    }

    if let Some((OnLost::Abort, span)) = options.on_lost
        && sig.asyncness.is_none()
    {
        errors.push(syn::Error::new(
            span,
            "`on_lost = \"abort\"` needs an `async fn`: a running synchronous body cannot be stopped \
             from outside; leave `on_lost` out (the loss is returned as an error once the body \
             ends), or check `guard.is_lost()` in the body",
        ));
    }

    if let Some(permits) = &options.permits {
        crate::semaphore::check(permits, options.reentrant.as_ref(), &mut |e| errors.push(e));
    }

    let bindings = argument_bindings(item);
    let set = matches!(options.name, Some(NameArg::Set(_)));
    if set && let Some(hold) = &options.hold_at_least {
        errors.push(crate::set::hold_refused(hold));
    }
    if set && let Some(permits) = &options.permits {
        errors.push(crate::set::permits_refused(permits));
    }
    if let Some(mode) = &options.mode {
        crate::rwmode::check(
            mode,
            options.permits.is_some(),
            set,
            options.reentrant.as_ref(),
            &mut |e| errors.push(e),
        );
    }
    // Input: `name = "order:{order_id}"`. Output: `"order:{order_id}"`; the
    // function's path when the name comes from a value.
    let kind = match &options.name {
        Some(NameArg::Format(lit)) => quote!(#lit),
        Some(NameArg::Set(_)) => TokenStream::new(),
        Some(NameArg::Expr(_)) | None => {
            let ident = &sig.ident;
            quote!(::core::concat!(
                ::core::module_path!(),
                "::",
                ::core::stringify!(#ident)
            ))
        }
    };
    let mut kind = kind;
    let name = match options.name {
        Some(NameArg::Set(array)) => {
            match crate::set::names(&array, |lit| format_name(lit, &bindings, &sig.ident)) {
                Ok((names, set_kind)) => {
                    kind = set_kind;
                    names
                }
                Err(e) => {
                    errors.push(e);
                    TokenStream::new()
                }
            }
        }
        Some(NameArg::Format(lit)) => match format_name(&lit, &bindings, &sig.ident) {
            Ok(tokens) => tokens,
            Err(e) => {
                errors.push(e);
                TokenStream::new()
            }
        },
        Some(NameArg::Expr(expr)) => {
            let span = expr.span();
            quote_spanned!(span=> ::lockattr::__private::key_of(&(#expr)))
        }
        None => match sig.inputs.first() {
            None => {
                let ident = &sig.ident;
                quote!(::core::concat!(
                    ::core::module_path!(),
                    "::",
                    ::core::stringify!(#ident)
                ))
            }
            Some(FnArg::Receiver(receiver)) => {
                let self_token = &receiver.self_token;
                quote_spanned!(self_token.span()=> ::lockattr::__private::key_of(&#self_token))
            }
            Some(FnArg::Typed(arg)) => match &*arg.pat {
                Pat::Ident(PatIdent {
                    ident,
                    subpat: None,
                    ..
                }) => quote_spanned!(arg.span()=> ::lockattr::__private::key_of(&#ident)),
                pat => {
                    errors.push(syn::Error::new(
                        pat.span(),
                        "#[redis_lock] without `name` names the lock after the first argument, \
                         and this one is a pattern; give the lock a name: `#[redis_lock(name = \"...\")]`",
                    ));
                    TokenStream::new()
                }
            },
        },
    };

    match errors.0 {
        Some(e) => Err(e),
        None => Ok(Plan {
            name,
            kind,
            expire: expire.map(|d| DurationArg::to_tokens_or(Some(d), 10)),
            acquire_time: DurationArg::to_tokens_or(options.acquire_time.as_ref(), 10),
            hold_at_least: options
                .hold_at_least
                .as_ref()
                .map(|d| DurationArg::to_tokens_or(Some(d), 0)),
            renew_for: options
                .renew_for
                .as_ref()
                .map(|d| DurationArg::to_tokens_or(Some(d), 0)),
            locker: options.locker,
            guard: options.guard,
            // `renew_for` turns renewal on.
            renew: options
                .renew
                .as_ref()
                .map_or(options.renew_for.is_some(), |(on, _)| *on),
            // Async functions re-enter unless told not to; sync ones only
            // when told to (`reentrant = true`: per thread, see the
            // runtime's `reentry`); a read-write hold never.
            reentrant: options.mode.is_none()
                && options
                    .reentrant
                    .as_ref()
                    .map_or(sig.asyncness.is_some(), |(on, _)| *on),
            on_lost: options.on_lost.map_or(OnLost::Error, |(mode, _)| mode),
            return_span,
            nameable_return,
            set,
            permits: options.permits.map(|p| p.to_tokens()),
            mode: options.mode.map(|m| m.mode),
        }),
    }
}

/// `hold_at_least`: not zero, and no longer than the lease when both are
/// literals (`expire`, or the default lease when it is not given): the lock
/// must be kept that long even when its owner stops without releasing it,
/// and only the lease does that.
fn check_hold(hold: &DurationArg, expire: Option<&DurationArg>, errors: &mut Errors) {
    let Some((nanos, span)) = hold.nanos() else {
        return;
    };
    let message = if nanos == 0 {
        "`hold_at_least` cannot be zero; leave it out to release at once"
    } else if nanos < MILLISECOND_NANOS {
        "`hold_at_least` is shorter than a millisecond: Redis keeps leases in whole milliseconds"
    } else if nanos > MAX_EXPIRE_NANOS {
        "`hold_at_least` is longer than 30 days; is the unit right?"
    } else {
        match expire.map(DurationArg::nanos) {
            None if nanos > DEFAULT_EXPIRE_NANOS => {
                "`hold_at_least` is longer than the lease (10 s when `expire` is not given): the \
                 lock would not be kept that long if its owner stopped without releasing it; \
                 set `expire` to at least the hold"
            }
            Some(Some((expire, _))) if expire != 0 && nanos > expire => {
                "`hold_at_least` is longer than `expire`: the lock would not be kept that long \
                 if its owner stopped without releasing it; raise `expire` to at least the hold"
            }
            _ => return,
        }
    };
    errors.push(syn::Error::new(span, message));
}

/// `renew_for`: not zero, at least a millisecond, at most 30 days, when it
/// is a literal.
fn check_renew_for(renew_for: &DurationArg, errors: &mut Errors) {
    let Some((nanos, span)) = renew_for.nanos() else {
        return;
    };
    let message = if nanos == 0 {
        "`renew_for` cannot be zero: renewal would stop at once; leave it out to renew for as \
         long as the body runs"
    } else if nanos < MILLISECOND_NANOS {
        "`renew_for` is shorter than a millisecond: Redis keeps leases in whole milliseconds"
    } else if nanos > MAX_EXPIRE_NANOS {
        "`renew_for` is longer than 30 days; is the unit right?"
    } else {
        return;
    };
    errors.push(syn::Error::new(span, message));
}

/// Where a return type that cannot carry a `LockError` is reported: at `E`
/// when it is spelled `Result<T, E>` (then `E: From<LockError>` is what is
/// missing), otherwise at the type.
fn error_type_span(ty: &Type) -> Span {
    if let Type::Path(syn::TypePath {
        qself: None, path, ..
    }) = ty
        && let Some(last) = path.segments.last()
        && last.ident == "Result"
        && let syn::PathArguments::AngleBracketed(args) = &last.arguments
        && args.args.len() == 2
        && let Some(syn::GenericArgument::Type(error)) = args.args.last()
    {
        return error.span();
    }
    ty.span()
}

/// Finds `impl Trait` in a type.
struct ImplTraitFinder(bool);

impl Visit<'_> for ImplTraitFinder {
    fn visit_type_impl_trait(&mut self, _: &syn::TypeImplTrait) {
        self.0 = true;
    }
}

/// Every name the arguments bind, `self` included.
fn argument_bindings(item: &ItemFn) -> Vec<Ident> {
    struct Collect(Vec<Ident>);
    impl Visit<'_> for Collect {
        fn visit_pat_ident(&mut self, pat: &PatIdent) {
            self.0.push(pat.ident.clone());
            syn::visit::visit_pat_ident(self, pat);
        }
    }
    let mut collect = Collect(Vec::new());
    for input in &item.sig.inputs {
        match input {
            FnArg::Receiver(r) => collect
                .0
                .push(format_ident!("self", span = r.self_token.span())),
            FnArg::Typed(arg) => collect.visit_pat(&arg.pat),
        }
    }
    collect.0
}

/// The captures of a format-string name, checked against the arguments.
///
/// Input: `"order:{order_id}"`. Output: `::std::format!("order:{order_id}")`,
/// or the literal unchanged (after `{{`/`}}` unescaping) when it captures nothing.
fn format_name(lit: &LitStr, bindings: &[Ident], function: &Ident) -> syn::Result<TokenStream> {
    let text = lit.value();
    let captures = captures(&text).map_err(|msg| syn::Error::new(lit.span(), msg))?;
    if captures.is_empty() {
        let plain = text.replace("{{", "{").replace("}}", "}");
        let plain = LitStr::new(&plain, lit.span());
        return Ok(quote!(#plain));
    }
    let mut errors = Errors::default();
    for capture in &captures {
        if capture == "self" {
            errors.push(syn::Error::new(
                lit.span(),
                "`{self}` cannot be captured by a format string; name the lock with an expression instead: \
                 `name = self` (through `LockKey`) or `name = format!(\"...{}\", self.id)`",
            ));
        } else if !bindings.iter().any(|b| b == capture) {
            let known = bindings
                .iter()
                .map(|b| format!("`{b}`"))
                .collect::<Vec<_>>()
                .join(", ");
            let known = if known.is_empty() {
                format!("`{function}` has no arguments")
            } else {
                format!("its arguments are {known}")
            };
            errors.push(syn::Error::new(
                lit.span(),
                format!(
                    "`{{{capture}}}` in the lock name names no argument of `{function}`; {known}"
                ),
            ));
        }
    }
    match errors.0 {
        Some(e) => Err(e),
        None => Ok(quote_spanned!(lit.span()=> ::std::format!(#lit))),
    }
}

/// The identifiers captured by a format string, or what is wrong with it.
fn captures(text: &str) -> Result<Vec<String>, String> {
    let mut found = Vec::new();
    let mut chars = text.char_indices().peekable();
    while let Some((start, c)) = chars.next() {
        match c {
            '{' if chars.peek().map(|&(_, c)| c) == Some('{') => {
                chars.next();
            }
            '}' if chars.peek().map(|&(_, c)| c) == Some('}') => {
                chars.next();
            }
            '}' => {
                return Err(format!(
                    "unmatched `}}` at byte {start} of the lock name; write `}}}}` for a literal brace"
                ));
            }
            '{' => {
                let rest = &text[start + 1..];
                let Some(len) = rest.find('}') else {
                    return Err(format!(
                        "unmatched `{{` at byte {start} of the lock name; write `{{{{` for a literal brace"
                    ));
                };
                let inner = &rest[..len];
                let arg = inner.split(':').next().unwrap_or("").trim();
                let is_ident = arg
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_alphabetic() || c == '_')
                    && arg.chars().all(|c| c.is_alphanumeric() || c == '_');
                if !is_ident {
                    return Err(format!(
                        "`{{{inner}}}` in the lock name must name an argument, like `{{order_id}}`; \
                         positional `{{}}` and expressions are not supported (use `name = <expression>` for those)"
                    ));
                }
                found.push(arg.to_owned());
                for _ in 0..=inner.chars().count() {
                    chars.next();
                }
            }
            _ => {}
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::{captures, plan};
    use crate::attr::Parsed;

    /// The plan's `reentrant`, or the error's message, for these options
    /// on this function.
    fn reentrant(options: &str, function: &str) -> Result<bool, String> {
        let Parsed { options, errors } = syn::parse_str(options).unwrap();
        assert!(errors.is_none());
        let function = syn::parse_str(function).unwrap();
        plan(options, &function)
            .map(|plan| plan.reentrant)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn async_functions_reenter_unless_told_not_to_and_sync_ones_when_told_to() {
        let sync = "fn f() -> Result<(), E> { Ok(()) }";
        let asynchronous = "async fn f() -> Result<(), E> { Ok(()) }";
        assert_eq!(reentrant("name = \"x\"", sync), Ok(false));
        assert_eq!(
            reentrant("name = \"x\", reentrant = false", sync),
            Ok(false)
        );
        for written in ["reentrant", "reentrant = true"] {
            let options = format!("name = \"x\", {written}");
            assert_eq!(reentrant(&options, sync), Ok(true));
            assert_eq!(reentrant(&options, asynchronous), Ok(true));
            let set = format!("name = [\"x\", \"y\"], {written}");
            assert_eq!(reentrant(&set, sync), Ok(true));
        }
        assert_eq!(reentrant("name = \"x\"", asynchronous), Ok(true));
        assert_eq!(
            reentrant("name = \"x\", reentrant = false", asynchronous),
            Ok(false)
        );
        // Still refused with a semaphore, sync or async.
        for function in [sync, asynchronous] {
            let e = reentrant("name = \"x\", permits = 2, reentrant", function).unwrap_err();
            assert!(e.contains("cannot go with `permits`"), "{e}");
        }
    }

    #[test]
    fn a_read_write_hold_is_planned_without_reentry() {
        use crate::rwmode::RwMode;
        let function: syn::ItemFn =
            syn::parse_str("async fn f(id: u64) -> Result<(), E> { Ok(()) }").unwrap();
        for (options, mode) in [
            ("name = \"x:{id}\", mode = \"read\"", RwMode::Read),
            (
                "mode = \"write\", reentrant = false, hold_at_least = 1",
                RwMode::Write,
            ),
        ] {
            let Parsed { options, errors } = syn::parse_str(options).unwrap();
            assert!(errors.is_none());
            let plan = plan(options, &function).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(plan.mode, Some(mode));
            assert!(!plan.reentrant);
            assert!(plan.permits.is_none());
        }
        let Parsed { options, .. } = syn::parse_str("name = \"x\"").unwrap();
        assert_eq!(
            plan(options, &function)
                .unwrap_or_else(|e| panic!("{e}"))
                .mode,
            None
        );
    }

    #[test]
    fn mode_is_refused_with_a_semaphore_a_set_and_reentry() {
        let function: syn::ItemFn = syn::parse_str("fn f() -> Result<(), E> { Ok(()) }").unwrap();
        for (options, expected) in [
            (
                "name = \"x\", permits = 2, mode = \"read\"",
                "cannot go with `permits`",
            ),
            ("name = [\"a\", \"b\"], mode = \"write\"", "several names"),
            (
                "name = \"x\", mode = \"read\", reentrant",
                "cannot go with `mode`",
            ),
        ] {
            let Parsed { options, errors } = syn::parse_str(options).unwrap();
            assert!(errors.is_none());
            let e = match plan(options, &function) {
                Ok(_) => panic!("{expected}: accepted"),
                Err(e) => e.to_string(),
            };
            assert!(e.contains(expected), "{e}");
        }
    }

    #[test]
    fn a_lost_lock_is_an_error_unless_told_otherwise() {
        use crate::attr::OnLost;
        let on_lost = |options: &str, function: &str| {
            let Parsed { options, errors } = syn::parse_str(options).unwrap();
            assert!(errors.is_none());
            let function: syn::ItemFn = syn::parse_str(function).unwrap();
            plan(options, &function)
                .map(|plan| plan.on_lost)
                .map_err(|e| e.to_string())
        };
        let sync = "fn f() -> Result<(), E> { Ok(()) }";
        let asynchronous = "async fn f() -> Result<(), E> { Ok(()) }";
        for function in [sync, asynchronous] {
            assert_eq!(on_lost("name = \"x\"", function), Ok(OnLost::Error));
            let error = on_lost("name = \"x\", on_lost = \"error\"", function);
            assert_eq!(error, Ok(OnLost::Error));
            let ignore = on_lost("name = \"x\", on_lost = \"ignore\"", function);
            assert_eq!(ignore, Ok(OnLost::Ignore));
        }
        let abort = "name = \"x\", on_lost = \"abort\"";
        assert_eq!(on_lost(abort, asynchronous), Ok(OnLost::Abort));
        let e = on_lost(abort, sync).unwrap_err();
        assert!(e.contains("needs an `async fn`"), "{e}");
    }

    #[test]
    fn finds_captures() {
        assert_eq!(captures("order:{order_id}").unwrap(), ["order_id"]);
        assert_eq!(captures("{a}:{b:>5}").unwrap(), ["a", "b"]);
        assert!(captures("{{literal}}").unwrap().is_empty());
        assert!(captures("{}").is_err());
        assert!(captures("{0}").is_err());
        assert!(captures("a}").is_err());
        assert!(captures("{a").is_err());
        assert!(captures("{a.b}").is_err());
    }
}
