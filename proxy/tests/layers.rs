//! The proxy's files depend on each other one way only (ARCHITECTURE.md,
//! "Layers"): this test builds the file-level graph of `proxy/src` from the
//! paths the code names (`crate::a::b`, `super::x`, `self::x`, and a parent
//! module's `child::x`) and fails on any cycle. Test modules
//! (`#[cfg(test)]`) and test-only files (`tests.rs`) are left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module path ("" for lib.rs, "a::b" for a/b.rs or a/b/mod.rs) -> code.
fn sources(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("reading proxy/src") {
            let path = entry.expect("reading proxy/src").path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            if !name.ends_with(".rs") || name == "tests.rs" {
                continue;
            }
            let rel = path.strip_prefix(root).expect("under src").with_extension("");
            let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
            if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
                parts.pop();
            }
            let text = std::fs::read_to_string(&path).expect("reading a source file");
            out.insert(parts.join("::"), without_tests(&tokens(&text)).join(" "));
        }
    }
    out
}

/// Identifiers, `::` and single punctuation; comments and the contents of
/// string and char literals are dropped.
fn tokens(text: &str) -> Vec<String> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            i = text[i + 2..].find("*/").map_or(b.len(), |e| i + 2 + e + 2);
        } else if c == b'r' && raw_string_hashes(&b[i + 1..]).is_some() {
            let hashes = raw_string_hashes(&b[i + 1..]).unwrap_or(0);
            let close = format!("\"{}", "#".repeat(hashes));
            let start = i + 2 + hashes;
            i = text[start..].find(&close).map_or(b.len(), |e| start + e + close.len());
            out.push("\"\"".into());
        } else if c == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push("\"\"".into());
        } else if c == b'\'' {
            // A char literal ('x', '\n', '{') or a lifetime ('a).
            let esc = b.get(i + 1) == Some(&b'\\');
            let ch_len = text[i + 1..].chars().next().map_or(1, char::len_utf8);
            if esc {
                i = text.get(i + 3..).and_then(|t| t.find('\'')).map_or(b.len(), |e| i + 3 + e + 1);
            } else if b.get(i + 1 + ch_len) == Some(&b'\'') {
                i += ch_len + 2;
            } else {
                i += 1;
            }
        } else if c.is_ascii_alphanumeric() || c == b'_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push(text[start..i].to_string());
        } else if b[i..].starts_with(b"::") {
            out.push("::".into());
            i += 2;
        } else if c.is_ascii_whitespace() {
            i += 1;
        } else {
            out.push((c as char).to_string());
            i += 1;
        }
    }
    out
}

/// `Some(number of #)` when `rest` (after an `r`) opens a raw string.
fn raw_string_hashes(rest: &[u8]) -> Option<usize> {
    let hashes = rest.iter().take_while(|&&h| h == b'#').count();
    (rest.get(hashes) == Some(&b'"')).then_some(hashes)
}

/// Drops every item marked `#[cfg(test)]` (a test module, a test helper).
fn without_tests(tokens: &[String]) -> Vec<String> {
    let marker = ["#", "[", "cfg", "(", "test", ")", "]"];
    let mut out = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        if tokens[i..].starts_with(&marker.map(String::from)) {
            i += marker.len();
            // The item ends at its first `;` outside braces, or at the
            // brace closing its body.
            let mut depth = 0usize;
            while i < tokens.len() {
                let t = tokens[i].as_str();
                i += 1;
                match t {
                    "{" => depth += 1,
                    "}" => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    ";" if depth == 0 => break,
                    _ => {}
                }
            }
            continue;
        }
        out.push(tokens[i].clone());
        i += 1;
    }
    out
}

/// Every path the code names, expanded (`a::{b, c::d}` -> `a::b`, `a::c::d`),
/// as lists of segments.
fn paths(code: &str) -> Vec<Vec<String>> {
    let toks: Vec<&str> = code.split(' ').collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        let starts = is_ident(toks[i]) && (i == 0 || toks[i - 1] != "::") && toks.get(i + 1) == Some(&"::");
        if starts {
            i = path_at(&toks, i, Vec::new(), &mut out);
        } else {
            i += 1;
        }
    }
    out
}

fn is_ident(t: &str) -> bool {
    t.bytes().next().is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
}

/// Reads the path starting at `toks[i]` under `prefix`; returns the index
/// after it.
fn path_at(toks: &[&str], mut i: usize, mut prefix: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    loop {
        if toks.get(i) == Some(&"{") {
            i += 1;
            while i < toks.len() && toks[i] != "}" {
                if is_ident(toks[i]) {
                    i = path_at(toks, i, prefix.clone(), out);
                } else {
                    i += 1;
                }
            }
            return i + 1;
        }
        match toks.get(i) {
            Some(t) if is_ident(t) => prefix.push(t.to_string()),
            _ => break,
        }
        i += 1;
        if toks.get(i) != Some(&"::") {
            break;
        }
        i += 1;
    }
    out.push(prefix);
    i
}

fn parent(module: &str) -> &str {
    module.rsplit_once("::").map_or("", |(p, _)| p)
}

fn join(base: &str, rest: &[String]) -> Vec<String> {
    base.split("::").filter(|s| !s.is_empty()).map(String::from).chain(rest.iter().cloned()).collect()
}

/// The file (module) a path from `from` lands in: the longest prefix that
/// is a module of its own. `None` for paths outside the crate.
fn target(modules: &BTreeSet<String>, from: &str, path: &[String]) -> Option<String> {
    let full = match path.first().map(String::as_str) {
        Some("crate") => path[1..].to_vec(),
        Some("self") => join(from, &path[1..]),
        Some("super") => {
            let mut base = parent(from);
            let mut rest = &path[1..];
            while rest.first().is_some_and(|s| s == "super") {
                base = parent(base);
                rest = &rest[1..];
            }
            join(base, rest)
        }
        // A child module named relatively by its parent.
        Some(first) if modules.contains(&join(from, &[first.to_string()]).join("::")) => join(from, path),
        _ => return None,
    };
    (0..=full.len()).rev().map(|n| full[..n].join("::")).find(|m| modules.contains(m))
}

fn graph(sources: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let modules: BTreeSet<String> = sources.keys().cloned().collect();
    let mut edges = BTreeMap::new();
    for (module, code) in sources {
        let to: BTreeSet<String> =
            paths(code).iter().filter_map(|p| target(&modules, module, p)).filter(|t| t != module).collect();
        edges.insert(module.clone(), to);
    }
    edges
}

/// Strongly connected components with more than one file (Tarjan).
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(w: &mut Walk<'a>, v: &'a str) {
        let n = w.index.len();
        w.index.insert(v, n);
        w.low.insert(v, n);
        w.stack.push(v);
        for t in &w.edges[v] {
            let t = t.as_str();
            if !w.index.contains_key(t) {
                visit(w, t);
                let low = w.low[v].min(w.low[t]);
                w.low.insert(v, low);
            } else if w.stack.contains(&t) {
                let low = w.low[v].min(w.index[t]);
                w.low.insert(v, low);
            }
        }
        if w.low[v] == w.index[v] {
            let at = w.stack.iter().position(|&s| s == v).expect("on the stack");
            let component: Vec<String> = w.stack.drain(at..).map(String::from).collect();
            if component.len() > 1 {
                w.found.push(component);
            }
        }
    }
    let mut w = Walk { edges, index: BTreeMap::new(), low: BTreeMap::new(), stack: Vec::new(), found: Vec::new() };
    for v in edges.keys() {
        if !w.index.contains_key(v.as_str()) {
            visit(&mut w, v);
        }
    }
    w.found
}

fn name(module: &str) -> &str {
    if module.is_empty() {
        "lib"
    } else {
        module
    }
}

#[test]
fn proxy_files_depend_one_way() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let edges = graph(&sources(&root));
    assert!(edges.len() > 20, "proxy/src was not read");
    // `LAYERS_GRAPH=1 cargo test -p proxy --test layers -- --nocapture`
    // prints every file's imports.
    if std::env::var_os("LAYERS_GRAPH").is_some() {
        for (m, to) in &edges {
            println!("{} -> {}", name(m), to.iter().map(|t| name(t)).collect::<Vec<_>>().join(", "));
        }
    }
    let mut report = String::new();
    for component in cycles(&edges) {
        report.push_str(&format!("cycle among {} files:\n", component.len()));
        for m in &component {
            let inside: Vec<&str> = edges[m].iter().filter(|t| component.contains(t)).map(|t| name(t)).collect();
            report.push_str(&format!("  {} -> {}\n", name(m), inside.join(", ")));
        }
    }
    assert!(report.is_empty(), "proxy/src has import cycles (see ARCHITECTURE.md, Layers):\n{report}");
}

#[test]
fn the_graph_sees_every_kind_of_path() {
    let code = |s: &str| without_tests(&tokens(s)).join(" ");
    let mut sources = BTreeMap::new();
    sources.insert("".to_string(), code("mod a; mod b;"));
    sources.insert("a".to_string(), code("mod x; use x::f; // crate::b\n #[cfg(test)] mod t { use crate::b; }"));
    sources.insert("a::x".to_string(), code("use super::super::b::{self, g}; fn f() { let c = '{'; }"));
    sources.insert("b".to_string(), code("fn g() { crate::a::h(\"crate::lib\"); }"));
    let edges = graph(&sources);
    assert_eq!(edges["a"], ["a::x".to_string()].into());
    assert_eq!(edges["a::x"], ["b".to_string()].into());
    assert_eq!(edges["b"], ["a".to_string()].into());
    assert_eq!(cycles(&edges).len(), 1);
}
