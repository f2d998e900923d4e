//! The benchmark table of `docs/performance.md`, rendered from a results
//! JSON between its markers; never typed by hand.

use std::path::Path;

use crate::Res;
use crate::report::fmt_num;
use crate::targets;

/// Where the generated table starts and ends in `docs/performance.md`.
const TABLE_START: &str = "<!-- bench-table:start -->";
const TABLE_END: &str = "<!-- bench-table:end -->";

/// The table of `docs/performance.md`, from a results JSON: the run's
/// circumstances, then the rows marked for it (`"readme": true`).
/// `source` names the JSON in the table's first line.
fn results_table(v: &serde_json::Value, source: &str) -> Res<String> {
    use serde_json::Value;
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => "?".to_owned(),
        other => other.to_string(),
    };
    let num = |v: &Value, decimals: usize| v.as_f64().map_or("?".into(), |x| fmt_num(x, decimals));
    let cell = |v: &Value| text(v).replace('|', "\\|");
    let head = v["code"]["git_head"].as_str().unwrap_or("?");
    let dirty = match v["code"]["worktree_dirty"].as_bool() {
        Some(true) => " (with uncommitted changes)",
        Some(false) => "",
        None => " (dirty flag unknown)",
    };
    let mut out = String::new();
    out.push_str(&format!(
        "<!-- generated from {source} by `cargo bench --bench lockattr -- --readme`; do not edit by hand -->\n",
    ));
    out.push_str(&format!(
        "Run of commit `{}`{dirty}{}: redis-server {}, {} cores ({}), RTT {} µs \
         (median raw PING, the unit of every RTT figure but rows 10, 13 and 14's, which use the PING of their own loop; row 14's goes through its delay proxy), load average {} at start and {} at end.\n\n",
        &head[..head.len().min(12)],
        if v["quick"].as_bool() == Some(true) {
            ", QUICK RUN"
        } else {
            ""
        },
        text(&v["machine"]["redis_server_version"]),
        num(&v["machine"]["cores"], 0),
        text(&v["machine"]["cpu"]),
        num(&v["rtt"]["raw_ping_median_us"], 1),
        num(&v["load_average_1min"]["start"], 2),
        num(&v["load_average_1min"]["end"], 2),
    ));
    out.push_str("| row | figure | lockattr | rslock 0.10 | lockattr / rslock | target | |\n");
    out.push_str("|---|---|---|---|---|---|---|\n");
    let rows = v["table"]
        .as_array()
        .ok_or("the JSON has no `table` (made by an older bench?)")?;
    for row in rows.iter().filter(|r| r["readme"].as_bool() == Some(true)) {
        let (target, verdict) = match row["met"].as_bool() {
            Some(met) => (cell(&row["target"]), targets::met_word(met)),
            None => ("(information)".to_owned(), ""),
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {target} | {verdict} |\n",
            cell(&row["row"]),
            cell(&row["figure"]),
            cell(&row["lockattr"]),
            cell(&row["rslock"]),
            cell(&row["ratio"]),
        ));
    }
    Ok(out)
}

/// Rewrites the region between the bench-table markers of `page`
/// (`docs/performance.md`) from the results JSON at `json`.
pub fn update_table(json: &Path, page: &Path) -> Res<()> {
    let raw = std::fs::read_to_string(json)
        .map_err(|e| format!("cannot read {}: {e}", json.display()))?;
    let value: serde_json::Value =
        serde_json::from_str(&raw).map_err(|e| format!("{} is not JSON: {e}", json.display()))?;
    // The JSON as the repository names it (`docs/bench/results.json`), or
    // its path as given when it lies outside.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let source = std::fs::canonicalize(json)
        .ok()
        .and_then(|full| {
            let root = std::fs::canonicalize(root).ok()?;
            Some(full.strip_prefix(root).ok()?.display().to_string())
        })
        .unwrap_or_else(|| json.display().to_string());
    let table = results_table(&value, &source)?;
    let text = std::fs::read_to_string(page)
        .map_err(|e| format!("cannot read {}: {e}", page.display()))?;
    let missing = || format!("{} lacks `{TABLE_START}` ... `{TABLE_END}`", page.display());
    let start = text.find(TABLE_START).ok_or_else(missing)? + TABLE_START.len();
    let end = start + text[start..].find(TABLE_END).ok_or_else(missing)?;
    let updated = format!("{}\n{table}{}", &text[..start], &text[end..]);
    if updated != text {
        std::fs::write(page, updated)
            .map_err(|e| format!("cannot write {}: {e}", page.display()))?;
    }
    Ok(())
}
