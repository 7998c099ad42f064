//! kube-rs conformance: every `Api` verb, watchers and reflectors (including a forced 410 relist
//! and streaming lists), a `Controller` with the finalizer helper, server-side apply convergence,
//! pagination, TLS with a real CA chain and the in-process transport.

#[path = "support/helpers.rs"]
mod helpers;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use helpers::{cluster, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::{DynamicObject, GroupVersionKind};
use kube::discovery::{ApiResource, Discovery};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use kube::runtime::{WatchStreamExt, conditions, reflector, wait::await_condition, watcher};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": "v"}})).expect("configmap")
}

fn deployment(name: &str, replicas: i32) -> Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}
    }))
    .expect("deployment")
}

fn status_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

#[tokio::test]
async fn every_api_verb_on_deployments_and_configmaps() {
    let sim = cluster("verbs", false).await;
    let client = sim.client().await.expect("client");
    let v = client.apiserver_version().await.expect("version");
    assert_eq!(v.minor, "32");

    let deps: Api<Deployment> = Api::default_namespaced(client.clone());
    let created = deps
        .create(&PostParams::default(), &deployment("rs1", 1))
        .await
        .expect("create");
    assert_eq!(created.metadata.generation, Some(1));
    assert_eq!(created.metadata.uid.as_ref().map(String::len), Some(36));
    assert_eq!(created.spec.revision_history_limit, Some(10), "defaults applied");

    let mut stale = created.clone();
    stale.spec.replicas = Some(2);
    let replaced = deps
        .replace("rs1", &PostParams::default(), &stale)
        .await
        .expect("replace");
    assert_eq!(replaced.metadata.generation, Some(2));
    let err = deps
        .replace("rs1", &PostParams::default(), &stale)
        .await
        .expect_err("stale replace");
    assert_eq!(
        status_code(&err),
        Some(409),
        "stale replace must conflict, got {err}"
    );

    let merged = deps
        .patch(
            "rs1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .await
        .expect("merge");
    assert_eq!(merged.labels().get("x").map(String::as_str), Some("y"));
    assert_eq!(
        merged.metadata.generation,
        Some(2),
        "labels never bump generation"
    );

    let applied = deps
        .patch(
            "rs1",
            &PatchParams::apply("kprobe").force(),
            &Patch::Apply(json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "rs1"}, "spec": {"replicas": 3}})),
        )
        .await
        .expect("apply");
    assert_eq!(applied.spec.replicas, Some(3));

    let st = deps
        .patch_status(
            "rs1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"observedGeneration": 3, "replicas": 3}})),
        )
        .await
        .expect("status patch");
    assert_eq!(st.status.as_ref().and_then(|s| s.replicas), Some(3));
    let main_status = deps
        .patch(
            "rs1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": 9}})),
        )
        .await
        .expect("main patch");
    assert_eq!(
        main_status.status.as_ref().and_then(|s| s.replicas),
        Some(3),
        "main resource ignores status"
    );
    let got_status = deps.get_status("rs1").await.expect("get status");
    assert_eq!(got_status.metadata.name.as_deref(), Some("rs1"));

    let scale = deps.get_scale("rs1").await.expect("scale");
    assert_eq!(scale.spec.as_ref().and_then(|s| s.replicas), Some(3));
    let scaled = deps
        .patch_scale(
            "rs1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 5}})),
        )
        .await
        .expect("patch scale");
    assert_eq!(scaled.spec.as_ref().and_then(|s| s.replicas), Some(5));

    let jp = deps
        .patch(
            "rs1",
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(json!([
                    {"op": "test", "path": "/metadata/finalizers", "value": null},
                    {"op": "add", "path": "/metadata/finalizers", "value": ["a/b"]}
                ]))
                .expect("json patch"),
            ),
        )
        .await
        .expect("json patch with test of a missing path");
    assert_eq!(jp.finalizers(), &["a/b".to_owned()]);
    let bad = deps
        .patch(
            "rs1",
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(
                    json!([{"op": "test", "path": "/metadata/finalizers", "value": null}]),
                )
                .expect("p"),
            ),
        )
        .await
        .expect_err("failing test op");
    assert_eq!(status_code(&bad), Some(422));
    let cleared = deps
        .patch(
            "rs1",
            &PatchParams::default(),
            &Patch::Strategic(json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a/b"]}})),
        )
        .await
        .expect("strategic");
    assert!(
        cleared.metadata.finalizers.is_none(),
        "empty finalizers are omitted: {:?}",
        cleared.metadata.finalizers
    );

    let meta = deps.get_metadata("rs1").await.expect("metadata");
    assert_eq!(
        meta.types.as_ref().map(|t| t.kind.as_str()),
        Some("PartialObjectMetadata")
    );
    let metas = deps
        .list_metadata(&ListParams::default())
        .await
        .expect("list metadata");
    assert_eq!(metas.items.len(), 1);

    assert!(deps.get_opt("nope").await.expect("get_opt").is_none());
    let del = deps
        .delete("rs1", &DeleteParams::background())
        .await
        .expect("delete");
    assert!(del.is_right(), "deployment delete answers a Status");

    // Pods: delete returns the object; unbound pods go at once.
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let pod: Pod = serde_json::from_value(
        json!({"metadata": {"generateName": "p-"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}),
    )
    .expect("pod");
    let p = pods
        .create(&PostParams::default(), &pod)
        .await
        .expect("create pod");
    let name = p.name_any();
    assert!(name.starts_with("p-") && name.len() == 7, "generated name {name}");
    assert_eq!(
        p.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Pending")
    );
    assert_eq!(
        p.spec.as_ref().and_then(|s| s.scheduler_name.as_deref()),
        Some("default-scheduler")
    );
    let del = pods
        .delete(&name, &DeleteParams::default())
        .await
        .expect("delete pod");
    assert!(del.is_left(), "pod delete answers the pod");

    // ConfigMaps: pagination and deletecollection.
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    for i in 0..25 {
        let mut c = cm(&format!("cm{i:02}"));
        c.metadata.labels = Some([("tmp".to_owned(), (i % 2 == 0).to_string())].into());
        cms.create(&PostParams::default(), &c).await.expect("create cm");
    }
    let mut pages = 0;
    let mut seen = 0;
    let mut lp = ListParams::default().limit(10);
    loop {
        let page = cms.list(&lp).await.expect("page");
        pages += 1;
        seen += page.items.len();
        assert!(
            page.metadata
                .resource_version
                .as_deref()
                .is_some_and(|r| !r.is_empty())
        );
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(c) => {
                assert_eq!(page.metadata.remaining_item_count, Some((25 - seen) as i64));
                lp = lp.continue_token(&c);
            }
            None => break,
        }
    }
    assert_eq!((pages, seen), (3, 25));
    let even = cms
        .list(&ListParams::default().labels("tmp=true"))
        .await
        .expect("selector");
    assert_eq!(even.items.len(), 13);
    let by_name = cms
        .list(&ListParams::default().fields("metadata.name=cm03"))
        .await
        .expect("field selector");
    assert_eq!(by_name.items.len(), 1);
    let err = cms
        .list(&ListParams::default().fields("spec.foo=1"))
        .await
        .expect_err("unsupported field");
    assert_eq!(status_code(&err), Some(400));
    cms.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels("tmp=true"),
    )
    .await
    .expect("deletecollection");
    assert_eq!(
        cms.list(&ListParams::default()).await.expect("list").items.len(),
        12
    );

    // dryRun leaves nothing behind.
    let rv_before = cms
        .list(&ListParams::default())
        .await
        .expect("list")
        .metadata
        .resource_version;
    cms.create(
        &PostParams {
            dry_run: true,
            ..PostParams::default()
        },
        &cm("dry"),
    )
    .await
    .expect("dry run");
    assert!(cms.get_opt("dry").await.expect("get").is_none());
    assert_eq!(
        cms.list(&ListParams::default())
            .await
            .expect("list")
            .metadata
            .resource_version,
        rv_before
    );

    // Namespace admission.
    let nope: Api<ConfigMap> = Api::namespaced(client.clone(), "nope");
    let err = nope
        .create(&PostParams::default(), &cm("x"))
        .await
        .expect_err("missing namespace");
    assert_eq!(status_code(&err), Some(404));
    sim.shutdown().await;
}

#[tokio::test]
async fn server_side_apply_converges_and_removes_omitted_fields() {
    let sim = cluster("ssa", false).await;
    let client = sim.in_process_client();
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    let pp = PatchParams::apply("ctl");
    let v1 = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1", "b": "2"}});
    let first = cms
        .patch("c", &pp, &Patch::Apply(&v1))
        .await
        .expect("apply creates");
    let v2 = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}});
    let second = cms.patch("c", &pp, &Patch::Apply(&v2)).await.expect("apply 2");
    assert!(
        second.data.as_ref().is_some_and(|d| !d.contains_key("b")),
        "b removed by omission: {:?}",
        second.data
    );
    assert_ne!(first.resource_version(), second.resource_version());
    let third = cms.patch("c", &pp, &Patch::Apply(&v2)).await.expect("apply 3");
    assert_eq!(
        second.resource_version(),
        third.resource_version(),
        "re-applying the same object is a no-op"
    );
    let managers: Vec<String> = third
        .managed_fields()
        .iter()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert_eq!(managers, vec!["ctl".to_owned()]);

    // A conflict with another manager, then force.
    let other =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "9"}});
    let err = cms
        .patch("c", &PatchParams::apply("other"), &Patch::Apply(&other))
        .await
        .expect_err("conflict");
    match &err {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 409);
            assert!(
                s.message.contains("conflict with \"ctl\""),
                "message: {}",
                s.message
            );
        }
        e => panic!("expected an API error, got {e}"),
    }
    let forced = cms
        .patch("c", &PatchParams::apply("other").force(), &Patch::Apply(&other))
        .await
        .expect("force");
    assert_eq!(
        forced.data.as_ref().and_then(|d| d.get("a")).map(String::as_str),
        Some("9")
    );
    let err = cms
        .patch("c", &PatchParams::default(), &Patch::Apply(&other))
        .await
        .expect_err("no manager");
    assert_eq!(status_code(&err), Some(422));
    sim.shutdown().await;
}

#[tokio::test]
async fn watcher_relists_after_compaction_and_resumes_after_dropped_watches() {
    let sim = cluster("watch", false).await;
    let client = sim.client().await.expect("client");
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    for i in 0..3 {
        cms.create(&PostParams::default(), &cm(&format!("pre{i}")))
            .await
            .expect("create");
    }
    let (reader, writer) = reflector::store::<ConfigMap>();
    let inits = Arc::new(AtomicUsize::new(0));
    let inits2 = inits.clone();
    let stream = watcher(cms.clone(), watcher::Config::default()).map(move |e| {
        if matches!(e, Ok(watcher::Event::Init)) {
            inits2.fetch_add(1, Ordering::SeqCst);
        }
        e
    });
    let task = tokio::spawn(reflector(writer, stream).default_backoff().for_each(|_| async {}));
    wait_for(Duration::from_secs(5), "3 objects in the reflector", || async {
        if reader.len() == 3 {
            Ok(())
        } else {
            Err(format!("{} objects", reader.len()))
        }
    })
    .await;
    assert_eq!(inits.load(Ordering::SeqCst), 1);

    // Dropped watches resume from the last RV without a relist.
    sim.faults().drop_watches();
    for i in 0..5 {
        cms.create(&PostParams::default(), &cm(&format!("mid{i}")))
            .await
            .expect("create");
    }
    wait_for(Duration::from_secs(5), "8 objects after resume", || async {
        if reader.len() == 8 {
            Ok(())
        } else {
            Err(format!("{} objects", reader.len()))
        }
    })
    .await;
    assert_eq!(inits.load(Ordering::SeqCst), 1, "a resumed watch must not relist");

    // Compaction + a dropped watch forces the in-stream 410 and a relist.
    sim.faults().compact();
    sim.faults().drop_watches();
    cms.delete("pre0", &DeleteParams::default())
        .await
        .expect("delete");
    wait_for(Duration::from_secs(10), "a relist after 410", || async {
        let n = inits.load(Ordering::SeqCst);
        if n >= 2 && reader.len() == 7 {
            Ok(())
        } else {
            Err(format!("{n} inits, {} objects", reader.len()))
        }
    })
    .await;
    task.abort();
    sim.shutdown().await;
}

#[tokio::test]
async fn streaming_list_ends_with_init_done_and_watch_honours_selectors() {
    let sim = cluster("stream", false).await;
    let client = sim.in_process_client();
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    for i in 0..4 {
        cms.create(&PostParams::default(), &cm(&format!("s{i}")))
            .await
            .expect("create");
    }
    let mut s = watcher(cms.clone(), watcher::Config::default().streaming_lists()).boxed();
    let mut seen = Vec::new();
    while let Ok(Some(e)) = tokio::time::timeout(Duration::from_secs(5), s.next()).await {
        let e = e.expect("event");
        let done = matches!(e, watcher::Event::InitDone);
        seen.push(match e {
            watcher::Event::Init => "Init".to_owned(),
            watcher::Event::InitApply(o) => format!("InitApply({})", o.name_any()),
            watcher::Event::InitDone => "InitDone".to_owned(),
            watcher::Event::Apply(o) => format!("Apply({})", o.name_any()),
            watcher::Event::Delete(o) => format!("Delete({})", o.name_any()),
        });
        if done {
            break;
        }
    }
    assert_eq!(
        seen,
        vec![
            "Init",
            "InitApply(s0)",
            "InitApply(s1)",
            "InitApply(s2)",
            "InitApply(s3)",
            "InitDone"
        ]
    );

    // A label change in and out of a selector is ADDED / DELETED for a selecting watch.
    let mut sel = watcher(cms.clone(), watcher::Config::default().labels("pick=yes"))
        .applied_objects()
        .boxed();
    cms.patch(
        "s1",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"pick": "yes"}}})),
    )
    .await
    .expect("label");
    let got = tokio::time::timeout(Duration::from_secs(5), sel.next())
        .await
        .expect("event in time");
    assert_eq!(
        got.and_then(Result::ok).map(|o| o.name_any()).as_deref(),
        Some("s1")
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn controller_with_finalizer_cleans_up_before_deletion() {
    let sim = cluster("ctrl", false).await;
    let client = sim.client().await.expect("client");
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let cleaned = Arc::new(AtomicUsize::new(0));
    let reconciles = Arc::new(AtomicUsize::new(0));
    struct Ctx {
        client: Client,
        cleaned: Arc<AtomicUsize>,
        reconciles: Arc<AtomicUsize>,
    }
    #[derive(Debug, thiserror::Error)]
    #[error("{0}")]
    struct E(String);
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        cleaned: cleaned.clone(),
        reconciles: reconciles.clone(),
    });
    let reconcile = |obj: Arc<ConfigMap>, ctx: Arc<Ctx>| async move {
        ctx.reconciles.fetch_add(1, Ordering::SeqCst);
        let api: Api<ConfigMap> = Api::default_namespaced(ctx.client.clone());
        let ctx2 = ctx.clone();
        finalizer(&api, "nave.dev/test", obj, |ev| async move {
            let children: Api<ConfigMap> = Api::default_namespaced(ctx2.client.clone());
            match ev {
                FinalizerEvent::Apply(o) => {
                    let child = json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": format!("{}-child", o.name_any()),
                            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": o.name_any(), "uid": o.uid(), "controller": true}]},
                        "data": {"from": o.name_any()}});
                    children
                        .patch(&format!("{}-child", o.name_any()), &PatchParams::apply("test-ctl").force(), &Patch::Apply(child))
                        .await
                        .map_err(|e| E(e.to_string()))?;
                    Ok(Action::await_change())
                }
                FinalizerEvent::Cleanup(_) => {
                    ctx2.cleaned.fetch_add(1, Ordering::SeqCst);
                    Ok(Action::await_change())
                }
            }
        })
        .await
        .map_err(|e: kube::runtime::finalizer::Error<E>| E(e.to_string()))
    };
    let controller = Controller::new(cms.clone(), watcher::Config::default().labels("managed=yes"))
        .owns(cms.clone(), watcher::Config::default())
        .run(
            reconcile,
            |_, _: &E, _| Action::requeue(Duration::from_secs(1)),
            ctx,
        )
        .for_each(|_| async {});
    let task = tokio::spawn(controller);

    let mut parent = cm("parent");
    parent.metadata.labels = Some([("managed".to_owned(), "yes".to_owned())].into());
    cms.create(&PostParams::default(), &parent)
        .await
        .expect("create parent");
    wait_for(Duration::from_secs(10), "the finalizer and the child", || async {
        let p = cms.get("parent").await.map_err(|e| e.to_string())?;
        let child = cms.get_opt("parent-child").await.map_err(|e| e.to_string())?;
        if p.finalizers().contains(&"nave.dev/test".to_owned()) && child.is_some() {
            Ok(())
        } else {
            Err(format!(
                "finalizers {:?}, child {}",
                p.finalizers(),
                child.is_some()
            ))
        }
    })
    .await;
    let settled = reconciles.load(Ordering::SeqCst);
    cms.delete("parent", &DeleteParams::default())
        .await
        .expect("delete parent");
    wait_for(
        Duration::from_secs(10),
        "parent and child gone after cleanup",
        || async {
            let p = cms.get_opt("parent").await.map_err(|e| e.to_string())?;
            let c = cms.get_opt("parent-child").await.map_err(|e| e.to_string())?;
            if p.is_none() && c.is_none() {
                Ok(())
            } else {
                Err(format!("parent {}, child {}", p.is_some(), c.is_some()))
            }
        },
    )
    .await;
    assert_eq!(cleaned.load(Ordering::SeqCst), 1);
    assert!(
        settled <= 6,
        "the controller settled in few reconciles, saw {settled}"
    );
    task.abort();
    sim.shutdown().await;
}

#[tokio::test]
async fn crds_register_validate_prune_and_clean_up() {
    let sim = cluster("crd", false).await;
    let client = sim.client().await.expect("client");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"]},
            "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.size", "statusReplicasPath": ".status.size"}},
                "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}],
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"size": {"type": "integer", "default": 1, "minimum": 0}, "color": {"type": "string"}}},
                    "status": {"type": "object", "properties": {"size": {"type": "integer"}}}}}}}]}
    }))
    .expect("crd");
    crds.create(&PostParams::default(), &crd)
        .await
        .expect("create crd");
    tokio::time::timeout(
        Duration::from_secs(2),
        await_condition(
            crds.clone(),
            "widgets.example.com",
            conditions::is_crd_established(),
        ),
    )
    .await
    .expect("established in time")
    .expect("await");
    let discovery = Discovery::new(client.clone()).run().await.expect("discovery");
    assert!(
        discovery.groups().any(|g| g.name() == "example.com"),
        "discovery is live"
    );

    let gvk = GroupVersionKind::gvk("example.com", "v1alpha1", "Widget");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "widgets");
    let widgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    let w: DynamicObject =
        serde_json::from_value(json!({"apiVersion": "example.com/v1alpha1", "kind": "Widget",
        "metadata": {"name": "w1"}, "spec": {"color": "red", "bogus": 1}, "status": {"size": 5}}))
        .expect("w");
    let created = widgets
        .create(&PostParams::default(), &w)
        .await
        .expect("create widget");
    assert_eq!(created.data["spec"]["size"], 1, "defaulted");
    assert!(created.data["spec"].get("bogus").is_none(), "pruned");
    assert!(created.data.get("status").is_none(), "status dropped on create");
    let bad: DynamicObject =
        serde_json::from_value(json!({"apiVersion": "example.com/v1alpha1", "kind": "Widget",
        "metadata": {"name": "w2"}, "spec": {"size": "big"}}))
        .expect("w2");
    match widgets.create(&PostParams::default(), &bad).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 422);
            assert!(
                s.message.contains("spec.size"),
                "message names the field: {}",
                s.message
            );
        }
        other => panic!("expected 422, got {other:?}"),
    }
    let mut no_rv = created.clone();
    no_rv.metadata.resource_version = None;
    let err = widgets
        .replace("w1", &PostParams::default(), &no_rv)
        .await
        .expect_err("CR PUT needs RV");
    assert_eq!(status_code(&err), Some(422));
    let scaled = widgets
        .patch_scale(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 4}})),
        )
        .await
        .expect("scale");
    assert_eq!(scaled.spec.as_ref().and_then(|s| s.replicas), Some(4));
    let err = widgets
        .patch(
            "w1",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"size": 2}})),
        )
        .await
        .expect_err("SMP on a CR");
    assert_eq!(status_code(&err), Some(415));

    crds.delete("widgets.example.com", &DeleteParams::default())
        .await
        .expect("delete crd");
    wait_for(Duration::from_secs(5), "the CRD and its objects gone", || async {
        let c = crds
            .get_opt("widgets.example.com")
            .await
            .map_err(|e| e.to_string())?;
        if c.is_none() {
            Ok(())
        } else {
            Err("CRD still there".to_owned())
        }
    })
    .await;
    let err = widgets
        .list(&ListParams::default())
        .await
        .expect_err("endpoint gone");
    assert_eq!(status_code(&err), Some(404));
    sim.shutdown().await;
}

#[tokio::test]
async fn garbage_collection_and_namespace_deletion() {
    let sim = cluster("gc", false).await;
    let client = sim.in_process_client();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let owner = cms
        .create(&PostParams::default(), &cm("owner"))
        .await
        .expect("owner");
    for i in 0..3 {
        let dep: ConfigMap = serde_json::from_value(json!({"metadata": {"name": format!("dep{i}"),
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.uid(), "blockOwnerDeletion": true}]}}))
        .expect("dep");
        cms.create(&PostParams::default(), &dep).await.expect("dependent");
    }
    cms.delete("owner", &DeleteParams::foreground())
        .await
        .expect("foreground delete");
    wait_for(Duration::from_secs(5), "owner and dependents gone", || async {
        let n = cms
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?
            .items
            .len();
        if n == 0 {
            Ok(())
        } else {
            Err(format!("{n} configmaps left"))
        }
    })
    .await;

    let nss: Api<Namespace> = Api::all(client.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "team-a"}})).expect("ns"),
    )
    .await
    .expect("namespace");
    let in_ns: Api<ConfigMap> = Api::namespaced(client.clone(), "team-a");
    in_ns
        .create(&PostParams::default(), &cm("x"))
        .await
        .expect("cm in ns");
    nss.delete("team-a", &DeleteParams::default())
        .await
        .expect("delete ns");
    wait_for(Duration::from_secs(5), "namespace gone", || async {
        match nss.get_opt("team-a").await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(n) => Err(format!("phase {:?}", n.status.and_then(|s| s.phase))),
        }
    })
    .await;
    let ks = nss.get("kube-system").await.expect("kube-system");
    assert!(ks.uid().is_some());
    sim.shutdown().await;
}

#[tokio::test]
async fn recorder_events_show_up_in_the_core_view() {
    use k8s_openapi::api::core::v1::Event as CoreEvent;
    use kube::runtime::events::{Event, EventType, Recorder, Reporter};
    let sim = cluster("events", false).await;
    let client = sim.in_process_client();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let c = cms
        .create(&PostParams::default(), &cm("evented"))
        .await
        .expect("create");
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "nave-test".into(),
            instance: None,
        },
    );
    let ev = Event {
        type_: EventType::Normal,
        reason: "Reconciled".into(),
        note: Some("all good".into()),
        action: "Reconcile".into(),
        secondary: None,
    };
    recorder.publish(&ev, &c.object_ref(&())).await.expect("publish");
    recorder
        .publish(&ev, &c.object_ref(&()))
        .await
        .expect("publish again (series)");
    let core: Api<CoreEvent> = Api::default_namespaced(client);
    let evs = core
        .list(&ListParams::default().fields(&format!(
            "involvedObject.name=evented,involvedObject.uid={}",
            c.uid().unwrap_or_default()
        )))
        .await
        .expect("core events");
    assert_eq!(evs.items.len(), 1, "one event with a series: {:?}", evs.items);
    let e = &evs.items[0];
    assert_eq!(e.reason.as_deref(), Some("Reconciled"));
    assert_eq!(e.message.as_deref(), Some("all good"));
    assert_eq!(
        e.source.as_ref().and_then(|s| s.component.as_deref()),
        Some("nave-test")
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn tls_with_a_real_ca_and_faults() {
    let config = nave_sim::ClusterConfig {
        name: "tls".into(),
        node_pools: vec![],
        ..Default::default()
    };
    let sim = nave_sim::SimCluster::start(
        config,
        nave_sim::ServeOptions {
            tls: true,
            control_plane: false,
            ..Default::default()
        },
    )
    .await
    .expect("tls cluster");
    assert!(sim.url().starts_with("https://127.0.0.1:"));
    assert!(sim.kubeconfig().contains("certificate-authority-data"));
    let client = sim.client().await.expect("client");
    let nss: Api<Namespace> = Api::all(client.clone());
    let names: Vec<String> = nss
        .list(&ListParams::default())
        .await
        .expect("list over TLS")
        .iter()
        .map(|n| n.name_any())
        .collect();
    assert_eq!(
        names,
        vec!["default", "kube-node-lease", "kube-public", "kube-system"]
    );
    let discovery = Discovery::new(client.clone())
        .run_aggregated()
        .await
        .expect("aggregated discovery");
    assert!(discovery.groups().any(|g| g.name() == "apps"));

    // (kube-rs retries 429/503 by itself, so inject a 500 to see it.)
    sim.faults().fail_next(1, 500);
    let err = nss.get("default").await.expect_err("injected 500");
    assert_eq!(status_code(&err), Some(500));
    assert!(nss.get("default").await.is_ok(), "only the next request fails");

    sim.faults().stop();
    assert!(!sim.faults().is_running());
    let err = nss.get("default").await.expect_err("listener closed");
    assert!(
        status_code(&err).is_none(),
        "a transport error, not a Status: {err}"
    );
    sim.faults().start().await.expect("restart");
    wait_for(
        Duration::from_secs(5),
        "the API back on the same port",
        || async { nss.get("default").await.map(|_| ()).map_err(|e| e.to_string()) },
    )
    .await;
    sim.shutdown().await;
}
