//! `#[derive(LockKey)]`.
//!
//! Input:
//! ```text
//! #[derive(LockKey)]
//! #[lock_key(prefix = "seat")]
//! struct Seat { #[lock_key] row: u32, #[lock_key] number: u32, owner: String }
//! ```
//! Output: `impl LockKey for Seat` writing `seat:<row>:<number>`, each
//! field's name escaped (`\\` for `\`, `\:` for `:`), so that different
//! field values never write the same name. Without `prefix`, the prefix is
//! the type's path, `module_path!()` and the type's name joined by `::`
//! (`shop::billing::Account`), so that two types of one name in different
//! modules name different locks.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Data, DeriveInput, Index, LitStr, Member};

pub(crate) fn expand(input: DeriveInput) -> syn::Result<TokenStream> {
    let mut prefix = None;
    for attr in input.attrs.iter().filter(|a| a.path().is_ident("lock_key")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("prefix") {
                if prefix.is_some() {
                    return Err(meta.error("`prefix` is given twice"));
                }
                let lit: LitStr = meta.value()?.parse()?;
                prefix = Some(lit);
                Ok(())
            } else {
                Err(meta.error("unknown option; #[lock_key(...)] on a type takes: prefix"))
            }
        })?;
    }
    let ident = &input.ident;
    let prefix = match prefix {
        Some(lit) => quote!(#lit),
        None => quote!(::core::concat!(
            ::core::module_path!(),
            "::",
            ::core::stringify!(#ident)
        )),
    };

    let fields = match &input.data {
        Data::Struct(data) => &data.fields,
        Data::Enum(data) => {
            return Err(syn::Error::new(
                data.enum_token.span(),
                "#[derive(LockKey)] supports structs; for an enum, implement `LockKey` by hand",
            ));
        }
        Data::Union(data) => {
            return Err(syn::Error::new(
                data.union_token.span(),
                "#[derive(LockKey)] supports structs, not unions",
            ));
        }
    };

    let mut keys = Vec::new();
    for (i, field) in fields.iter().enumerate() {
        let mut marked = false;
        for attr in field.attrs.iter().filter(|a| a.path().is_ident("lock_key")) {
            if !matches!(attr.meta, syn::Meta::Path(_)) {
                return Err(syn::Error::new_spanned(
                    attr,
                    "`#[lock_key]` on a field takes no options",
                ));
            }
            marked = true;
        }
        if marked {
            let member = match &field.ident {
                Some(ident) => Member::Named(ident.clone()),
                None => Member::Unnamed(Index::from(i)),
            };
            keys.push((member, field.ty.clone()));
        }
    }
    if keys.is_empty() {
        return Err(syn::Error::new(
            input.ident.span(),
            "#[derive(LockKey)] needs `#[lock_key]` on at least one field: the fields that identify the value",
        ));
    }

    let mut generics = input.generics.clone();
    {
        let where_clause = generics.make_where_clause();
        for (_, ty) in &keys {
            where_clause
                .predicates
                .push(syn::parse_quote!(#ty: ::lockattr::__private::LockKey));
        }
    }
    let (impl_generics, ty_generics, where_clause) = generics.split_for_impl();
    let writes = keys.iter().map(|(member, ty)| {
        quote_spanned! {ty.span()=>
            out.push(':');
            ::lockattr::__private::write_key_part(&self.#member, out);
        }
    });
    Ok(quote! {
        impl #impl_generics ::lockattr::__private::LockKey for #ident #ty_generics #where_clause {
            fn write_key(&self, out: &mut ::std::string::String) {
                out.push_str(#prefix);
                #(#writes)*
            }
        }
    })
}
