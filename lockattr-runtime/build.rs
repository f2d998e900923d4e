//! Joins each Lua script of `src/lua/` with the shared helpers it uses.
//!
//! Redis runs a script's whole body on every call, so each `local function`
//! of the shared files is built anew, as a closure, on every EVALSHA, used
//! or not (about a thousand Lua VM instructions each). Each script gets only
//! the helper functions its body reaches, directly or through other
//! helpers, in the order the shared files define them; the shared files'
//! other top-level declarations (constants, the `refusal` slot) are kept
//! whole. The result, `$OUT_DIR/lua/<script>.lua`, is what
//! `backend::scripts::script!` includes, and what EVALSHA runs.
//!
//! The same files also make one Redis Functions library,
//! `$OUT_DIR/lua/library.lua`, which FCALL runs on Redis 7 and later: every
//! helper is defined once, when the library is loaded, instead of on every
//! call. The library is named `lockattr_v<hash of its text>`, and so are its
//! functions (`lockattr_v<hash>_<script>`), so that two versions of the
//! library (a rolling deploy) coexist on one server without replacing each
//! other's functions.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

/// The shared files, in the order their definitions are joined.
const SHARED: [&str; 4] = [
    "helpers.lua",
    "queue.lua",
    "rw_helpers.lua",
    "sem_helpers.lua",
];

/// The scripts that are only ever sent with EVAL, never in the library
/// (the restart marker, which a Redlock sends once per connection and
/// which switches databases).
const EVAL_ONLY: [&str; 1] = ["marker.lua"];

/// The scripts that never write, registered with the `no-writes` flag: a
/// function without it is refused on a replica and under `maxmemory`, where
/// the same script sent with EVALSHA runs as long as it writes nothing.
const NO_WRITES: [&str; 3] = ["inspect.lua", "rw_inspect.lua", "sem_inspect.lua"];

/// The scripts that only free what a holder held (or hand it to a waiter,
/// as big as what it frees), registered with the `allow-oom` flag: a
/// function without it is refused whole once Redis reached `maxmemory`,
/// where the same script sent with EVALSHA runs its deletions (only the
/// commands that may grow memory are refused), so a lock can still be
/// released.
const ALLOW_OOM: [&str; 8] = [
    "release.lua",
    "release_set.lua",
    "rw_release.lua",
    "sem_give_back.lua",
    "set_give_back.lua",
    "force_unlock.lua",
    "rw_force_unlock.lua",
    "sem_force_release.lua",
];

/// The line of `helpers.lua` that picks how the scripts publish their
/// notices (see `backend::scripts`, `Lua::sharded`).
const PUBLISH: &str = "local publish_command = 'publish'";

/// Where the library's text puts its version (see [`library`]).
const VERSION: &str = "@VERSION@";

/// One top-level part of a shared file, with the comment lines above it.
struct Part {
    /// The function it defines (`local function <name>(`), if any.
    function: Option<String>,
    text: String,
}

fn main() {
    let dir = Path::new("src/lua");
    println!("cargo::rerun-if-changed=src/lua");
    for name in EVAL_ONLY.iter().chain(&NO_WRITES).chain(&ALLOW_OOM) {
        assert!(
            dir.join(name).exists(),
            "src/lua/{name} is listed but missing"
        );
    }
    let mut parts = Vec::new();
    for file in SHARED {
        parts.extend(split(file, &read(&dir.join(file))));
    }
    let out = Path::new(&std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("lua");
    fs::create_dir_all(&out).expect("create $OUT_DIR/lua");
    let mut scripts: Vec<_> = fs::read_dir(dir)
        .expect("read src/lua")
        .map(|entry| entry.expect("read src/lua").path())
        .filter(|path| path.extension().is_some_and(|e| e == "lua"))
        .collect();
    scripts.sort();
    let mut functions = Vec::new();
    for path in scripts {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .expect("a file name");
        if SHARED.contains(&name) {
            continue;
        }
        let body = read(&path);
        let (joined, used) = joined(&parts, &body);
        fs::write(out.join(name), joined).expect("write $OUT_DIR/lua");
        if !EVAL_ONLY.contains(&name) {
            functions.push(Function {
                name: name.trim_end_matches(".lua").to_owned(),
                body,
                publishes: used.contains("announce"),
                flags: if NO_WRITES.contains(&name) {
                    "no-writes"
                } else if ALLOW_OOM.contains(&name) {
                    "allow-oom"
                } else {
                    ""
                },
            });
        }
    }
    fs::write(out.join("library.lua"), library(&parts, &functions))
        .expect("write $OUT_DIR/lua/library.lua");
    // The scripts' bodies as they were before their fast paths, joined with
    // today's helpers the same way: what the runtime's tests compare the
    // scripts with (`lua/tests.rs`, `fast_paths`).
    let before = out.join("before");
    fs::create_dir_all(&before).expect("create $OUT_DIR/lua/before");
    for name in ["acquire.lua", "release.lua"] {
        let (joined, _) = joined(&parts, &read(&dir.join("before").join(name)));
        fs::write(before.join(name), joined).expect("write $OUT_DIR/lua/before");
    }
}

/// `body` after the parts of the shared files it reaches (see
/// [`reached`]), and the names of the functions it reaches.
fn joined(parts: &[Part], body: &str) -> (String, BTreeSet<String>) {
    let used = reached(parts, body);
    let mut joined = String::new();
    for part in parts {
        if part.function.as_ref().is_none_or(|f| used.contains(f)) {
            joined.push_str(&part.text);
        }
    }
    joined.push_str(body);
    (joined, used)
}

/// One script as a function of the library.
struct Function {
    /// The script's file name less `.lua`.
    name: String,
    /// The script's own file.
    body: String,
    /// Whether it publishes notices (it reaches `announce`): it then has a
    /// second function, `<name>_sharded`, which publishes with SPUBLISH.
    publishes: bool,
    /// The flag it is registered with (`no-writes`, `allow-oom`), if any.
    flags: &'static str,
}

/// The Functions library of the scripts `functions`, with every part of
/// the shared files `parts` at its top level.
///
/// A library's top-level locals live as long as the library, shared by
/// every call, whereas a script's are made anew on each EVALSHA. So each
/// function starts by setting back every shared top-level variable that is
/// not a constant (a name in capitals) to what its declaration gives it
/// (the `refusal` slot, the clock read once per call, the count of dropped
/// waiters, a read-write lock's names...): a call then starts from the
/// state a script starts from. `KEYS` and `ARGV`, which a function is given
/// as arguments instead of globals, are top-level locals set the same way,
/// so the helpers and the scripts' bodies read them as they do in a script.
/// The script's own body is the function's body: its locals are the call's.
fn library(parts: &[Part], functions: &[Function]) -> String {
    let mut resets = String::new();
    for part in parts.iter().filter(|part| part.function.is_none()) {
        let line = part.text.trim_end().lines().last().expect("a declaration");
        let declared = line.strip_prefix("local ").expect("a `local` declaration");
        let (names, value) = match declared.split_once('=') {
            Some((names, value)) => (names.trim(), value.trim()),
            None => (declared.trim(), "nil"),
        };
        let constant = names
            .split(',')
            .all(|name| name.trim().chars().all(|c| !c.is_ascii_lowercase()));
        if !constant {
            resets.push_str(&format!("  {names} = {value}\n"));
        }
    }
    assert!(
        resets.contains("  publish_command = 'publish'\n"),
        "src/lua/helpers.lua declares `{PUBLISH}`"
    );
    let mut text = format!(
        "#!lua name=lockattr_v{VERSION}\n\
         -- Made by build.rs from src/lua/*.lua: the shared helpers, defined once\n\
         -- when the library loads, then one function per script.\n\
         local KEYS, ARGV\n"
    );
    for part in parts {
        text.push_str(&part.text);
    }
    text.push_str(&format!(
        "\n-- Starts a call: its keys and arguments, and the shared state as a\n\
         -- script starts with it.\n\
         local function begin(keys, args)\n  KEYS, ARGV = keys, args\n{resets}end\n"
    ));
    for function in functions {
        let flags = if function.flags.is_empty() {
            String::new()
        } else {
            format!(", flags = {{'{}'}}", function.flags)
        };
        let newline = if function.body.ends_with('\n') {
            ""
        } else {
            "\n"
        };
        text.push_str(&format!(
            "\ndo\nlocal body = function()\n{}{newline}end\n",
            function.body
        ));
        let mut register = |suffix: &str, publish: &str| {
            text.push_str(&format!(
                "redis.register_function{{function_name = 'lockattr_v{VERSION}_{}{suffix}', \
                 callback = function(keys, args) begin(keys, args){publish} return body() end{flags}}}\n",
                function.name
            ));
        };
        register("", "");
        if function.publishes {
            register("_sharded", " publish_command = 'spublish'");
        }
        text.push_str("end\n");
    }
    text.replace(VERSION, &version(&text))
}

/// The version of the library text `text` (its FNV-1a hash, in hex): the
/// same text, the same version, in every build.
fn version(text: &str) -> String {
    let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{:012x}", hash >> 16)
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// The top-level parts of a shared file: each `local function` up to its
/// `end` at the start of a line, and each other one-line `local`
/// declaration, with the comment and blank lines above it.
fn split(file: &str, source: &str) -> Vec<Part> {
    let mut parts = Vec::new();
    let mut text = String::new();
    let mut function: Option<String> = None;
    for (number, line) in source.lines().enumerate() {
        text.push_str(line);
        text.push('\n');
        if function.is_some() {
            if line == "end" {
                parts.push(Part {
                    function: function.take(),
                    text: std::mem::take(&mut text),
                });
            }
            continue;
        }
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with("--") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("local function ") {
            let name = rest.split('(').next().unwrap_or_default().trim();
            function = Some(name.to_owned());
        } else if line.starts_with("local ") {
            parts.push(Part {
                function: None,
                text: std::mem::take(&mut text),
            });
        } else {
            panic!(
                "src/lua/{file}:{}: a shared file holds only `local` declarations and `local \
                 function`s ending with `end` at the start of a line",
                number + 1
            );
        }
    }
    assert!(
        function.is_none(),
        "src/lua/{file}: a `local function` without its `end`"
    );
    parts
}

/// The helper functions `body` calls, directly or through other helpers.
fn reached(parts: &[Part], body: &str) -> BTreeSet<String> {
    let mut used = BTreeSet::new();
    let mut todo = vec![body.to_owned()];
    while let Some(text) = todo.pop() {
        let words = words(&text);
        for part in parts {
            if let Some(name) = &part.function
                && words.contains(name.as_str())
                && used.insert(name.clone())
            {
                todo.push(part.text.clone());
            }
        }
    }
    used
}

/// The identifiers of `text`, whole-line comments left out (a name there
/// calls nothing).
fn words(text: &str) -> BTreeSet<&str> {
    text.lines()
        .filter(|line| !line.trim_start().starts_with("--"))
        .flat_map(|line| line.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')))
        .filter(|word| !word.is_empty())
        .collect()
}
