//! `nave rollout status|pause|resume|undo`: a MultiClusterDeployment's rollout in waves
//! (`spec.rollout`), as `kubectl rollout` does for a Deployment.

use std::time::Duration;

use futures::StreamExt as _;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use nave_api::{MultiClusterDeployment, RolloutPhase, STABLE_TEMPLATE_ANNOTATION};
use serde_json::json;

use crate::output::render;
use crate::placements::namespace_or_default;
use crate::{CliError, Format, Global, kube_client};

/// What `nave rollout` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Action {
    /// Where the rollout stands; with `--wait`, follow it until it completes (exit 0) or halts
    /// (exit 1).
    Status,
    /// Start no new wave (the clusters already given the template carry on).
    Pause,
    /// Let the next waves start again.
    Resume,
    /// Put back the last template every cluster ran (`nave.dev/stable-template`); it rolls out
    /// in waves too, and clusters that still run it are not touched.
    Undo,
}

fn line(mcd: &MultiClusterDeployment) -> String {
    let name = mcd.metadata.name.as_deref().unwrap_or_default();
    match mcd.status.as_ref().and_then(|s| s.rollout.as_ref()) {
        None => {
            format!("{name}: no rollout in waves (spec.rollout.waves is empty, or the hub has not acted yet)")
        }
        Some(r) if r.phase == RolloutPhase::Complete => format!(
            "{name}: Complete, {} of {} clusters given template {}",
            r.updated_clusters, r.clusters, r.template_hash
        ),
        Some(r) => format!(
            "{name}: {:?}, wave {} ({}), {} of {} clusters given template {}{}",
            r.phase,
            r.wave + 1,
            r.wave_name.as_deref().unwrap_or("-"),
            r.updated_clusters,
            r.clusters,
            r.template_hash,
            r.message.as_deref().map(|m| format!(": {m}")).unwrap_or_default()
        ),
    }
}

/// Runs `action` on the MultiClusterDeployment `namespace/name`.
pub async fn rollout(
    global: &Global,
    action: Action,
    name: &str,
    namespace: Option<&str>,
    wait: Option<Duration>,
) -> Result<String, CliError> {
    let namespace = namespace_or_default(global, namespace).await?;
    let api: Api<MultiClusterDeployment> = Api::namespaced(kube_client(global).await?, &namespace);
    let what = format!("MultiClusterDeployment {namespace}/{name}");
    let mcd = api.get(name).await.map_err(|e| CliError::kube(&what, e))?;
    let staged = mcd
        .spec
        .rollout
        .as_ref()
        .is_some_and(|r| !r.waves.is_empty() || r.max_concurrency.is_some());
    if !staged && action != Action::Status {
        return Err(CliError::invalid(format!(
            "{what} has neither spec.rollout.waves nor maxConcurrency: a new template reaches \
             every cluster at once"
        )));
    }
    let mut current = mcd;
    match action {
        Action::Pause | Action::Resume => {
            let patch = json!({"spec": {"rollout": {"paused": action == Action::Pause}}});
            current = api
                .patch(name, &PatchParams::default(), &Patch::Merge(patch))
                .await
                .map_err(|e| CliError::kube(&what, e))?;
        }
        Action::Undo => {
            let stable = current
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(STABLE_TEMPLATE_ANNOTATION))
                .ok_or_else(|| {
                    CliError::not_found(format!(
                        "{what} has no {STABLE_TEMPLATE_ANNOTATION}: no rollout has completed yet"
                    ))
                })?;
            let template: serde_json::Value = serde_json::from_str(stable).map_err(|e| {
                CliError::failed(format!("{what}: {STABLE_TEMPLATE_ANNOTATION} is not JSON: {e}"))
            })?;
            if serde_json::to_value(&current.spec.template).ok().as_ref() == Some(&template) {
                return Err(CliError::failed(format!(
                    "{what} runs its stable template already: nothing to undo"
                )));
            }
            // The whole template replaced (a merge patch would keep fields the stable one lacks),
            // under the resourceVersion read.
            let patch: json_patch::Patch = serde_json::from_value(json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": current.metadata.resource_version},
                {"op": "replace", "path": "/spec/template", "value": template},
            ]))
            .map_err(|e| CliError::failed(format!("building the patch: {e}")))?;
            current = api
                .patch(name, &PatchParams::default(), &Patch::<()>::Json(patch))
                .await
                .map_err(|e| CliError::kube(&what, e))?;
        }
        Action::Status => {}
    }
    if let Some(limit) = wait.filter(|_| action == Action::Status) {
        current = follow(&api, name, &what, limit, global.output).await?;
    }
    let rollout = current.status.as_ref().and_then(|s| s.rollout.clone());
    let result = json!({
        "namespace": namespace,
        "name": name,
        "paused": current.spec.rollout.as_ref().is_some_and(|r| r.paused),
        "rollout": rollout,
    });
    let text = render(global.output, &result, |_| {
        let said = match action {
            Action::Status => String::new(),
            Action::Pause => format!("{what}: paused; no new wave starts until `nave rollout resume`\n"),
            Action::Resume => format!("{what}: resumed\n"),
            Action::Undo => format!("{what}: the stable template put back; it rolls out in waves\n"),
        };
        format!("{said}{}\n", line(&current))
    })?;
    if wait.is_some() && rollout.is_some_and(|r| r.phase == RolloutPhase::Halted) {
        return Err(CliError::failed(format!("{}\n", line(&current).trim_end())));
    }
    Ok(text)
}

/// Follows the MultiClusterDeployment until its rollout completes or halts, printing each change
/// of where it stands; fails when `limit` passes first.
async fn follow(
    api: &Api<MultiClusterDeployment>,
    name: &str,
    what: &str,
    limit: Duration,
    output: Format,
) -> Result<MultiClusterDeployment, CliError> {
    let deadline = tokio::time::Instant::now().checked_add(limit);
    let mut events = watcher(api.clone(), watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut shown = None;
    loop {
        let next = crate::next_until(&mut events, deadline).await;
        let event = match next {
            None => {
                return Err(CliError::failed(format!(
                    "{what}: not rolled out after {} s: {}",
                    limit.as_secs(),
                    shown.as_deref().unwrap_or("no rollout status yet")
                )));
            }
            Some(None) => return Err(CliError::failed("the watch of MultiClusterDeployments ended")),
            Some(Some(event)) => event,
        };
        let mcd = match event {
            Ok(watcher::Event::Apply(mcd) | watcher::Event::InitApply(mcd))
                if mcd.metadata.name.as_deref() == Some(name) =>
            {
                mcd
            }
            Ok(watcher::Event::Delete(mcd)) if mcd.metadata.name.as_deref() == Some(name) => {
                return Err(CliError::not_found(format!("{what}: deleted")));
            }
            Err(e) => {
                eprintln!("watching {what}: {e}; trying again");
                continue;
            }
            Ok(_) => continue,
        };
        let now = line(&mcd);
        if shown.as_ref() != Some(&now) {
            if output == Format::Table {
                eprintln!("{now}");
            }
            shown = Some(now);
        }
        let status = mcd.status.as_ref();
        let current = status.is_some_and(|s| s.observed_generation == mcd.metadata.generation);
        let phase = status.and_then(|s| s.rollout.as_ref()).map(|r| r.phase);
        if current && matches!(phase, Some(RolloutPhase::Complete | RolloutPhase::Halted)) {
            return Ok(mcd);
        }
    }
}
