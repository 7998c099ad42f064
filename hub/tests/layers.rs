//! The hub's modules form layers: no module uses one that uses it back, and the placement core
//! stays pure (no IO, no async, nothing of the hub's edges). Read from the sources, so a change
//! that breaks the layering fails here with the cycle or the offending reference named.
//!
//! A module is a file under `src/` (`placement/moves.rs` is `placement::moves`); it uses another
//! when it names it through `crate::`, `super::` or `self::` (grouped `use` included), or names a
//! child module it declares. Test modules and comments do not count.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use regex::Regex;

/// Every module of `src/` with its source, test modules and comments left out.
fn modules() -> BTreeMap<String, String> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("read src/") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    walk(&src, &mut files);
    let test_module = Regex::new(r"#\[cfg\(test\)\]\s*mod tests\s*\{").unwrap();
    let mut modules = BTreeMap::new();
    for file in files {
        let relative = file.strip_prefix(&src).unwrap().with_extension("");
        let parts: Vec<String> = relative
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if parts == ["lib"]
            || parts == ["main"]
            || parts.last().is_some_and(|p| p == "tests" || p == "fixtures")
        {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("read a module");
        let code = test_module.split(&text).next().unwrap_or_default();
        let code: String = code
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        modules.insert(parts.join("::"), code);
    }
    modules
}

/// The longest prefix of `path` that is a module.
fn resolve(modules: &BTreeMap<String, String>, path: &[&str]) -> Option<String> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].join("::"))
        .find(|candidate| modules.contains_key(candidate))
}

/// Who uses whom.
fn uses(modules: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let grouped = Regex::new(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)*)::\{([^}]*)\}").unwrap();
    let plain = Regex::new(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)").unwrap();
    let child = Regex::new(r"(?m)^\s*(?:pub(?:\([a-z]+\))? )?mod ([a-z_][a-z0-9_]*);").unwrap();
    let mut graph = BTreeMap::new();
    for (name, code) in modules {
        let me: Vec<&str> = name.split("::").collect();
        let base = |kind: &str| -> Vec<&str> {
            match kind {
                "crate" => Vec::new(),
                "super" => me[..me.len() - 1].to_vec(),
                _ => me.clone(),
            }
        };
        let mut used = BTreeSet::new();
        for c in grouped.captures_iter(code) {
            let mut prefix = base(&c[1]);
            prefix.extend(c[2].split("::").filter(|s| !s.is_empty()));
            for item in c[3].split(',') {
                let mut path = prefix.clone();
                path.extend(item.trim().split("::").filter(|s| !s.is_empty() && *s != "self"));
                used.extend(resolve(modules, &path));
            }
        }
        for c in plain.captures_iter(code) {
            let mut path = base(&c[1]);
            path.extend(c[2].split("::").filter(|s| !s.is_empty()));
            used.extend(resolve(modules, &path));
        }
        for c in child.captures_iter(code) {
            let declared = format!("{name}::{}", &c[1]);
            let named = Regex::new(&format!(r"\b{}::", regex::escape(&c[1]))).unwrap();
            if modules.contains_key(&declared) && named.is_match(code) {
                used.insert(declared);
            }
        }
        used.remove(name);
        graph.insert(name.clone(), used);
    }
    graph
}

/// A cycle through `from`, if there is one.
fn cycle(graph: &BTreeMap<String, BTreeSet<String>>, from: &str) -> Option<Vec<String>> {
    fn visit(
        graph: &BTreeMap<String, BTreeSet<String>>,
        target: &str,
        at: &str,
        path: &mut Vec<String>,
        seen: &mut BTreeSet<String>,
    ) -> bool {
        for next in graph.get(at).into_iter().flatten() {
            if next == target {
                return true;
            }
            if seen.insert(next.clone()) {
                path.push(next.clone());
                if visit(graph, target, next, path, seen) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    let mut path = vec![from.to_owned()];
    visit(graph, from, from, &mut path, &mut BTreeSet::new()).then(|| {
        path.push(from.to_owned());
        path
    })
}

#[test]
fn no_module_of_the_hub_uses_one_that_uses_it_back() {
    let modules = modules();
    assert!(
        modules.len() > 20,
        "the hub's modules were found: {:?}",
        modules.keys()
    );
    let graph = uses(&modules);
    let cycles: Vec<String> = graph
        .keys()
        .filter_map(|m| cycle(&graph, m))
        .map(|c| c.join(" -> "))
        .collect();
    assert!(
        cycles.is_empty(),
        "modules that use each other:\n{}",
        cycles.join("\n")
    );
}

#[test]
fn the_placement_core_is_pure() {
    let modules = modules();
    let graph = uses(&modules);
    // What placement may read: its own parts, the health view it is handed, the rendering rules
    // (pure too, and held to the same rule), the store's plain record types. Nothing that talks
    // to Kubernetes, the network or the store's connections.
    let pure = |m: &str| m == "placement" || m.starts_with("placement::") || m == "render";
    let allowed = |m: &str| pure(m) || ["cluster_health", "store", "store::types"].contains(&m);
    for (name, used) in graph.iter().filter(|(m, _)| pure(m)) {
        let outside: Vec<&String> = used.iter().filter(|u| !allowed(u)).collect();
        assert!(
            outside.is_empty(),
            "{name} uses {outside:?}; the placement core must stay pure"
        );
        let code = &modules[name];
        for io in [
            ".await",
            "async fn",
            "tokio::",
            "kube::Api",
            "kube::Client",
            "reqwest::",
        ] {
            assert!(
                !code.contains(io),
                "{name} contains `{io}`; the placement core must stay pure"
            );
        }
    }
}

#[test]
fn the_check_finds_a_cycle_when_there_is_one() {
    let modules: BTreeMap<String, String> = [
        ("a".to_owned(), "use crate::b::Thing;".to_owned()),
        ("b".to_owned(), "use crate::{c, d};".to_owned()),
        ("c".to_owned(), "fn f() { super::a::g() }".to_owned()),
        ("d".to_owned(), String::new()),
    ]
    .into();
    let graph = uses(&modules);
    assert_eq!(graph["b"], BTreeSet::from(["c".to_owned(), "d".to_owned()]));
    assert_eq!(
        cycle(&graph, "a"),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
    assert_eq!(cycle(&graph, "d"), None);
}
