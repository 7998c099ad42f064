//! The emulator stands alone: `nave-sim` and `nave-sim-core` depend on none of Nave's crates
//! (the hub, the agent, the API types, the placement engine, the playground), so Nave's crates can
//! test against the emulator without a dependency cycle, and the emulator builds and runs without
//! them. Nave on the emulator is `nave-playground`.
//!
//! Two leaf crates are allowed, because they hold Kubernetes' own rules rather than Nave's:
//! `nave-sim-core` (the emulator's core) and `nave-resources` (exact quantities and the
//! scheduler's pod request rule, which the hub and the agent count with too, so that all three
//! agree). Each of them depends on no `nave-` crate at all, which is checked as well.

use std::path::Path;

/// The only `nave-` crates the emulator may depend on: leaves of Kubernetes rules.
const ALLOWED: [&str; 2] = ["nave-resources", "nave-sim-core"];

/// The `nave-` crates a manifest names in any dependency table (normal, dev, build,
/// target-specific): as a key, as `[dependencies.<name>]`, or as `package = "<name>"`.
fn nave_dependencies(manifest: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut in_dependencies = false;
    for line in manifest.lines() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if line.starts_with('[') {
            let header = line.trim_matches(|c| c == '[' || c == ']');
            in_dependencies = header.split('.').any(|part| part.ends_with("dependencies"));
            if let Some((_, name)) = header.split_once("dependencies.") {
                found.push(name.trim_matches(['"', '\'']).to_owned());
            }
            continue;
        }
        if !in_dependencies {
            continue;
        }
        let key = line.split(['=', '.']).next().unwrap_or_default();
        found.push(key.trim().trim_matches(['"', '\'']).to_owned());
        // Outside quotes are the even pieces; a piece ending in `package =` precedes the name.
        let pieces: Vec<&str> = line.split('"').collect();
        for (i, piece) in pieces.iter().enumerate().step_by(2) {
            let before = piece.trim_end().trim_end_matches('=').trim_end();
            if before.ends_with("package")
                && let Some(name) = pieces.get(i + 1)
            {
                found.push((*name).to_owned());
            }
        }
    }
    found.retain(|name| name.starts_with("nave-"));
    found.sort();
    found.dedup();
    found
}

fn forbidden_in(manifest: &Path) -> Vec<String> {
    let text =
        std::fs::read_to_string(manifest).unwrap_or_else(|e| panic!("reading {}: {e}", manifest.display()));
    let mut names = nave_dependencies(&text);
    names.retain(|name| !ALLOWED.contains(&name.as_str()));
    names
}

#[test]
fn the_emulator_depends_on_no_nave_crate_but_its_core() {
    let sim = Path::new(env!("CARGO_MANIFEST_DIR"));
    for manifest in [sim.join("Cargo.toml"), sim.join("core").join("Cargo.toml")] {
        assert_eq!(
            forbidden_in(&manifest),
            Vec::<String>::new(),
            "{} depends on Nave crates; the emulator must not (Nave on the emulator belongs in \
             nave-playground)",
            manifest.display()
        );
    }
}

#[test]
fn the_allowed_leaves_depend_on_no_nave_crate_at_all() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for manifest in [
        root.join("sim/core/Cargo.toml"),
        root.join("resources/Cargo.toml"),
    ] {
        let text =
            std::fs::read_to_string(&manifest).unwrap_or_else(|e| panic!("{}: {e}", manifest.display()));
        let mut names = nave_dependencies(&text);
        // The core may use the rules leaf; neither may use anything else of Nave.
        names.retain(|n| n != "nave-resources");
        assert_eq!(
            names,
            Vec::<String>::new(),
            "{} must stay a leaf",
            manifest.display()
        );
    }
}

#[test]
fn the_dependency_scan_finds_nave_crates_in_every_form() {
    let manifest = r#"
[package]
name = "nave-sim"

[dependencies]
nave-sim-core.workspace = true
nave-api.workspace = true
policies = { package = "nave-policies", path = "../policies" }
serde.workspace = true

[dev-dependencies]
"nave-hub" = { path = "../hub" }

[target.'cfg(unix)'.dependencies]
nave-agent = "0.1"

[dependencies.nave-e2e]
path = "../tests"

[lints]
nave-not-a-dependency = true
"#;
    assert_eq!(
        nave_dependencies(manifest),
        [
            "nave-agent",
            "nave-api",
            "nave-e2e",
            "nave-hub",
            "nave-policies",
            "nave-sim-core"
        ]
    );
}
