//! Writes the CRD manifests to `crds/` and to the hub's Helm chart (`helm/nave-hub/crds/`), or
//! only to the directory given as the only argument: one `<plural>.<group>.yaml` per resource,
//! removing stale `*.nave.dev.yaml` files there.

use std::{collections::BTreeSet, fs, path::PathBuf};

use anyhow::Context as _;

fn main() -> anyhow::Result<()> {
    let dirs = match std::env::args_os().nth(1) {
        Some(dir) => vec![PathBuf::from(dir)],
        None => {
            let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
            // Helm installs the CRDs of a chart's `crds/` before its templates; the copies there
            // must match (a test in nave-e2e compares them).
            vec![root.join("crds"), root.join("helm").join("nave-hub").join("crds")]
        }
    };
    for dir in dirs {
        write_to(dir)?;
    }
    Ok(())
}

fn write_to(dir: PathBuf) -> anyhow::Result<()> {
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let dir = dir
        .canonicalize()
        .with_context(|| format!("resolving {}", dir.display()))?;

    let mut written = BTreeSet::new();
    for crd in nave_api::crds() {
        let name = nave_api::crd_file_name(&crd);
        let path = dir.join(&name);
        fs::write(&path, nave_api::crd_file_contents(&crd))
            .with_context(|| format!("writing {}", path.display()))?;
        println!("wrote {}", path.display());
        written.insert(name);
    }

    let suffix = format!(".{}.yaml", nave_api::GROUP);
    for entry in fs::read_dir(&dir).with_context(|| format!("listing {}", dir.display()))? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(&suffix) && !written.contains(&name) {
            fs::remove_file(entry.path()).with_context(|| format!("removing {}", entry.path().display()))?;
            println!("removed stale {}", entry.path().display());
        }
    }
    Ok(())
}
