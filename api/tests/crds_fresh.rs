//! The CRD manifests in `crds/` must be what the Rust types generate.

use std::{fs, path::PathBuf};

fn crds_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join("crds")
}

#[test]
fn committed_crd_manifests_are_fresh() {
    let mut stale = Vec::new();
    for crd in nave_api::crds() {
        let name = nave_api::crd_file_name(&crd);
        let want = nave_api::crd_file_contents(&crd);
        match fs::read_to_string(crds_dir().join(&name)) {
            Ok(have) if have == want => {}
            Ok(_) => stale.push(format!("crds/{name} is stale")),
            Err(err) => stale.push(format!("crds/{name} cannot be read ({err})")),
        }
    }
    assert!(
        stale.is_empty(),
        "{}\nregenerate with: {}",
        stale.join("\n"),
        nave_api::CRDGEN_COMMAND
    );
}

#[test]
fn crds_dir_holds_no_leftover_manifests() {
    let wanted: Vec<String> = nave_api::crds().iter().map(nave_api::crd_file_name).collect();
    let suffix = format!(".{}.yaml", nave_api::GROUP);
    let leftovers: Vec<String> = fs::read_dir(crds_dir())
        .expect("crds/ exists")
        .map(|entry| {
            entry
                .expect("readable entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|name| name.ends_with(&suffix) && !wanted.contains(name))
        .collect();
    assert!(
        leftovers.is_empty(),
        "crds/ has manifests no type generates: {leftovers:?}\nregenerate with: {}",
        nave_api::CRDGEN_COMMAND
    );
}
