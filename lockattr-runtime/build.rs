//! Joins each Lua script of `src/lua/` with the shared helpers it uses.
//!
//! Redis runs a script's whole body on every call, so each `local function`
//! of the shared files is built anew, as a closure, on every EVALSHA, used
//! or not (about a thousand Lua VM instructions each). Each script gets only
//! the helper functions its body reaches, directly or through other
//! helpers, in the order the shared files define them; the shared files'
//! other top-level declarations (constants, the `refusal` slot) are kept
//! whole. The result, `$OUT_DIR/lua/<script>.lua`, is what
//! `backend::scripts::script!` includes.

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

/// One top-level part of a shared file, with the comment lines above it.
struct Part {
    /// The function it defines (`local function <name>(`), if any.
    function: Option<String>,
    text: String,
}

fn main() {
    let dir = Path::new("src/lua");
    println!("cargo::rerun-if-changed=src/lua");
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
    for path in scripts {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .expect("a file name");
        if SHARED.contains(&name) {
            continue;
        }
        let body = read(&path);
        let used = reached(&parts, &body);
        let mut joined = String::new();
        for part in &parts {
            if part.function.as_ref().is_none_or(|f| used.contains(f)) {
                joined.push_str(&part.text);
            }
        }
        joined.push_str(&body);
        fs::write(out.join(name), joined).expect("write $OUT_DIR/lua");
    }
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
