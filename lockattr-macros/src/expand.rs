//! Code generation for `#[redis_lock]`.
//!
//! Input (sync):
//! ```text
//! #[redis_lock(name = "order:{id}", expire = 30)]
//! fn pay(id: u64) -> Result<Receipt, AppError> { body }
//! ```
//! Output:
//! ```text
//! fn pay(id: u64) -> Result<Receipt, AppError> {
//!     let __lockattr_acquired = match default_locker() {   // or `let __lockattr_locker: &Locker = <locker>;`
//!         Ok(__lockattr_locker) => {
//!             let __lockattr_name = ::std::format!("order:{id}");
//!             acquire_blocking(__lockattr_locker, &__lockattr_name, Options { expire, wait, renew, renew_for, reentrant, hold_at_least, kind: "order:{id}" })
//!         }
//!         Err(e) => Err(e),
//!     };
//!     let __lockattr_guard = match __lockattr_acquired {   // a `Held`: the guard
//!         Ok(g) => g,
//!         Err(e) => return lock_failed(e, None),   // R: LockResult is required here, and only here
//!     };
//!     let __lockattr_hold = enter_hold(&__lockattr_guard);   // the `hold` span, left before the release
//!     let __lockattr_result = call::<R, _>(move || { body });   // not `{ body }` as the tail: see below
//!     drop(__lockattr_hold);
//!     match release_checked_blocking(__lockattr_guard) {   // `on_lost` not given, or "error"
//!         None => __lockattr_result,
//!         Some(e) => return lock_failed(e, Some(__lockattr_result)),   // a body's own Err is kept
//!     }
//! }
//! ```
//! A lock lost before the body ended is returned as `Err(Lost)` through
//! `lock_failed`, as an acquire error is: no other return type is needed.
//! With `on_lost = "ignore"` the result is returned as it is (the guard's
//! Drop releases on every way out: value, return, ?, panic):
//! ```text
//!     drop(__lockattr_hold);
//!     __lockattr_result
//! ```
//! The body is a closure's, not the function's tail block: there, a
//! one-line body (`{ Ok(id) }`) would be linted as braces around the
//! user's code that are not needed (`unused_braces`), and the fix rustc
//! suggests would not compile. In the closure its `return`s still return
//! the function's value, and `?` converts into the function's error type.
//! With `reentrant = true` (sync functions re-enter only when told to),
//! `acquire_blocking` first looks for the lock among those that sync bodies
//! with `reentrant` hold on this thread: found, the `Held` shares that
//! lease and never releases (a nested call's `expire`, `renew` and
//! `hold_at_least` apply to the lease as on the async path). `enter_hold`
//! then also counts the body inside the lock on this thread, until
//! `__lockattr_hold` is dropped (the same way out as above, before the
//! release); it is not `Send`, so the count is taken back on the thread
//! that added it.
//! Output (async): the same prelude with `acquire(..).await`, then
//! ```text
//!     let __lockattr_result = body(&__lockattr_guard, typed_body::<R, _>(async move { body })).await;
//!     match release_checked(__lockattr_guard).await {   // before the function returns
//!         None => __lockattr_result,
//!         Some(e) => return lock_failed(e, Some(__lockattr_result)),
//!     }
//! ```
//! or, with `on_lost = "ignore"`, `release(__lockattr_guard).await;
//! __lockattr_result`.
//! `body` runs the future in the lock's `hold` span (instrumented, so it is
//! entered at each poll only) and in a task-local scope that records the
//! lock for reentrant nested calls. There `acquire` returns a `Held` too: for a
//! nested call, a guard that shares the outer lease (raised to the nested
//! call's `expire` if less was left) and, with `renew` on a lease the outer
//! call does not renew, that renewal, which stops when the `Held` is
//! released or dropped. `on_lost = "abort"` uses `body_or_lost`, which
//! drops the future when the lock is lost. If the function's future is dropped
//! mid-body, the guard's Drop schedules the release. The user's block is
//! kept whole, so its items and imports stay its own; our locals use
//! mixed-site spans, so the body cannot see them.
//!
//! A semaphore (`permits = N`) or a side of a read-write lock
//! (`mode = "read"` / `"write"`) expands the same, with another acquire
//! call: `acquire_semaphore(locker, name, N, options)`,
//! `acquire_read(locker, name, options)` or `acquire_write(..)` (and their
//! `_blocking` forms); see [`crate::semaphore`] and [`crate::rwmode`].

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::ItemFn;

use crate::attr::OnLost;
use crate::validate::Plan;

pub(crate) fn expand(plan: Plan, item: ItemFn) -> TokenStream {
    let ItemFn {
        attrs,
        vis,
        sig,
        block,
        ..
    } = item;
    let is_async = sig.asyncness.is_some();
    let at = Span::mixed_site();
    let locker_var = quote_spanned!(at=> __lockattr_locker);
    let name_var = quote_spanned!(at=> __lockattr_name);
    let acquired_var = quote_spanned!(at=> __lockattr_acquired);
    let guard_var = quote_spanned!(at=> __lockattr_guard);
    let result_var = quote_spanned!(at=> __lockattr_result);
    let error_var = quote_spanned!(at=> __lockattr_error);
    let hold_var = quote_spanned!(at=> __lockattr_hold);

    let name = &plan.name;
    let expire = match &plan.expire {
        Some(expire) => quote!(::core::option::Option::Some(#expire)),
        None => quote!(::core::option::Option::None),
    };
    let acquire_time = &plan.acquire_time;
    let hold_at_least = match &plan.hold_at_least {
        Some(hold) => quote!(::core::option::Option::Some(#hold)),
        None => quote!(::core::option::Option::None),
    };
    let renew_for = match &plan.renew_for {
        Some(renew_for) => quote!(::core::option::Option::Some(#renew_for)),
        None => quote!(::core::option::Option::None),
    };
    // What the generated code calls: `__private`, or for a set
    // (`name = [..]`) `__private::set`, which offers the same functions for
    // a `LockSetGuard`.
    let runtime = |span: Span| match plan.set {
        true => quote_spanned!(span=> ::lockattr::__private::set),
        false => quote_spanned!(span=> ::lockattr::__private),
    };
    let rt = runtime(Span::call_site());
    let rt_at_return = runtime(plan.return_span);
    let (renew, reentrant, kind) = (plan.renew, plan.reentrant, &plan.kind);
    let options = quote! {
        #rt::Options {
            expire: #expire,
            wait: #acquire_time,
            renew: #renew,
            renew_for: #renew_for,
            reentrant: #reentrant,
            hold_at_least: #hold_at_least,
            kind: #kind,
        }
    };
    // A set (`name = [..]`) passes its `Vec<String>` as it is.
    let name_arg = if plan.set {
        quote!(&#name_var)
    } else {
        quote!(::core::convert::AsRef::<str>::as_ref(&#name_var))
    };
    let acquire = if is_async {
        quote!(#rt::acquire(#locker_var, #name_arg, #options).await)
    } else {
        quote!(#rt::acquire_blocking(#locker_var, #name_arg, #options))
    };
    // `permits` and `mode` never come together (see `crate::rwmode::check`).
    let acquire = match (&plan.permits, plan.mode) {
        (Some(permits), _) => {
            crate::semaphore::acquire(is_async, (&locker_var, &name_var), permits, &options)
        }
        (None, Some(mode)) => {
            crate::rwmode::acquire(is_async, mode, (&locker_var, &name_var), &options)
        }
        (None, None) => acquire,
    };
    // Locker (user's or default), then name, then acquire; every failure
    // ends up in one `Result`, so a wrong return type is reported once.
    let acquired = match &plan.locker {
        Some(expr) => {
            // Typed at the expression, so a wrong type is one error there.
            // `&*STATIC` is a natural way to write it; the annotation would
            // make clippy call the `*` needless.
            let typed = quote_spanned! {syn::spanned::Spanned::span(expr)=>
                #[allow(clippy::explicit_auto_deref)]
                let #locker_var: &#rt::Locker = #expr;
            };
            quote! {
                #typed
                let #name_var = #name;
                let #acquired_var = #acquire;
            }
        }
        None => quote! {
            let #acquired_var = match #rt::default_locker() {
                ::core::result::Result::Ok(#locker_var) => {
                    let #name_var = #name;
                    #acquire
                }
                ::core::result::Result::Err(#error_var) => ::core::result::Result::Err(#error_var),
            };
        },
    };
    // `lock_failed::<R>` infers R from the function's return type; spanned
    // there, so a return type that cannot carry a LockError is reported
    // there. Every call has the same span and types, so rustc reports a
    // wrong return type once however many calls there are.
    let fail = |body: TokenStream| {
        quote_spanned!(plan.return_span=>
            return #rt_at_return::lock_failed(#error_var, #body)
        )
    };
    let fail_no_body = fail(quote!(::core::option::Option::None));
    let bind_guard = plan
        .guard
        .as_ref()
        .map(|user| quote!(let #user: &#rt::LockGuard = #guard_var.guard();));

    let prelude = quote! {
        #acquired
        let #guard_var = match #acquired_var {
            ::core::result::Result::Ok(#guard_var) => #guard_var,
            ::core::result::Result::Err(#error_var) => #fail_no_body,
        };
        #bind_guard
    };
    let output = match &plan.nameable_return {
        Some(ty) => quote!(#ty),
        None => quote!(_),
    };
    let fail_lost = fail(quote!(::core::option::Option::Some(#result_var)));

    // The async body, its output typed by the signature, run in the lock's
    // reentry scope (`body_or_lost` also drops it when the lock is lost).
    let run_body = |runner: TokenStream| {
        quote! {
            let #result_var = #rt::#runner(
                &#guard_var,
                #rt::typed_body::<#output, _>(async move #block),
            ).await;
        }
    };
    let body = match (is_async, plan.on_lost) {
        (true, OnLost::Ignore) => {
            let run = run_body(quote!(body));
            quote! {
                #prelude
                #run
                #[allow(unreachable_code)]
                #rt::release(#guard_var).await;
                #result_var
            }
        }
        (true, OnLost::Abort) => {
            let run = run_body(quote!(body_or_lost));
            quote! {
                #prelude
                #run
                #[allow(unreachable_code)]
                #rt::release(#guard_var).await;
                match #result_var {
                    ::core::result::Result::Ok(#result_var) => #result_var,
                    ::core::result::Result::Err(#error_var) => #fail_no_body,
                }
            }
        }
        (true, OnLost::Error) => {
            let run = run_body(quote!(body));
            quote! {
                #prelude
                #run
                #[allow(unreachable_code)]
                match #rt::release_checked(#guard_var).await {
                    ::core::option::Option::None => #result_var,
                    ::core::option::Option::Some(#error_var) => #fail_lost,
                }
            }
        }
        // The body in a closure, as the user wrote it: spliced in as the
        // function's tail, a one-line block (`{ Ok(id) }`) would be linted
        // as needless braces around the user's code (`unused_braces`). The
        // guard's Drop releases on every way out: value, return, ?, panic;
        // the `hold` span is left first.
        (false, OnLost::Ignore) => quote! {
            #prelude
            let #hold_var = #rt::enter_hold(&#guard_var);
            let #result_var = #rt::call::<#output, _>(move || #block);
            ::core::mem::drop(#hold_var);
            #result_var
        },
        // The body in a closure, so its `return`s come back for the check
        // (`validate` refuses `"abort"` on a sync function).
        (false, OnLost::Error | OnLost::Abort) => quote! {
            #prelude
            let #hold_var = #rt::enter_hold(&#guard_var);
            let #result_var = #rt::call::<#output, _>(move || #block);
            ::core::mem::drop(#hold_var);
            match #rt::release_checked_blocking(#guard_var) {
                ::core::option::Option::None => #result_var,
                ::core::option::Option::Some(#error_var) => #fail_lost,
            }
        },
    };

    // syn keeps the body's inner attributes (`#![allow(..)]`) with the outer
    // ones; they go back at the top of the body, where they still apply to
    // the whole function.
    let (outer, inner): (Vec<_>, Vec<_>) = attrs
        .into_iter()
        .partition(|a| matches!(a.style, syn::AttrStyle::Outer));
    quote! {
        #(#outer)*
        #vis #sig {
            #(#inner)*
            #body
        }
    }
}
