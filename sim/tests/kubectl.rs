//! kubectl conformance: the real `kubectl.1.32` against nave-sim, with a per-run `--cache-dir`.
//!
//! These tests FAIL when kubectl 1.32 is not installed; set `NAVE_SKIP_KUBECTL=1` to skip them
//! explicitly (they then print that they skipped).

#[path = "support/helpers.rs"]
mod helpers;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use helpers::{cluster, wait_for};
use nave_sim::SimCluster;
use nave_sim::kubectl::find_kubectl;
use tokio::io::AsyncBufReadExt;

/// kubectl, or `None` when skipping was asked for; panics when it is missing otherwise.
fn kubectl_or_skip(test: &str) -> Option<PathBuf> {
    if std::env::var("NAVE_SKIP_KUBECTL").as_deref() == Ok("1") {
        eprintln!("SKIPPED {test}: NAVE_SKIP_KUBECTL=1");
        return None;
    }
    match find_kubectl() {
        Some(p) => Some(p),
        None => panic!(
            "kubectl 1.32 (`kubectl.1.32`) is not installed: install the kubectl package, or set NAVE_SKIP_KUBECTL=1 to skip the kubectl tests"
        ),
    }
}

struct Kubectl {
    bin: PathBuf,
    dir: tempfile::TempDir,
    kubeconfig: PathBuf,
}

#[derive(Debug)]
struct Out {
    ok: bool,
    stdout: String,
    stderr: String,
}

impl Kubectl {
    fn new(bin: PathBuf, sim: &SimCluster) -> Kubectl {
        let dir = tempfile::tempdir().expect("tempdir");
        let kubeconfig = dir.path().join("kubeconfig");
        sim.write_kubeconfig(&kubeconfig).expect("kubeconfig");
        Kubectl { bin, dir, kubeconfig }
    }

    fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut c = tokio::process::Command::new(&self.bin);
        // The cache flag goes first: whatever follows a `--` belongs to the container command.
        c.arg("--cache-dir")
            .arg(self.dir.path().join("cache"))
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", self.dir.path())
            .kill_on_drop(true);
        c
    }

    async fn run(&self, args: &[&str]) -> Out {
        let out = tokio::time::timeout(Duration::from_secs(60), self.command(args).output())
            .await
            .unwrap_or_else(|_| panic!("kubectl {args:?} did not finish in 60s"))
            .expect("kubectl runs");
        Out {
            ok: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Runs and requires success.
    async fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args).await;
        assert!(
            o.ok,
            "kubectl {args:?} failed:\nstdout: {}\nstderr: {}",
            o.stdout, o.stderr
        );
        o.stdout
    }

    /// Runs and requires failure; returns stderr.
    async fn fails(&self, args: &[&str]) -> String {
        let o = self.run(args).await;
        assert!(
            !o.ok,
            "kubectl {args:?} should have failed, printed: {}",
            o.stdout
        );
        o.stderr
    }

    fn file(&self, name: &str, text: &str) -> String {
        let p = self.dir.path().join(name);
        std::fs::write(&p, text).expect("write manifest");
        p.display().to_string()
    }
}

const DEPLOY: &str = "apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels:
    app: web
spec:
  replicas: 2
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
      - name: nginx
        image: nginx:1.25
        resources:
          requests:
            cpu: 100m
            memory: 64Mi
";

fn contains_all(haystack: &str, needles: &[&str]) -> bool {
    needles.iter().all(|n| haystack.contains(n))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_get_describe_scale_and_rollout_on_builtins() {
    let Some(bin) = kubectl_or_skip("kubectl_apply_get_describe_scale_and_rollout_on_builtins") else {
        return;
    };
    let sim = cluster("kctl", true).await;
    let k = Kubectl::new(bin, &sim);

    let ns = k.ok(&["get", "ns"]).await;
    assert!(
        contains_all(&ns, &["default", "kube-system", "kube-public", "kube-node-lease"]),
        "namespaces: {ns}"
    );
    let v = k.ok(&["version", "-o", "json"]).await;
    assert!(v.contains("v1.32.0-kubesim"), "server version: {v}");

    let deploy = k.file("deploy.yaml", DEPLOY);
    assert!(
        k.ok(&["apply", "-f", &deploy])
            .await
            .contains("deployment.apps/web created")
    );
    assert!(
        k.ok(&["apply", "-f", &deploy])
            .await
            .contains("deployment.apps/web unchanged")
    );
    let edited = k.file("deploy3.yaml", &DEPLOY.replace("replicas: 2", "replicas: 3"));
    assert!(
        k.ok(&["apply", "-f", &edited])
            .await
            .contains("deployment.apps/web configured")
    );
    let surge = k
        .ok(&[
            "get",
            "deploy",
            "web",
            "-o",
            "jsonpath={.spec.strategy.rollingUpdate.maxSurge}",
        ])
        .await;
    assert_eq!(surge, "25%");

    let rollout = k.ok(&["rollout", "status", "deploy/web", "--timeout=60s"]).await;
    assert!(rollout.contains("successfully rolled out"), "rollout: {rollout}");
    k.ok(&["wait", "--for=condition=Available", "deploy/web", "--timeout=30s"])
        .await;
    k.ok(&[
        "wait",
        "--for=condition=Ready",
        "pod",
        "-l",
        "app=web",
        "--timeout=30s",
    ])
    .await;

    let table = k.ok(&["get", "deploy"]).await;
    let header: Vec<&str> = table
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        vec!["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"],
        "table: {table}"
    );
    assert!(table.contains("3/3"), "ready column: {table}");
    let wide = k.ok(&["get", "deploy", "-o", "wide"]).await;
    assert!(
        contains_all(
            &wide,
            &["CONTAINERS", "IMAGES", "SELECTOR", "nginx:1.25", "app=web"]
        ),
        "wide: {wide}"
    );
    let pods = k.ok(&["get", "pods", "-o", "wide"]).await;
    assert!(
        contains_all(
            &pods,
            &["READY", "STATUS", "RESTARTS", "IP", "NODE", "1/1", "Running"]
        ),
        "pods: {pods}"
    );
    let nodes = k.ok(&["get", "nodes"]).await;
    assert!(
        contains_all(
            &nodes,
            &["STATUS", "ROLES", "VERSION", "Ready", "v1.32.0-kubesim"]
        ),
        "nodes: {nodes}"
    );
    let all = k.ok(&["get", "deploy", "-A", "--show-labels"]).await;
    assert!(
        contains_all(&all, &["NAMESPACE", "LABELS", "default", "app=web"]),
        "-A --show-labels: {all}"
    );
    let names = k.ok(&["get", "deploy", "-o", "name"]).await;
    assert_eq!(names.trim(), "deployment.apps/web");
    let json: serde_json::Value =
        serde_json::from_str(&k.ok(&["get", "deploy", "web", "-o", "json"]).await).expect("json");
    assert_eq!(json["status"]["availableReplicas"], 3);
    assert!(
        k.ok(&["get", "deploy", "web", "-o", "yaml"])
            .await
            .contains("kind: Deployment")
    );

    // Server-side apply: conflict with kubectl's own client-side manager, then force.
    let err = k.fails(&["apply", "--server-side", "-f", &deploy]).await;
    assert!(
        err.contains("conflict with \"kubectl-client-side-apply\""),
        "conflict: {err}"
    );
    let forced = k
        .ok(&["apply", "--server-side", "--force-conflicts", "-f", &deploy])
        .await;
    assert!(forced.contains("serverside-applied"));
    let rv1 = k
        .ok(&[
            "get",
            "deploy",
            "web",
            "-o",
            "jsonpath={.metadata.resourceVersion}",
        ])
        .await;
    assert!(
        k.ok(&["apply", "--server-side", "-f", &deploy])
            .await
            .contains("serverside-applied")
    );
    let rv2 = k
        .ok(&[
            "get",
            "deploy",
            "web",
            "-o",
            "jsonpath={.metadata.resourceVersion}",
        ])
        .await;
    let gen_before = k
        .ok(&["get", "deploy", "web", "-o", "jsonpath={.metadata.generation}"])
        .await;
    assert!(
        rv1 == rv2 || !gen_before.is_empty(),
        "second server-side apply is a no-op for the spec"
    );

    k.ok(&["label", "deploy", "web", "tier=front"]).await;
    k.ok(&["annotate", "deploy", "web", "note=hi"]).await;
    let gen_after = k
        .ok(&["get", "deploy", "web", "-o", "jsonpath={.metadata.generation}"])
        .await;
    assert_eq!(
        gen_before, gen_after,
        "labels and annotations do not bump generation"
    );
    k.ok(&[
        "patch",
        "deploy",
        "web",
        "--type=merge",
        "-p",
        r#"{"metadata":{"labels":{"x":"1"}}}"#,
    ])
    .await;
    k.ok(&[
        "patch",
        "deploy",
        "web",
        "--type=json",
        "-p",
        r#"[{"op":"replace","path":"/metadata/labels/x","value":"2"}]"#,
    ])
    .await;
    k.ok(&[
        "patch",
        "deploy",
        "web",
        "--type=strategic",
        "-p",
        r#"{"metadata":{"labels":{"x":null}}}"#,
    ])
    .await;
    k.ok(&[
        "patch",
        "deploy",
        "web",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"observedGeneration":1}}"#,
    ])
    .await;
    let labels = k
        .ok(&["get", "deploy", "web", "-o", "jsonpath={.metadata.labels}"])
        .await;
    assert!(
        labels.contains("tier") && !labels.contains("\"x\""),
        "labels: {labels}"
    );

    assert!(
        k.ok(&["scale", "deploy", "web", "--replicas=1"])
            .await
            .contains("deployment.apps/web scaled")
    );
    wait_for(
        Duration::from_secs(20),
        "one pod left after scaling down",
        || async {
            let out = k.run(&["get", "pods", "-l", "app=web", "-o", "name"]).await;
            let n = out.stdout.lines().count();
            if n == 1 {
                Ok(())
            } else {
                Err(format!("{n} pods: {}", out.stdout))
            }
        },
    )
    .await;

    let d = k.ok(&["describe", "deploy", "web"]).await;
    assert!(
        contains_all(
            &d,
            &[
                "Replicas:",
                "NewReplicaSet:",
                "MinimumReplicasAvailable",
                "ScalingReplicaSet"
            ]
        ),
        "describe deploy: {d}"
    );
    let pod = k
        .ok(&[
            "get",
            "pods",
            "-l",
            "app=web",
            "-o",
            "jsonpath={.items[0].metadata.name}",
        ])
        .await;
    let dp = k.ok(&["describe", "pod", &pod]).await;
    assert!(
        contains_all(&dp, &["Status:", "Running", "Node:"]),
        "describe pod: {dp}"
    );
    let node = k
        .ok(&["get", "pod", &pod, "-o", "jsonpath={.spec.nodeName}"])
        .await;
    let dn = k.ok(&["describe", "node", &node]).await;
    assert!(
        contains_all(&dn, &["Capacity:", "Allocatable:", "Non-terminated Pods:", &pod]),
        "describe node: {dn}"
    );

    let err = k.fails(&["get", "deploy", "nope"]).await;
    assert!(
        err.contains(r#"Error from server (NotFound): deployments.apps "nope" not found"#),
        "{err}"
    );
    let err = k.fails(&["create", "cm", "Bad_Name"]).await;
    assert!(
        err.contains(r#"ConfigMap "Bad_Name" is invalid: metadata.name: Invalid value"#),
        "{err}"
    );
    let err = k.fails(&["apply", "-f", &deploy, "-n", "nope"]).await;
    assert!(err.contains(r#"namespaces "nope" not found"#), "{err}");
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_watch_wait_and_delete_cascades() {
    let Some(bin) = kubectl_or_skip("kubectl_watch_wait_and_delete_cascades") else {
        return;
    };
    let sim = cluster("kdel", true).await;
    let k = Kubectl::new(bin, &sim);
    let deploy = k.file("deploy.yaml", DEPLOY);
    k.ok(&["apply", "-f", &deploy]).await;
    k.ok(&["rollout", "status", "deploy/web", "--timeout=60s"]).await;

    // get -w: a header line and a row, then a new row after a change.
    let mut child = k
        .command(&["get", "deploy", "-w"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let mut seen = Vec::new();
    let read = async {
        while let Ok(Some(l)) = lines.next_line().await {
            seen.push(l);
            if seen.len() == 2 {
                k.ok(&["scale", "deploy", "web", "--replicas=3"]).await;
            }
            if seen.len() >= 3 {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(20), read).await;
    let _ = child.kill().await;
    assert!(seen.len() >= 3, "get -w printed: {seen:?}");
    assert!(seen[0].starts_with("NAME"), "header first: {seen:?}");
    assert_eq!(
        seen.iter().filter(|l| l.starts_with("NAME")).count(),
        1,
        "one header only: {seen:?}"
    );

    // Orphan keeps the ReplicaSet and its pods, without the owner reference.
    let out = k.ok(&["delete", "deploy", "web", "--cascade=orphan"]).await;
    assert!(out.contains(r#"deployment.apps "web" deleted"#));
    let owners = k
        .ok(&["get", "rs", "-o", "jsonpath={.items[*].metadata.ownerReferences}"])
        .await;
    assert!(
        owners.trim().is_empty(),
        "ReplicaSets keep no owner after orphaning: {owners}"
    );
    let rs = k.ok(&["get", "rs", "-o", "name"]).await;
    assert!(!rs.trim().is_empty(), "orphaned ReplicaSet still there");
    k.ok(&["delete", "rs", "--all"]).await;
    wait_for(
        Duration::from_secs(20),
        "pods gone with their ReplicaSet",
        || async {
            let out = k.run(&["get", "pods", "-o", "name"]).await;
            if out.stdout.trim().is_empty() {
                Ok(())
            } else {
                Err(out.stdout)
            }
        },
    )
    .await;

    // Foreground and background both remove everything.
    for cascade in ["--cascade=foreground", "--cascade=background"] {
        k.ok(&["apply", "-f", &deploy]).await;
        k.ok(&["rollout", "status", "deploy/web", "--timeout=60s"]).await;
        k.ok(&["delete", "deploy", "web", cascade]).await;
        wait_for(
            Duration::from_secs(20),
            "deployment, replicasets and pods gone",
            || async {
                let out = k.run(&["get", "deploy,rs,pods", "-o", "name"]).await;
                if out.stdout.trim().is_empty() {
                    Ok(())
                } else {
                    Err(out.stdout)
                }
            },
        )
        .await;
    }

    // wait --for=delete on a pod deleted with a grace period.
    k.ok(&["apply", "-f", &deploy]).await;
    k.ok(&["rollout", "status", "deploy/web", "--timeout=60s"]).await;
    let pod = k
        .ok(&["get", "pods", "-o", "jsonpath={.items[0].metadata.name}"])
        .await;
    k.ok(&["delete", "pod", &pod, "--wait=false"]).await;
    k.ok(&["wait", "--for=delete", &format!("pod/{pod}"), "--timeout=20s"])
        .await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_on_the_nave_crds() {
    let Some(bin) = kubectl_or_skip("kubectl_on_the_nave_crds") else {
        return;
    };
    let sim = cluster("kcrd", false).await;
    let k = Kubectl::new(bin, &sim);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let files = nave_crd_files();
    for f in &files {
        let out = k.ok(&["apply", "-f", &f.display().to_string()]).await;
        assert!(out.contains("created"), "{}: {out}", f.display());
        // Server-side apply of the same CRD is accepted too.
        k.ok(&["apply", "--server-side", "-f", &f.display().to_string()])
            .await;
    }
    let crd_list = k.ok(&["get", "crd"]).await;
    assert!(
        crd_list.contains("multiclusterdeployments.nave.dev"),
        "{crd_list}"
    );
    k.ok(&[
        "wait",
        "--for=condition=Established",
        "crd/multiclusterdeployments.nave.dev",
        "--timeout=10s",
    ])
    .await;

    let web = root.join("examples").join("web.yaml");
    let clusters = root.join("examples").join("clusters.yaml");
    if clusters.is_file() {
        k.ok(&["apply", "-f", &clusters.display().to_string()]).await;
        let wcl = k.ok(&["get", "wcl"]).await;
        assert!(wcl.contains("eu-1"), "workload clusters: {wcl}");
    }
    if web.is_file() {
        k.ok(&["apply", "-f", &web.display().to_string()]).await;
        let mcd = k.ok(&["get", "mcd"]).await;
        assert!(
            mcd.lines().next().is_some_and(|h| h.starts_with("NAME")),
            "mcd table: {mcd}"
        );
        assert!(mcd.contains("web"), "{mcd}");
        k.ok(&["label", "mcd", "web", "team=a"]).await;
        k.ok(&[
            "patch",
            "mcd",
            "web",
            "--type=merge",
            "-p",
            r#"{"spec":{"replicas":4}}"#,
        ])
        .await;
        let r = k
            .ok(&["get", "mcd", "web", "-o", "jsonpath={.spec.replicas}"])
            .await;
        assert_eq!(r, "4");
        k.ok(&["scale", "mcd", "web", "--replicas=5"]).await;
        let r = k
            .ok(&["get", "mcd", "web", "-o", "jsonpath={.spec.replicas}"])
            .await;
        assert_eq!(r, "5");
        k.ok(&[
            "patch",
            "mcd",
            "web",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"observedGeneration":1,"conditions":[{"type":"Available","status":"True","reason":"Test","message":"ok","lastTransitionTime":"2025-01-01T00:00:00Z","observedGeneration":3}]}}"#,
        ])
        .await;
        k.ok(&["describe", "mcd", "web"]).await;
        k.ok(&["delete", "mcd", "web"]).await;
    }
    let out = k.ok(&["delete", "-f", &files[0].display().to_string()]).await;
    assert!(out.contains("deleted"), "{out}");
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_on_a_probe_crd_with_printer_columns_and_strict_validation() {
    let Some(bin) = kubectl_or_skip("kubectl_on_a_probe_crd_with_printer_columns_and_strict_validation")
    else {
        return;
    };
    let sim = cluster("kwidget", false).await;
    let k = Kubectl::new(bin, &sim);
    let crd = k.file(
        "crd.yaml",
        "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wd]}
  versions:
  - name: v1alpha1
    served: true
    storage: true
    subresources: {status: {}}
    additionalPrinterColumns:
    - {name: Size, type: integer, jsonPath: .spec.size}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer, default: 1}
              color: {type: string}
          status:
            type: object
            x-kubernetes-preserve-unknown-fields: true
",
    );
    let widget = k.file("w.yaml", "apiVersion: example.com/v1alpha1\nkind: Widget\nmetadata:\n  name: w1\nspec:\n  size: 3\n  color: red\n");
    k.ok(&["apply", "-f", &crd]).await;
    assert!(
        k.ok(&["apply", "-f", &widget])
            .await
            .contains("widget.example.com/w1 created")
    );
    let t = k.ok(&["get", "widgets"]).await;
    let header: Vec<&str> = t.lines().next().unwrap_or_default().split_whitespace().collect();
    assert_eq!(header, vec!["NAME", "SIZE"], "printer columns replace AGE: {t}");
    assert!(t.contains("w1") && t.contains('3'), "{t}");
    let typo = k.file(
        "typo.yaml",
        "apiVersion: example.com/v1alpha1\nkind: Widget\nmetadata:\n  name: w2\nspec:\n  colr: red\n",
    );
    let err = k.fails(&["apply", "-f", &typo]).await;
    assert!(
        err.contains(r#"strict decoding error: unknown field "spec.colr""#),
        "{err}"
    );
    let nosize = k.file(
        "w3.yaml",
        "apiVersion: example.com/v1alpha1\nkind: Widget\nmetadata:\n  name: w3\nspec:\n  color: blue\n",
    );
    k.ok(&["apply", "--server-side", "-f", &nosize]).await;
    assert_eq!(
        k.ok(&["get", "wd", "w3", "-o", "jsonpath={.spec.size}"]).await,
        "1"
    );
    k.ok(&[
        "patch",
        "widget",
        "w1",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"x":1}}"#,
    ])
    .await;
    assert_eq!(
        k.ok(&["get", "widget", "w1", "-o", "jsonpath={.status.x}"]).await,
        "1"
    );
    k.ok(&["delete", "crd", "widgets.example.com"]).await;
    wait_for(Duration::from_secs(10), "widgets gone from discovery", || async {
        let o = k.run(&["get", "crd", "-o", "name"]).await;
        if o.stdout.contains("widgets") {
            Err(o.stdout)
        } else {
            Ok(())
        }
    })
    .await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_strict_tokens_reject_unknown_tokens() {
    let Some(bin) = kubectl_or_skip("kubectl_strict_tokens_reject_unknown_tokens") else {
        return;
    };
    let config = nave_sim::ClusterConfig {
        name: "strict".into(),
        node_pools: vec![],
        ..Default::default()
    };
    // client-go sends bearer tokens only over TLS.
    let opts = nave_sim::ServeOptions {
        control_plane: false,
        tls: true,
        token: "wrong".into(),
        strict_tokens: Some([("right".to_owned(), "admin".to_owned())].into()),
        ..Default::default()
    };
    let sim = SimCluster::start(config, opts).await.expect("start");
    let k = Kubectl::new(bin, &sim);
    let err = k.fails(&["get", "ns"]).await;
    // Discovery fails first, as against a real apiserver with a bad token.
    assert!(
        err.contains("error: You must be logged in to the server"),
        "{err}"
    );
    assert!(
        k.ok(&["get", "ns", "--token", "right"])
            .await
            .contains("kube-system")
    );
    sim.shutdown().await;
}

/// Whitespace collapsed to single spaces, so that checks do not depend on where kubectl wraps.
fn flat(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn nave_crd_files() -> Vec<PathBuf> {
    let crds = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("crds");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&crds)
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    assert!(!files.is_empty(), "no CRDs in {}", crds.display());
    files
}

fn gadget_crd(extra_field: &str) -> String {
    format!(
        "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.example.com
spec:
  group: example.com
  scope: Cluster
  names: {{plural: gadgets, singular: gadget, kind: Gadget}}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        description: A gadget for the explain test.
        properties:
          spec:
            type: object
            description: What the gadget should be.
            properties:
              size: {{type: integer, description: How big the gadget is.}}
{extra_field}"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_explain_shows_the_nave_crds_builtins_and_crd_updates() {
    let Some(bin) = kubectl_or_skip("kubectl_explain_shows_the_nave_crds_builtins_and_crd_updates") else {
        return;
    };
    let sim = cluster("kexplain", false).await;
    let k = Kubectl::new(bin, &sim);
    for f in nave_crd_files() {
        k.ok(&["apply", "-f", &f.display().to_string()]).await;
    }
    // Short names resolve through discovery, which kubectl caches: refresh it as a user would.
    k.ok(&["api-resources"]).await;

    let placement = k.ok(&["explain", "mcd.spec.placement"]).await;
    let text = flat(&placement);
    for expected in [
        "GROUP: nave.dev",
        "KIND: MultiClusterDeployment",
        "VERSION: v1alpha1",
        "FIELD: placement <Object>",
        "Which clusters may run the replicas and how they are divided. Defaults to the `worst-fit` policy over all schedulable clusters",
        // kubectl lists the first four values of an enum, then "....".
        "policy <string> enum: worst-fit, best-fit, proximity, spread, ....",
        "- `everywhere` runs `spec.replicas` in EVERY selected cluster (per cluster, not in total)",
        "- `best-fit` packs them into the clusters with the least room that still fits.",
        "clusterSelector <Object>",
        "maxClusters <integer>",
        "weights <map[string]integer>",
        "rescheduling <Object>",
    ] {
        assert!(
            text.contains(expected),
            "explain mcd.spec.placement lacks {expected:?}:\n{placement}"
        );
    }

    let mcd = flat(&k.ok(&["explain", "mcd"]).await);
    for expected in [
        "A Deployment whose replicas Nave divides among workload clusters.",
        "apiVersion <string>",
        "metadata <ObjectMeta> Standard object's metadata.",
        "spec <Object> -required-",
        "status <Object>",
    ] {
        assert!(mcd.contains(expected), "explain mcd lacks {expected:?}: {mcd}");
    }
    let name = flat(&k.ok(&["explain", "mcd.metadata.name"]).await);
    assert!(
        name.contains("FIELD: name <string>"),
        "explain mcd.metadata.name: {name}"
    );

    let wcl = flat(&k.ok(&["explain", "wcl.status"]).await);
    for expected in [
        "KIND: WorkloadCluster",
        "capacity <Object> Summary of the cluster's capacity from the last heartbeat. Status is written at a limited rate",
        "conditions <[]Object>",
        "lastHeartbeatTime <string>",
    ] {
        assert!(
            wcl.contains(expected),
            "explain wcl.status lacks {expected:?}: {wcl}"
        );
    }

    let svc = k.ok(&["explain", "mcsvc.spec", "--recursive"]).await;
    for expected in [
        "ports\t<[]Object>",
        "targetPort",
        "clusterSelector\t<Object>",
        "matchLabels",
    ] {
        assert!(
            svc.contains(expected),
            "explain mcsvc.spec --recursive lacks {expected:?}:\n{svc}"
        );
    }
    assert!(
        svc.contains("enum: Cluster, Local\n") && !svc.contains("<no value>"),
        "optional enums list their values only:\n{svc}"
    );

    let pods = flat(&k.ok(&["explain", "pods.spec"]).await);
    for expected in [
        "KIND: Pod",
        "FIELD: spec <PodSpec>",
        "containers <[]Container> -required-",
    ] {
        assert!(
            pods.contains(expected),
            "explain pods.spec lacks {expected:?}: {pods}"
        );
    }
    let deploy = flat(&k.ok(&["explain", "deployment.spec.replicas"]).await);
    assert!(
        deploy.contains("FIELD: replicas <integer>"),
        "explain deployment.spec.replicas: {deploy}"
    );

    // A CRD update shows in the next explain: the document's hash in /openapi/v3 changes, so
    // kubectl does not use what it fetched before.
    let crd = k.file("gadget.yaml", &gadget_crd(""));
    k.ok(&["apply", "-f", &crd]).await;
    k.ok(&["api-resources"]).await;
    let index = |raw: String| -> String {
        let v: serde_json::Value = serde_json::from_str(&raw).expect("/openapi/v3 is JSON");
        v["paths"]["apis/example.com/v1"]["serverRelativeURL"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let url_before = index(k.ok(&["get", "--raw", "/openapi/v3"]).await);
    assert!(
        url_before.contains("hash="),
        "example.com/v1 in /openapi/v3: {url_before:?}"
    );
    let before = flat(&k.ok(&["explain", "gadgets.spec"]).await);
    assert!(
        before.contains("size <integer> How big the gadget is.") && !before.contains("color"),
        "explain gadgets.spec before the update: {before}"
    );
    let updated = k.file(
        "gadget2.yaml",
        &gadget_crd("              color: {type: string, description: The colour of the gadget.}\n"),
    );
    k.ok(&["apply", "-f", &updated]).await;
    let url_after = index(k.ok(&["get", "--raw", "/openapi/v3"]).await);
    assert_ne!(url_before, url_after, "the hash changes with the CRD");
    let after = flat(&k.ok(&["explain", "gadgets.spec"]).await);
    assert!(
        after.contains("color <string> The colour of the gadget."),
        "explain gadgets.spec after the update: {after}"
    );
    let doc = k.ok(&["get", "--raw", "/openapi/v3/apis/example.com/v1"]).await;
    let doc: serde_json::Value = serde_json::from_str(&doc).expect("document is JSON");
    assert_eq!(
        doc["components"]["schemas"]["com.example.v1.Gadget"]["x-kubernetes-group-version-kind"],
        serde_json::json!([{"group": "example.com", "kind": "Gadget", "version": "v1"}]),
        "the kind's schema is named and tagged as the API server does"
    );
    sim.shutdown().await;
}

/// Every `kubectl create <kind>` form that sends a typed object (as protobuf), and what of it
/// must have arrived.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_sends_protobuf_for_every_typed_kind() {
    let Some(bin) = kubectl_or_skip("kubectl_create_sends_protobuf_for_every_typed_kind") else {
        return;
    };
    let sim = cluster("kcreate", false).await;
    let k = Kubectl::new(bin, &sim);
    let cases: &[(&[&str], &str, &str, &str)] = &[
        (
            &[
                "deployment",
                "web",
                "--image=nginx:1.25",
                "--replicas=2",
                "--port=80",
            ],
            "deploy/web",
            "{.spec.replicas} {.spec.template.spec.containers[0].image} {.spec.template.spec.containers[0].ports[0].containerPort} {.spec.selector.matchLabels.app}",
            "2 nginx:1.25 80 web",
        ),
        (
            &["deployment", "idle", "--image=nginx", "--replicas=0"],
            "deploy/idle",
            "{.spec.replicas}",
            "0",
        ),
        (
            &["service", "clusterip", "cip", "--tcp=80:8080"],
            "svc/cip",
            "{.spec.type} {.spec.ports[0].port} {.spec.ports[0].targetPort} {.spec.selector.app}",
            "ClusterIP 80 8080 cip",
        ),
        (
            &["service", "nodeport", "np", "--tcp=80:8080", "--node-port=30080"],
            "svc/np",
            "{.spec.type} {.spec.ports[0].nodePort}",
            "NodePort 30080",
        ),
        (
            &["service", "loadbalancer", "lb", "--tcp=443:https"],
            "svc/lb",
            "{.spec.type} {.spec.ports[0].targetPort}",
            "LoadBalancer https",
        ),
        (
            &["service", "externalname", "ext", "--external-name=db.example.com"],
            "svc/ext",
            "{.spec.type} {.spec.externalName}",
            "ExternalName db.example.com",
        ),
        (
            &["job", "once", "--image=busybox", "--", "echo", "hi"],
            "job/once",
            "{.spec.template.spec.restartPolicy} {.spec.template.spec.containers[0].command}",
            "Never [\"echo\",\"hi\"]",
        ),
        (
            &["cronjob", "tick", "--image=busybox", "--schedule=*/5 * * * *"],
            "cronjob/tick",
            "{.spec.schedule} {.spec.jobTemplate.spec.template.spec.containers[0].image}",
            "*/5 * * * * busybox",
        ),
        (
            &["role", "reader", "--verb=get,list", "--resource=pods"],
            "role/reader",
            "{.rules[0].verbs} {.rules[0].resources}",
            "[\"get\",\"list\"] [\"pods\"]",
        ),
        (
            &[
                "clusterrole",
                "creader",
                "--verb=get",
                "--resource=deployments.apps",
            ],
            "clusterrole/creader",
            "{.rules[0].apiGroups} {.rules[0].resources}",
            "[\"apps\"] [\"deployments\"]",
        ),
        (
            &["rolebinding", "rb", "--role=reader", "--user=alice"],
            "rolebinding/rb",
            "{.roleRef.kind} {.roleRef.name} {.subjects[0].kind} {.subjects[0].name}",
            "Role reader User alice",
        ),
        (
            &[
                "clusterrolebinding",
                "crb",
                "--clusterrole=creader",
                "--serviceaccount=default:default",
            ],
            "clusterrolebinding/crb",
            "{.roleRef.apiGroup} {.subjects[0].kind} {.subjects[0].namespace}",
            "rbac.authorization.k8s.io ServiceAccount default",
        ),
        (
            &["quota", "q", "--hard=pods=4,requests.cpu=2"],
            "quota/q",
            "{.spec.hard.pods} {.spec.hard.requests\\.cpu}",
            "4 2",
        ),
        (
            &["priorityclass", "high", "--value=1000", "--description=urgent"],
            "priorityclass/high",
            "{.value} {.description} {.preemptionPolicy}",
            "1000 urgent PreemptLowerPriority",
        ),
        (
            &[
                "poddisruptionbudget",
                "pdb",
                "--selector=app=web",
                "--min-available=50%",
            ],
            "pdb/pdb",
            "{.spec.minAvailable} {.spec.selector.matchLabels.app}",
            "50% web",
        ),
        (
            &["ingress", "ing", "--rule=web.example.com/=web:80"],
            "ingress/ing",
            "{.spec.rules[0].host} {.spec.rules[0].http.paths[0].backend.service.name} {.spec.rules[0].http.paths[0].backend.service.port.number}",
            "web.example.com web 80",
        ),
        (
            &["secret", "generic", "creds", "--from-literal=user=admin"],
            "secret/creds",
            "{.data.user}",
            "YWRtaW4=",
        ),
        (
            &["configmap", "conf", "--from-literal=mode=fast"],
            "configmap/conf",
            "{.data.mode}",
            "fast",
        ),
    ];
    for (args, target, jsonpath, want) in cases {
        let mut create = vec!["create"];
        create.extend_from_slice(args);
        k.ok(&create).await;
        let got = k
            .ok(&["get", target, "-o", &format!("jsonpath={jsonpath}")])
            .await;
        assert_eq!(&got, want, "kubectl create {args:?}");
    }
    k.ok(&["create", "serviceaccount", "robot"]).await;
    let default = k.ok(&["create", "token", "default"]).await;
    assert!(
        !default.trim().is_empty(),
        "no token for the default ServiceAccount"
    );
    let token = k.ok(&["create", "token", "robot", "--duration=10m"]).await;
    assert!(!token.trim().is_empty(), "kubectl create token printed nothing");
    sim.shutdown().await;
}

/// A kubectl that cached discovery before a CRD existed still finds it by short name, plural,
/// singular and kind, as against a real API server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_with_a_stale_discovery_cache_finds_a_new_crd_by_short_name() {
    let Some(bin) = kubectl_or_skip("kubectl_with_a_stale_discovery_cache_finds_a_new_crd_by_short_name")
    else {
        return;
    };
    let sim = cluster("kstale", false).await;
    let k = Kubectl::new(bin, &sim);
    k.ok(&["get", "pods"]).await;
    k.ok(&["api-resources"]).await;
    let crd = k.file(
        "gadget.yaml",
        "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget, shortNames: [gdg]}
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
",
    );
    k.ok(&["create", "-f", &crd]).await;
    for name in ["gdg", "gadgets", "gadget", "Gadget", "gadgets.example.com"] {
        let out = k.run(&["get", name]).await;
        assert!(out.ok, "kubectl get {name} failed:\n{}", out.stderr);
        assert!(
            out.stderr.contains("No resources found"),
            "kubectl get {name}: {}",
            out.stderr
        );
    }
    // A second CRD in the group the cache now holds, created by another client, and an object
    // of it applied by kind.
    let other = Kubectl::new(k.bin.clone(), &sim);
    let gizmo = other.file(
        "gizmo.yaml",
        &std::fs::read_to_string(&crd)
            .expect("crd")
            .replace("adget", "izmo")
            .replace("gdg", "gzm"),
    );
    other.ok(&["create", "-f", &gizmo]).await;
    let obj = k.file(
        "g1.yaml",
        "apiVersion: example.com/v1\nkind: Gizmo\nmetadata: {name: g1}\n",
    );
    k.ok(&["apply", "-f", &obj]).await;
    let got = k.ok(&["get", "gzm", "-o", "name"]).await;
    assert_eq!(got.trim(), "gizmo.example.com/g1");
    sim.shutdown().await;
}

/// `kubectl logs` answers as a simulated container; `exec`, `attach` and `port-forward` say why
/// they cannot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_logs_and_exec_on_a_simulated_pod() {
    let Some(bin) = kubectl_or_skip("kubectl_logs_and_exec_on_a_simulated_pod") else {
        return;
    };
    let sim = cluster("klogs", true).await;
    let k = Kubectl::new(bin, &sim);
    k.ok(&["run", "web", "--image=nginx:1.25"]).await;
    k.ok(&["wait", "--for=condition=Ready", "pod/web", "--timeout=30s"])
        .await;
    let logs = k.ok(&["logs", "web"]).await;
    assert!(
        contains_all(
            &logs,
            &["simulated container \"web\"", "image nginx:1.25", "started at"]
        ),
        "logs: {logs}"
    );
    let last = k.ok(&["logs", "web", "--tail=1"]).await;
    assert_eq!(last.lines().count(), 1, "tail: {last}");
    let err = k.fails(&["logs", "web", "-c", "sidecar"]).await;
    assert!(
        err.contains("container sidecar is not valid for pod web"),
        "{err}"
    );
    let err = k.fails(&["logs", "web", "--previous"]).await;
    assert!(
        err.contains("previous terminated container \"web\" in pod \"web\" not found"),
        "{err}"
    );
    let err = k.fails(&["exec", "web", "--", "ls"]).await;
    assert!(
        err.contains("pod web runs in a simulated cluster: there is no container process to exec into"),
        "exec: {err}"
    );
    let err = k.fails(&["logs", "nope"]).await;
    assert!(err.contains("pods \"nope\" not found"), "{err}");
    sim.shutdown().await;
}

/// The objects every real cluster has: the `kubernetes` Service and the APIServices.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_sees_the_kubernetes_service_and_the_api_services() {
    let Some(bin) = kubectl_or_skip("kubectl_sees_the_kubernetes_service_and_the_api_services") else {
        return;
    };
    let sim = cluster("ksys", false).await;
    let k = Kubectl::new(bin, &sim);
    let svc = k
        .ok(&[
            "get",
            "svc",
            "kubernetes",
            "-o",
            "jsonpath={.spec.type} {.spec.clusterIP} {.spec.ports[0].name} {.spec.ports[0].port}",
        ])
        .await;
    assert_eq!(svc, "ClusterIP 10.96.0.1 https 443");
    k.ok(&["get", "endpoints", "kubernetes"]).await;
    k.ok(&["create", "namespace", "team-a"]).await;
    k.ok(&["get", "serviceaccount", "default", "-n", "team-a"]).await;
    k.ok(&["get", "serviceaccount", "default", "-n", "kube-system"])
        .await;
    k.ok(&["get", "endpointslices", "kubernetes"]).await;
    let services = k.ok(&["get", "apiservices", "-o", "name"]).await;
    assert!(
        contains_all(
            &services,
            &[
                "apiservice.apiregistration.k8s.io/v1.\n",
                "apiservice.apiregistration.k8s.io/v1.apps\n"
            ]
        ),
        "{services}"
    );
    let cond = k
        .ok(&[
            "get",
            "apiservice",
            "v1.apps",
            "-o",
            "jsonpath={.status.conditions[0].type}={.status.conditions[0].status}",
        ])
        .await;
    assert_eq!(cond, "Available=True");
    let err = k.fails(&["delete", "apiservice", "v1.apps"]).await;
    assert!(
        err.contains("MethodNotAllowed") || err.contains("not allow"),
        "{err}"
    );
    sim.shutdown().await;
}

const WEBHOOK: &str = "apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: gate
webhooks:
- name: gate.nave.dev
  clientConfig:
    url: URL
  rules:
  - operations: [CREATE]
    apiGroups: ['']
    apiVersions: [v1]
    resources: [pods]
  sideEffects: None
  admissionReviewVersions: [v1]
  failurePolicy: Ignore
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_lists_and_validates_mutating_webhook_configurations() {
    let Some(bin) = kubectl_or_skip("kubectl_applies_lists_and_validates_mutating_webhook_configurations")
    else {
        return;
    };
    let sim = cluster("kwebhook", false).await;
    let k = Kubectl::new(bin, &sim);
    let good = k.file("good.yaml", &WEBHOOK.replace("URL", "https://127.0.0.1:1/mutate"));
    k.ok(&["apply", "-f", &good]).await;
    let ssa = k.file(
        "ssa.yaml",
        &WEBHOOK
            .replace("URL", "https://127.0.0.1:1/mutate")
            .replace("name: gate\n", "name: gate-ssa\n"),
    );
    k.ok(&["apply", "--server-side", "-f", &ssa]).await;
    k.ok(&["apply", "--server-side", "-f", &ssa]).await;
    let listed = k.ok(&["get", "mutatingwebhookconfigurations"]).await;
    assert!(
        contains_all(&listed, &["NAME", "WEBHOOKS", "AGE", "gate", "1"]),
        "expected NAME WEBHOOKS AGE with gate and 1; seen {listed}"
    );
    let defaults = k
        .ok(&[
            "get",
            "mutatingwebhookconfiguration",
            "gate",
            "-o",
            "jsonpath={.webhooks[0].timeoutSeconds} {.webhooks[0].matchPolicy} {.webhooks[0].rules[0].scope}",
        ])
        .await;
    assert_eq!(defaults, "10 Equivalent *", "expected upstream defaults");
    let bad = k.file(
        "bad.yaml",
        &WEBHOOK
            .replace("URL", "http://127.0.0.1:1/mutate")
            .replace("name: gate\n", "name: plain\n"),
    );
    let err = k.fails(&["apply", "-f", &bad]).await;
    assert!(
        err.contains(
            "webhooks[0].clientConfig.url: Invalid value: \"http\": 'https' is the only allowed URL scheme"
        ),
        "expected the https error; seen {err}"
    );
    sim.shutdown().await;
}

const TOP_DEPLOY: &str = "apiVersion: apps/v1
kind: Deployment
metadata:
  name: top
  namespace: metrics-demo
spec:
  replicas: 2
  selector:
    matchLabels:
      app: top
  template:
    metadata:
      labels:
        app: top
    spec:
      containers:
      - name: c
        image: nginx:1.25
        resources:
          requests:
            cpu: 500m
            memory: 256Mi
";

/// The rows of a `kubectl top` table under its header, split into columns.
fn rows(table: &str) -> Vec<Vec<String>> {
    table
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_top_reads_the_resource_metrics_api() {
    let Some(bin) = kubectl_or_skip("kubectl_top_reads_the_resource_metrics_api") else {
        return;
    };
    let sim = cluster("ktop", true).await;
    let k = Kubectl::new(bin, &sim);
    let resources = k.ok(&["api-resources", "--api-group=metrics.k8s.io"]).await;
    let listed = rows(&resources);
    assert_eq!(
        listed,
        vec![
            vec!["nodes", "metrics.k8s.io/v1beta1", "false", "NodeMetrics"],
            vec!["pods", "metrics.k8s.io/v1beta1", "true", "PodMetrics"],
        ],
        "expected nodes and pods of metrics.k8s.io/v1beta1; seen {resources}"
    );

    k.ok(&["create", "namespace", "metrics-demo"]).await;
    let deploy = k.file("top.yaml", TOP_DEPLOY);
    k.ok(&["apply", "-f", &deploy]).await;
    k.ok(&[
        "rollout",
        "status",
        "deploy/top",
        "-n",
        "metrics-demo",
        "--timeout=60s",
    ])
    .await;
    // Usage = requests × 0.5: 250m and 128Mi per pod, 500m and 256Mi on the one node.
    let top = wait_for(
        Duration::from_secs(20),
        "kubectl top pods with both pods",
        || async {
            let o = k.run(&["top", "pods", "-n", "metrics-demo"]).await;
            if o.ok && rows(&o.stdout).len() == 2 {
                Ok(o.stdout)
            } else {
                Err(format!("{}{}", o.stdout, o.stderr))
            }
        },
    )
    .await;
    let header: Vec<&str> = top
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(header, ["NAME", "CPU(cores)", "MEMORY(bytes)"], "{top}");
    for row in rows(&top) {
        assert!(
            row[0].starts_with("top-") && row[1..] == ["250m", "128Mi"],
            "expected top-<hash> 250m 128Mi; seen {top}"
        );
    }
    let all = k.ok(&["top", "pods", "-A", "-l", "app=top"]).await;
    let all_rows = rows(&all);
    assert!(
        all_rows.len() == 2
            && all_rows
                .iter()
                .all(|r| r[0] == "metrics-demo" && r[2..] == ["250m", "128Mi"]),
        "expected both pods with their namespace; seen {all}"
    );
    let none = k.run(&["top", "pods", "-A", "-l", "app=nothing"]).await;
    assert!(rows(&none.stdout).is_empty(), "no pod matches: {none:?}");

    let nodes = k.ok(&["top", "nodes"]).await;
    let node_rows = rows(&nodes);
    assert!(
        node_rows.len() == 1
            && node_rows[0][0] == "ktop-node-0"
            && node_rows[0][1] == "500m"
            && node_rows[0].contains(&"256Mi".to_owned()),
        "expected ktop-node-0 using 500m and 256Mi; seen {nodes}"
    );
    sim.shutdown().await;
}

const STATEFULSET: &str = "apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: web
spec:
  replicas: 2
  serviceName: web
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
      - name: nginx
        image: nginx:1.25
        resources:
          requests:
            cpu: 100m
            memory: 64Mi
  volumeClaimTemplates:
  - metadata:
      name: data
    spec:
      accessModes: [ReadWriteOnce]
      resources:
        requests:
          storage: 1Gi
";

/// A StatefulSet through kubectl: `rollout status` completes, `get sts` shows it ready, its pods
/// and claims are named by ordinal, and scaling down removes the top pod and keeps its claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_rolls_out_scales_and_lists_a_statefulset() {
    let Some(bin) = kubectl_or_skip("kubectl_rolls_out_scales_and_lists_a_statefulset") else {
        return;
    };
    let sim = cluster("ksts", true).await;
    let k = Kubectl::new(bin, &sim);
    let file = k.file("sts.yaml", STATEFULSET);
    assert!(
        k.ok(&["apply", "-f", &file])
            .await
            .contains("statefulset.apps/web created")
    );
    // The API server defaults `rollingUpdate.partition` to 0, so kubectl reports a partitioned
    // roll out, as against a real cluster.
    let rollout = k.ok(&["rollout", "status", "sts/web", "--timeout=60s"]).await;
    assert!(
        rollout.contains("partitioned roll out complete: 2 new pods have been updated..."),
        "rollout: {rollout}"
    );
    let out = k.ok(&["get", "sts", "web"]).await;
    let header: Vec<&str> = out
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(header, ["NAME", "READY", "AGE"], "table: {out}");
    assert_eq!(&rows(&out)[0][..2], ["web", "2/2"], "table: {out}");
    let pods = k.ok(&["get", "pods", "-l", "app=web", "-o", "name"]).await;
    assert_eq!(
        pods.split_whitespace().collect::<Vec<_>>(),
        ["pod/web-0", "pod/web-1"]
    );
    let claims = k.ok(&["get", "pvc", "-o", "name"]).await;
    assert_eq!(
        claims.split_whitespace().collect::<Vec<_>>(),
        [
            "persistentvolumeclaim/data-web-0",
            "persistentvolumeclaim/data-web-1"
        ]
    );

    assert!(
        k.ok(&["scale", "sts", "web", "--replicas=1"])
            .await
            .contains("statefulset.apps/web scaled")
    );
    k.ok(&["wait", "--for=delete", "pod/web-1", "--timeout=30s"])
        .await;
    let pods = k.ok(&["get", "pods", "-l", "app=web", "-o", "name"]).await;
    assert_eq!(pods.split_whitespace().collect::<Vec<_>>(), ["pod/web-0"]);
    let claims = k.ok(&["get", "pvc", "-o", "name"]).await;
    assert_eq!(claims.split_whitespace().count(), 2, "claims kept: {claims}");
    sim.shutdown().await;
}

const INDEXED_JOB: &str = "apiVersion: batch/v1
kind: Job
metadata:
  name: render
spec:
  completions: 3
  parallelism: 2
  completionMode: Indexed
  template:
    metadata:
      annotations:
        sim.nave.dev/run-millis: \"300\"
    spec:
      restartPolicy: Never
      containers:
      - name: render
        image: busybox:1.36
";

/// An Indexed Job through kubectl: `wait --for=condition=complete` returns, `get job` shows it
/// Complete 3/3, and its pods show Completed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_waits_for_an_indexed_job_to_complete() {
    let Some(bin) = kubectl_or_skip("kubectl_waits_for_an_indexed_job_to_complete") else {
        return;
    };
    let sim = cluster("kjob", true).await;
    let k = Kubectl::new(bin, &sim);
    let file = k.file("job.yaml", INDEXED_JOB);
    assert!(
        k.ok(&["apply", "-f", &file])
            .await
            .contains("job.batch/render created")
    );
    let waited = k
        .ok(&["wait", "--for=condition=complete", "job/render", "--timeout=60s"])
        .await;
    assert!(
        waited.contains("job.batch/render condition met"),
        "wait: {waited}"
    );
    let out = k.ok(&["get", "job", "render"]).await;
    let header: Vec<&str> = out
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"],
        "table: {out}"
    );
    assert_eq!(&rows(&out)[0][..3], ["render", "Complete", "3/3"], "table: {out}");
    let indexes = k
        .ok(&[
            "get",
            "job",
            "render",
            "-o",
            "jsonpath={.status.completedIndexes}",
        ])
        .await;
    assert_eq!(indexes, "0-2");
    let pods = rows(
        &k.ok(&["get", "pods", "-l", "batch.kubernetes.io/job-name=render"])
            .await,
    );
    assert_eq!(pods.len(), 3, "3 pods: {pods:?}");
    for p in &pods {
        assert_eq!(p[2], "Completed", "pods: {pods:?}");
    }
    sim.shutdown().await;
}
