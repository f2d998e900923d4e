//! The names `#[derive(LockKey)]` writes: different values name different
//! locks. A field's name has its separator (`:`) and the escape (`\`)
//! escaped, so that the parts can be read back; without `prefix`, the
//! prefix is the type's path, so that types of one name in different
//! modules do not share locks. No Redis is needed: these are the names.

use lockattr::LockKey;

mod billing {
    /// `billing::Account`.
    #[derive(lockattr::LockKey)]
    pub struct Account {
        #[lock_key]
        pub id: u64,
    }
}

mod auth {
    /// `auth::Account`, of the same name as `billing::Account`.
    #[derive(lockattr::LockKey)]
    pub struct Account {
        #[lock_key]
        pub id: u64,
    }
}

#[derive(LockKey)]
#[lock_key(prefix = "doc")]
struct Doc {
    #[lock_key]
    tenant: String,
    #[lock_key]
    id: String,
}

fn doc(tenant: &str, id: &str) -> String {
    Doc {
        tenant: tenant.into(),
        id: id.into(),
    }
    .lock_key()
}

/// Another derived type as a field: its whole name is one part.
#[derive(LockKey)]
#[lock_key(prefix = "page")]
struct Page {
    #[lock_key]
    doc: Doc,
    #[lock_key]
    number: u32,
}

#[derive(LockKey)]
#[lock_key(prefix = "seat")]
struct Seat {
    #[lock_key]
    row: u32,
    #[lock_key]
    number: u32,
}

/// The parts of a name: split at each `:` not escaped, escapes undone.
fn parts(name: &str) -> Vec<String> {
    let mut parts = vec![String::new()];
    let mut chars = name.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                let escaped = chars.next().expect("an escape ends the name");
                assert!(matches!(escaped, '\\' | ':'), "`\\{escaped}` in {name:?}");
                parts.last_mut().unwrap().push(escaped);
            }
            ':' => parts.push(String::new()),
            c => parts.last_mut().unwrap().push(c),
        }
    }
    parts
}

#[test]
fn a_separator_in_a_field_does_not_make_two_values_one_lock() {
    assert_ne!(doc("acme:prod", "7"), doc("acme", "prod:7"));
    assert_eq!(doc("acme:prod", "7"), "doc:acme\\:prod:7");
    assert_eq!(doc("acme", "prod:7"), "doc:acme:prod\\:7");
    // An escape in a value is escaped too, so it cannot fake a separator.
    assert_ne!(doc("a\\", "b"), doc("a\\:b", ""));
    assert_eq!(doc("a\\", "b"), "doc:a\\\\:b");
}

#[test]
fn the_escaping_reads_back_to_the_fields() {
    let values = [
        "",
        ":",
        "::",
        "\\",
        "\\\\",
        "\\:",
        ":\\",
        "a",
        "a:",
        ":a",
        "a\\",
        "a\\:b",
        "acme:prod",
        "prod:7",
        "é:ü",
        "\\x3a",
    ];
    let mut names = std::collections::HashSet::new();
    for tenant in values {
        for id in values {
            let name = doc(tenant, id);
            assert_eq!(parts(&name), ["doc", tenant, id], "{name:?}");
            assert!(names.insert(name), "two values wrote one name");
        }
    }
    // A nested derived type is one part, its own escapes escaped again.
    let page = Page {
        doc: Doc {
            tenant: "acme:prod".into(),
            id: "7".into(),
        },
        number: 3,
    };
    let name = page.lock_key();
    assert_eq!(name, "page:doc\\:acme\\\\\\:prod\\:7:3");
    let outer = parts(&name);
    assert_eq!(outer, ["page", "doc:acme\\:prod:7", "3"]);
    assert_eq!(parts(&outer[1]), ["doc", "acme:prod", "7"]);
}

#[test]
fn names_without_separators_are_as_before() {
    assert_eq!(Seat { row: 5, number: 12 }.lock_key(), "seat:5:12");
    assert_eq!(doc("acme", "7"), "doc:acme:7");
}

#[test]
fn types_of_one_name_in_two_modules_name_different_locks() {
    let billing = billing::Account { id: 1 }.lock_key();
    let auth = auth::Account { id: 1 }.lock_key();
    assert_ne!(billing, auth);
    // Without `prefix`, the prefix is the type's path.
    assert_eq!(billing, "lockkey_names::billing::Account:1");
    assert_eq!(auth, "lockkey_names::auth::Account:1");
}
