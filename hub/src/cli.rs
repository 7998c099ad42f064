//! Command line of `nave-hub`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};

/// Nave's hub: places MultiClusterDeployments across workload clusters.
#[derive(Debug, Parser)]
#[command(name = "nave-hub", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
// Parsed once at start-up; boxing the arguments would buy nothing.
#[allow(clippy::large_enum_variant)]
pub enum Command {
    /// Run the hub: controllers, agent endpoints, loops.
    Run(RunArgs),
    /// Print the CustomResourceDefinitions as YAML (`nave-hub crds | kubectl apply -f -`).
    Crds,
    /// Admin calls to a running hub's REST API: join tokens, acceptance, credentials, removal.
    Admin(crate::admin_cli::AdminArgs),
}

/// Arguments of `nave-hub run`.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// The store: `sqlite://PATH` (created when missing) or `postgres://...`.
    #[arg(long, env = "NAVE_DATABASE_URL")]
    pub database_url: String,
    /// Address of the HTTP server (agent endpoints and REST API).
    #[arg(long, env = "NAVE_LISTEN", default_value = "0.0.0.0:8443")]
    pub listen: SocketAddr,
    /// Address of the plain-HTTP listener for `/metrics`, `/healthz` and `/readyz`, apart from
    /// the agents' listener.
    #[arg(long, env = "NAVE_METRICS_LISTEN", default_value = "0.0.0.0:9090")]
    pub metrics_listen: SocketAddr,
    /// PEM file of the certificate chain the hub serves over HTTPS: its certificate, then the
    /// intermediates and the CA (agents that pin the CA by hash find it there). Read again when
    /// it changes. With `--tls-key-file`; without both the hub serves plain HTTP.
    #[arg(long, env = "NAVE_TLS_CERT_FILE", requires = "tls_key_file")]
    pub tls_cert_file: Option<PathBuf>,
    /// PEM file of the private key of `--tls-cert-file`.
    #[arg(long, env = "NAVE_TLS_KEY_FILE", requires = "tls_cert_file")]
    pub tls_key_file: Option<PathBuf>,
    /// File holding the key (32 bytes, or their base64) that seals the Secret payloads of work
    /// sets in the store (AES-256-GCM); the chart mounts it from a Secret. Without it they are
    /// stored in clear. Keep it with (but apart from) the store's backups.
    #[arg(long, env = "NAVE_STORE_KEY_FILE")]
    pub store_key_file: Option<PathBuf>,
    /// File holding the fleet's bootstrap token, which agents present to register.
    #[arg(long, env = "NAVE_BOOTSTRAP_TOKEN_FILE")]
    pub bootstrap_token_file: PathBuf,
    /// Accept clusters that join with the fleet's bootstrap token at once. Without it such a
    /// cluster waits for an admin (`POST /api/v1/clusters/{name}/acceptance`) before it gets
    /// any work; a cluster that joins with a join token an admin issued for its name is
    /// accepted either way. For playgrounds and single-team fleets.
    #[arg(long, env = "NAVE_ACCEPT_NEW_CLUSTERS")]
    pub accept_new_clusters: bool,
    /// Most clusters that may wait for acceptance at once: past it, a new name joining with the
    /// fleet's bootstrap token is answered `429` until an admin accepts or removes some. Bounds
    /// what a leaked bootstrap token can add to the store.
    #[arg(long, env = "NAVE_MAX_UNACCEPTED_CLUSTERS", default_value_t = 100)]
    pub max_unaccepted_clusters: usize,
    /// Tokens of the REST API (`/api/v1`): one `<scope> <token>` per line, scope `read` or
    /// `admin`, `#` comments. Without tokens the REST API refuses every request.
    #[arg(long, env = "NAVE_API_TOKENS_FILE")]
    pub api_tokens_file: Option<PathBuf>,
    /// More REST API tokens, from a Secret (`namespace/name`) of the management cluster: each
    /// key names a token, each value is `<scope>:<token>`. Read at start-up.
    #[arg(long, env = "NAVE_API_TOKENS_SECRET")]
    pub api_tokens_secret: Option<String>,
    /// Kubeconfig of the management cluster; default: KUBECONFIG, ~/.kube/config or in-cluster.
    #[arg(long, env = "NAVE_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Print logs as JSON lines.
    #[arg(long, env = "NAVE_LOG_JSON")]
    pub log_json: bool,
    /// When a silent cluster is declared lost and how fast replicas leave it.
    #[command(flatten)]
    pub failover: FailoverArgs,
    /// Prometheus as a scoring input.
    #[command(flatten)]
    pub prometheus: PrometheusArgs,
    /// Several replicas: which one leads.
    #[command(flatten)]
    pub leader_election: LeaderElectionArgs,
    /// Telling a provisioner what fits nowhere.
    #[command(flatten)]
    pub provisioner: ProvisionerArgs,
    /// MultiClusterHorizontalPodAutoscalers.
    #[command(flatten)]
    pub autoscale: AutoscaleArgs,
    /// The drop-in path: place annotated Deployments of the management cluster
    /// (`nave.dev/placement: <policy>`, in namespaces labelled `nave.dev/drop-in=enabled`) across
    /// the fleet, and serve the admission webhook that keeps their pods from running here
    /// (`/admission/v1/drop-in/pods`, over HTTPS).
    #[arg(long, env = "NAVE_DROP_IN")]
    pub drop_in: bool,
    /// Which kinds MultiClusterResources may send.
    #[command(flatten)]
    pub resources: ResourceArgs,
}

/// The kinds MultiClusterResources may send: the fleet admin's choice, never a resource
/// author's. Each agent applies only the kinds its own `--allow-kind` names as well.
#[derive(Debug, Clone, Default, PartialEq, clap::Args)]
pub struct ResourceArgs {
    /// A namespaced kind MultiClusterResources may send, as `Kind.group` (`Kind` for the core
    /// group), into their own namespace; repeat it, or separate kinds by commas. Example:
    /// `NetworkPolicy.networking.k8s.io`. None by default.
    #[arg(long = "resource-kind", env = "NAVE_RESOURCE_KINDS", value_delimiter = ',')]
    pub resource_kinds: Vec<String>,
    /// A cluster-scoped kind MultiClusterResources may send, accepted only from those in the
    /// hub's own namespace (`--admin-namespace`). Example:
    /// `ClusterRole.rbac.authorization.k8s.io`. None by default.
    #[arg(
        long = "cluster-resource-kind",
        env = "NAVE_CLUSTER_RESOURCE_KINDS",
        value_delimiter = ','
    )]
    pub cluster_resource_kinds: Vec<String>,
    /// The hub's own namespace, where only the fleet's admins write: MultiClusterResources
    /// there may send the cluster-scoped kinds. Default: `POD_NAMESPACE`, else `nave-system`.
    #[arg(long, env = "NAVE_ADMIN_NAMESPACE")]
    pub admin_namespace: Option<String>,
}

impl ResourceArgs {
    /// The kinds as the controller reads them.
    pub fn kinds(&self) -> crate::render::resource::ResourceKinds {
        let clean = |kinds: &[String]| {
            kinds
                .iter()
                .map(|k| k.trim().to_owned())
                .filter(|k| !k.is_empty())
                .collect()
        };
        crate::render::resource::ResourceKinds {
            namespaced: clean(&self.resource_kinds),
            cluster: clean(&self.cluster_resource_kinds),
            admin_namespace: self
                .admin_namespace
                .clone()
                .or_else(|| std::env::var("POD_NAMESPACE").ok().filter(|n| !n.is_empty()))
                .unwrap_or_else(|| "nave-system".to_owned()),
        }
    }
}

/// How the leader evaluates MultiClusterHorizontalPodAutoscalers (see the `autoscaler`
/// module); their metrics come from `--prometheus-url`.
#[derive(Debug, Clone, PartialEq, clap::Args)]
pub struct AutoscaleArgs {
    /// Time between two evaluations of every MultiClusterHorizontalPodAutoscaler (the HPA's
    /// `--horizontal-pod-autoscaler-sync-period`).
    #[arg(long, env = "NAVE_AUTOSCALE_INTERVAL", default_value = "15s", value_parser = nave_runtime::positive_duration)]
    pub autoscale_interval: Duration,
    /// The window of the CPU usage rate (`rate(container_cpu_usage_seconds_total[...])`), a
    /// PromQL duration: a few scrape intervals at least.
    #[arg(long, env = "NAVE_AUTOSCALE_RATE_WINDOW", default_value = "1m", value_parser = promql_duration)]
    pub autoscale_rate_window: String,
    /// A metric MultiClusterHorizontalPodAutoscalers may scale by (`type: External`), as
    /// `NAME=QUERY`; repeat it for several. The PromQL is the fleet admin's, never an
    /// autoscaler author's: `$namespace` and `$workload` in it become the autoscaler's namespace
    /// and its MultiClusterDeployment's name. Example:
    /// `requests-per-second=sum(rate(http_requests_total{namespace="$namespace",service="$workload"}[2m]))`.
    #[arg(long = "autoscale-metric", value_parser = named_metric)]
    pub autoscale_metric: Vec<NamedMetric>,
}

/// One of the admin's metrics for autoscaling: its name and its PromQL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedMetric {
    /// The name autoscalers refer to (`metric.name`).
    pub name: String,
    /// The PromQL, with `$namespace` and `$workload`.
    pub query: String,
}

/// `NAME=QUERY`, the name a DNS label.
fn named_metric(value: &str) -> Result<NamedMetric, String> {
    let (name, query) = value
        .split_once('=')
        .ok_or_else(|| "NAME=QUERY, e.g. requests-per-second=sum(rate(...))".to_owned())?;
    if !nave_api::wire::is_dns_label(name) {
        return Err(format!(
            "the metric's name {name:?} must be lower-case letters, digits and '-' (63 at most)"
        ));
    }
    if query.trim().is_empty() {
        return Err(format!("metric {name} has no query"));
    }
    Ok(NamedMetric {
        name: name.to_owned(),
        query: query.to_owned(),
    })
}

impl Default for AutoscaleArgs {
    fn default() -> Self {
        AutoscaleArgs {
            autoscale_interval: Duration::from_secs(15),
            autoscale_rate_window: "1m".to_owned(),
            autoscale_metric: Vec::new(),
        }
    }
}

/// A PromQL duration such as `30s`, `1m` or `1h30m`: digits and units, nothing else.
fn promql_duration(value: &str) -> Result<String, String> {
    let units = ["ms", "s", "m", "h", "d", "w", "y"];
    let mut rest = value;
    if rest.is_empty() {
        return Err("a duration such as 30s or 1m".to_owned());
    }
    while !rest.is_empty() {
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        if digits == 0 {
            return Err(format!("{value:?} is not a PromQL duration such as 30s or 1m"));
        }
        rest = &rest[digits..];
        let Some(unit) = units.iter().find(|u| rest.starts_with(*u)) else {
            return Err(format!("{value:?} is not a PromQL duration such as 30s or 1m"));
        };
        rest = &rest[unit.len()..];
    }
    Ok(value.to_owned())
}

/// Where to tell a provisioner (Cluster API, a cloud autoscaler, a script) about replicas that
/// fit in no cluster (see the `provisioner` module). Without a webhook, the demand is only in
/// the metrics `nave_unplaced_replicas` and `nave_unplaced_demand`.
#[derive(Debug, Clone, PartialEq, clap::Args)]
pub struct ProvisionerArgs {
    /// URL the leader POSTs a `FleetDemand` JSON document to when the replicas that fit nowhere
    /// change, again every `--provisioner-resend` while some remain, and once more when none
    /// are left. Any 2xx answer takes it.
    #[arg(long, env = "NAVE_PROVISIONER_WEBHOOK")]
    pub provisioner_webhook: Option<String>,
    /// File holding a token sent as `Authorization: Bearer` to the webhook.
    #[arg(long, env = "NAVE_PROVISIONER_WEBHOOK_TOKEN_FILE")]
    pub provisioner_webhook_token_file: Option<PathBuf>,
    /// The token itself, when no file is given: set the environment variable from a Secret
    /// (the hub chart's `extraEnv` with `secretKeyRef`) rather than pass it on the command line.
    #[arg(long, env = "NAVE_PROVISIONER_WEBHOOK_TOKEN", hide_env_values = true)]
    pub provisioner_webhook_token: Option<String>,
    /// How often an unchanged demand is sent again while it lasts.
    #[arg(long, env = "NAVE_PROVISIONER_RESEND", default_value = "60s", value_parser = nave_runtime::positive_duration)]
    pub provisioner_resend: Duration,
}

impl Default for ProvisionerArgs {
    fn default() -> Self {
        ProvisionerArgs {
            provisioner_webhook: None,
            provisioner_webhook_token_file: None,
            provisioner_webhook_token: None,
            provisioner_resend: Duration::from_secs(60),
        }
    }
}

impl ProvisionerArgs {
    /// The webhook, its token read; `None` without a URL. An unreadable token file or a URL that
    /// is not `http(s)://` is an error.
    pub fn webhook(&self) -> Result<Option<crate::provisioner::Webhook>, String> {
        let Some(url) = &self.provisioner_webhook else {
            return Ok(None);
        };
        let parsed = reqwest::Url::parse(url).map_err(|e| format!("--provisioner-webhook {url:?}: {e}"))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(format!(
                "--provisioner-webhook {url:?}: must be http:// or https://"
            ));
        }
        let token = match &self.provisioner_webhook_token_file {
            Some(path) => Some(
                std::fs::read_to_string(path)
                    .map_err(|e| format!("--provisioner-webhook-token-file {}: {e}", path.display()))?
                    .trim()
                    .to_owned(),
            ),
            None => self.provisioner_webhook_token.clone(),
        };
        if token.is_some() && parsed.scheme() == "http" {
            tracing::warn!("the provisioner webhook's token goes over plain http://");
        }
        Ok(Some(crate::provisioner::Webhook {
            url: url.clone(),
            token,
            resend: self.provisioner_resend,
        }))
    }
}

/// Leader election among hub replicas (see the `leader` module). Without `--leader-elect` the
/// hub leads alone: it claims the store's next term at start, so a second hub started on the
/// same store by mistake takes over and the first stops, rather than both writing.
#[derive(Debug, Clone, PartialEq, clap::Args)]
pub struct LeaderElectionArgs {
    /// Elect a leader among the replicas through a Lease of the management cluster; every
    /// replica serves agents and the REST API, the leader alone places workloads. Needs a
    /// store the replicas share (Postgres).
    #[arg(long, env = "NAVE_LEADER_ELECT")]
    pub leader_elect: bool,
    /// Namespace of the Lease; default: `POD_NAMESPACE`, else `nave-system`.
    #[arg(long, env = "NAVE_LEADER_ELECTION_NAMESPACE")]
    pub leader_election_namespace: Option<String>,
    /// Name of the Lease.
    #[arg(long, env = "NAVE_LEADER_ELECTION_LEASE", default_value = "nave-hub")]
    pub leader_election_lease: String,
    /// This replica's identity in the Lease; default: `POD_NAME`, else the host name and the
    /// process id.
    #[arg(long, env = "NAVE_LEADER_ELECTION_IDENTITY")]
    pub leader_election_identity: Option<String>,
    /// How long a Lease whose holder stopped renewing stays its holder's.
    #[arg(long, env = "NAVE_LEASE_DURATION", default_value = "8s", value_parser = nave_runtime::positive_duration)]
    pub lease_duration: Duration,
    /// How long a leader keeps leading without renewing the Lease; shorter than the lease
    /// duration.
    #[arg(long, env = "NAVE_RENEW_DEADLINE", default_value = "5s", value_parser = nave_runtime::positive_duration)]
    pub renew_deadline: Duration,
    /// How often candidates try to take the Lease and the leader renews it.
    #[arg(long, env = "NAVE_RETRY_PERIOD", default_value = "1s", value_parser = nave_runtime::positive_duration)]
    pub retry_period: Duration,
}

impl Default for LeaderElectionArgs {
    fn default() -> Self {
        LeaderElectionArgs {
            leader_elect: false,
            leader_election_namespace: None,
            leader_election_lease: "nave-hub".to_owned(),
            leader_election_identity: None,
            lease_duration: Duration::from_secs(8),
            renew_deadline: Duration::from_secs(5),
            retry_period: Duration::from_secs(1),
        }
    }
}

impl LeaderElectionArgs {
    /// This replica's identity: the flag, the pod's name, or the host name and process id.
    pub fn identity(&self) -> String {
        self.leader_election_identity
            .clone()
            .or_else(|| std::env::var("POD_NAME").ok().filter(|n| !n.is_empty()))
            .unwrap_or_else(|| {
                let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                    .map(|h| h.trim().to_owned())
                    .ok()
                    .filter(|h| !h.is_empty())
                    .unwrap_or_else(|| "nave-hub".to_owned());
                format!("{host}-{}", std::process::id())
            })
    }

    /// The election's settings; `None` without `--leader-elect`. Refuses timings that cannot
    /// work: a renew deadline that is not shorter than the lease duration would let a leader
    /// go on after another took over, a retry period that is not shorter than the renew
    /// deadline would give it no second try.
    pub fn config(&self) -> Result<Option<crate::leader::Config>, String> {
        if !self.leader_elect {
            return Ok(None);
        }
        if self.renew_deadline >= self.lease_duration {
            return Err(format!(
                "--renew-deadline ({:?}) must be shorter than --lease-duration ({:?})",
                self.renew_deadline, self.lease_duration
            ));
        }
        if self.retry_period >= self.renew_deadline {
            return Err(format!(
                "--retry-period ({:?}) must be shorter than --renew-deadline ({:?})",
                self.retry_period, self.renew_deadline
            ));
        }
        let namespace = self
            .leader_election_namespace
            .clone()
            .or_else(|| std::env::var("POD_NAMESPACE").ok().filter(|n| !n.is_empty()))
            .unwrap_or_else(|| "nave-system".to_owned());
        let mut config = crate::leader::Config::new(namespace, self.identity());
        config.name = self.leader_election_lease.clone();
        config.lease_duration = self.lease_duration;
        config.renew_deadline = self.renew_deadline;
        config.retry_period = self.retry_period;
        Ok(Some(config))
    }
}

/// Where measured usage comes from (see the `prometheus` module). Without a URL, placement
/// counts requests only.
#[derive(Debug, Clone, PartialEq, clap::Args)]
pub struct PrometheusArgs {
    /// Base URL of a Prometheus (or compatible) server, e.g. `http://prometheus:9090`. Its
    /// series must name the workload cluster in a `cluster` label. Without it, scores use
    /// requests only.
    #[arg(long, env = "NAVE_PROMETHEUS_URL")]
    pub prometheus_url: Option<String>,
    /// PromQL for the CPU each cluster uses, in cores, one series per `cluster`; empty turns
    /// the signal off.
    #[arg(
        long,
        env = "NAVE_PROMETHEUS_USAGE_CPU_QUERY",
        default_value = crate::usage::DEFAULT_CPU_QUERY
    )]
    pub prometheus_usage_cpu_query: String,
    /// PromQL for the memory each cluster uses, in bytes, one series per `cluster`; empty turns
    /// the signal off.
    #[arg(
        long,
        env = "NAVE_PROMETHEUS_USAGE_MEMORY_QUERY",
        default_value = crate::usage::DEFAULT_MEMORY_QUERY
    )]
    pub prometheus_usage_memory_query: String,
    /// PromQL for each cluster's traffic (requests per second, say), one series per `cluster`.
    /// Shown in the REST API; no default.
    #[arg(long, env = "NAVE_PROMETHEUS_TRAFFIC_QUERY")]
    pub prometheus_traffic_query: Option<String>,
    /// How long a measured value counts; older ones are dropped and scores fall back to
    /// requests. The queries run every third of it.
    #[arg(long, env = "NAVE_PROMETHEUS_TTL", default_value = "30s", value_parser = nave_runtime::positive_duration)]
    pub prometheus_ttl: Duration,
}

impl Default for PrometheusArgs {
    fn default() -> Self {
        PrometheusArgs {
            prometheus_url: None,
            prometheus_usage_cpu_query: crate::usage::DEFAULT_CPU_QUERY.to_owned(),
            prometheus_usage_memory_query: crate::usage::DEFAULT_MEMORY_QUERY.to_owned(),
            prometheus_traffic_query: None,
            prometheus_ttl: Duration::from_secs(30),
        }
    }
}

impl PrometheusArgs {
    /// The Prometheus to read usage from; `None` without `--prometheus-url`.
    pub fn source(&self) -> Option<crate::usage::Source> {
        Some(crate::usage::Source {
            url: self.prometheus_url.clone()?,
            cpu_query: self.prometheus_usage_cpu_query.clone(),
            memory_query: self.prometheus_usage_memory_query.clone(),
            traffic_query: self.prometheus_traffic_query.clone(),
            ttl: self.prometheus_ttl,
        })
    }
}

/// Failover rules of `nave-hub run` (see the `health` module for how they combine).
#[derive(Debug, Clone, PartialEq, clap::Args)]
pub struct FailoverArgs {
    /// A cluster without a heartbeat for this long is Ready=False and its replicas are placed
    /// elsewhere; a duration such as `40s` or `2m`. Agents send one every 10 s.
    #[arg(long, env = "NAVE_HEARTBEAT_GRACE", default_value = "40s", value_parser = nave_runtime::positive_duration)]
    pub heartbeat_grace: Duration,
    /// When more than this percentage of the clusters is silent at once, the hub assumes it is
    /// partitioned itself and fails over none (100 turns the guard off, 0 turns failover off).
    #[arg(
        long,
        env = "NAVE_FAILOVER_MAX_STALE_PERCENT",
        default_value_t = 50,
        value_parser = clap::value_parser!(u8).range(0..=100)
    )]
    pub failover_max_stale_percent: u8,
    /// At most this many clusters start failing over per minute; the longest-silent go first
    /// (0 turns failover off).
    #[arg(long, env = "NAVE_FAILOVER_MAX_PER_MINUTE", default_value_t = 2)]
    pub failover_max_per_minute: u32,
    /// How long a returned cluster must be Ready before workloads with `failback: Immediate`
    /// move back to it; a duration such as `5m`.
    #[arg(long, env = "NAVE_FAILBACK_SETTLE", default_value = "5m", value_parser = nave_runtime::duration)]
    pub failback_settle: Duration,
}

impl Default for FailoverArgs {
    fn default() -> Self {
        FailoverArgs {
            heartbeat_grace: Duration::from_secs(40),
            failover_max_stale_percent: 50,
            failover_max_per_minute: 2,
            failback_settle: Duration::from_secs(300),
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    fn parse(extra: &[&str]) -> Result<RunArgs, clap::Error> {
        let mut argv = vec![
            "nave-hub",
            "run",
            "--database-url",
            "sqlite://hub.db",
            "--bootstrap-token-file",
            "token",
        ];
        argv.extend_from_slice(extra);
        Cli::try_parse_from(argv).map(|cli| match cli.command {
            Command::Run(run) => run,
            other => panic!("parsed as {other:?}"),
        })
    }

    #[test]
    fn failover_flags_default_and_parse_go_durations() {
        let run = parse(&[]).expect("defaults parse");
        assert_eq!(run.failover, FailoverArgs::default());
        let run = parse(&[
            "--heartbeat-grace",
            "1m30s",
            "--failover-max-stale-percent",
            "30",
            "--failover-max-per-minute",
            "5",
            "--failback-settle",
            "0s",
        ])
        .expect("flags parse");
        assert_eq!(run.failover.heartbeat_grace, Duration::from_secs(90));
        assert_eq!(run.failover.failover_max_stale_percent, 30);
        assert_eq!(run.failover.failover_max_per_minute, 5);
        assert_eq!(run.failover.failback_settle, Duration::ZERO);
    }

    #[test]
    fn prometheus_flags_default_to_off_with_cadvisor_queries() {
        let run = parse(&[]).expect("defaults parse");
        assert_eq!(run.prometheus, PrometheusArgs::default());
        assert!(run.prometheus.prometheus_url.is_none());
        let run = parse(&[
            "--prometheus-url",
            "http://prometheus:9090",
            "--prometheus-ttl",
            "1m",
            "--prometheus-traffic-query",
            "sum by (cluster) (rate(http_requests_total[2m]))",
        ])
        .expect("flags parse");
        assert_eq!(
            run.prometheus.prometheus_url.as_deref(),
            Some("http://prometheus:9090")
        );
        assert_eq!(run.prometheus.prometheus_ttl, Duration::from_secs(60));
        assert!(run.prometheus.prometheus_traffic_query.is_some());
        let error = parse(&["--prometheus-ttl", "0s"]).expect_err("a zero TTL is refused");
        assert!(error.to_string().contains("greater than zero"), "{error}");
    }

    #[test]
    fn the_provisioner_webhook_is_off_by_default_and_checked_when_set() {
        let run = parse(&[]).expect("defaults parse");
        assert_eq!(run.provisioner, ProvisionerArgs::default());
        assert!(matches!(run.provisioner.webhook(), Ok(None)));
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, "s3cret\n").unwrap();
        let token_arg = token.display().to_string();
        let run = parse(&[
            "--provisioner-webhook",
            "https://provisioner.example/demand",
            "--provisioner-webhook-token-file",
            &token_arg,
            "--provisioner-resend",
            "2m",
        ])
        .expect("parses");
        let webhook = run.provisioner.webhook().unwrap().expect("a webhook");
        assert_eq!(webhook.url, "https://provisioner.example/demand");
        assert_eq!(webhook.token.as_deref(), Some("s3cret"), "trimmed");
        assert_eq!(webhook.resend, Duration::from_secs(120));
        for (url, says) in [
            ("provisioner:9000", "http:// or https://"),
            ("not a url", "relative URL"),
        ] {
            let run = parse(&["--provisioner-webhook", url]).expect("parses");
            let error = run.provisioner.webhook().unwrap_err();
            assert!(
                error.contains("--provisioner-webhook") && error.contains(says),
                "{url}: {error}"
            );
        }
        let run = parse(&[
            "--provisioner-webhook",
            "http://x/",
            "--provisioner-webhook-token-file",
            "/nonexistent/token",
        ])
        .expect("parses");
        assert!(
            run.provisioner
                .webhook()
                .unwrap_err()
                .contains("--provisioner-webhook-token-file /nonexistent/token")
        );
    }

    #[test]
    fn bad_failover_flags_are_clear_errors() {
        let cases: [(&[&str], &str); 4] = [
            (&["--heartbeat-grace", "soon"], "not a duration"),
            (&["--heartbeat-grace", "0s"], "greater than zero"),
            (&["--heartbeat-grace=-5s"], "negative"),
            (&["--failover-max-stale-percent", "101"], "101"),
        ];
        for (flags, expected) in cases {
            let error = parse(flags).expect_err("should be rejected").to_string();
            assert!(
                error.contains(expected),
                "{flags:?}: expected an error mentioning {expected:?}, got {error}"
            );
        }
    }
}
