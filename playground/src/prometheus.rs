//! A real Prometheus server beside simulated clusters, for the playground and the end-to-end
//! tests: the `prometheus` binary (Debian package `prometheus`) on a free loopback port, with a
//! scrape configuration, data directory and log of its own, stopped when dropped.
//!
//! ```text
//!  ScrapeTarget { job, url, labels } ... ─► scrape_config() ─► DIR/prometheus.yml
//!  prometheus --config.file DIR/prometheus.yml --storage.tsdb.path DIR/data
//!             --web.listen-address 127.0.0.1:<free>  (log: DIR/prometheus.log)
//!     ─► GET /-/ready ─► Prometheus { url } ─► wait_targets_up (GET /api/v1/targets)
//! ```
//!
//! Each workload cluster is its own job with a static `cluster` label naming it: the simulator's
//! `/metrics` carries no `cluster` label, as a real cluster's kubelet and kube-state-metrics do
//! not, and the hub's usage queries aggregate `by (cluster)`. Nave never talks to a system-wide
//! Prometheus a package may have started on :9090.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use serde_json::json;

/// Name of the binary looked up on `PATH`.
pub const BINARY: &str = "prometheus";

/// The label that names the workload cluster of a target.
pub const CLUSTER_LABEL: &str = "cluster";

/// One endpoint to scrape.
#[derive(Debug, Clone, PartialEq)]
pub struct ScrapeTarget {
    /// The job name; one job per target keeps each target's labels and TLS settings its own.
    pub job: String,
    /// `http` or `https`.
    pub scheme: String,
    /// `host:port`.
    pub address: String,
    /// The metrics path, `/metrics` usually.
    pub path: String,
    /// Labels added to every series of the target.
    pub labels: BTreeMap<String, String>,
    /// CA bundle to verify an `https` target with.
    pub ca_file: Option<PathBuf>,
}

impl ScrapeTarget {
    /// A target from its full URL (`http://127.0.0.1:8080/metrics`).
    pub fn from_url(job: &str, url: &str) -> anyhow::Result<ScrapeTarget> {
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| anyhow!("{url:?} is not an http(s) URL"))?;
        if scheme != "http" && scheme != "https" {
            bail!("{url:?} is not an http(s) URL");
        }
        let (address, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/metrics"),
        };
        if address.is_empty() {
            bail!("{url:?} names no host");
        }
        Ok(ScrapeTarget {
            job: job.to_owned(),
            scheme: scheme.to_owned(),
            address: address.to_owned(),
            path: path.to_owned(),
            labels: BTreeMap::new(),
            ca_file: None,
        })
    }

    /// The same target with a label on its series.
    pub fn label(mut self, key: &str, value: &str) -> ScrapeTarget {
        self.labels.insert(key.to_owned(), value.to_owned());
        self
    }

    /// The same target, verified with the CA in `ca_file`.
    pub fn ca_file(mut self, ca_file: PathBuf) -> ScrapeTarget {
        self.ca_file = Some(ca_file);
        self
    }
}

/// The configuration file for `targets`, scraped every `interval`. JSON, which Prometheus reads
/// as the YAML it is a subset of, so that no value needs YAML quoting.
pub fn scrape_config(targets: &[ScrapeTarget], interval: Duration) -> String {
    let every = format!("{}ms", interval.as_millis().max(1));
    let jobs: Vec<_> = targets
        .iter()
        .map(|t| {
            let mut job = json!({
                "job_name": t.job,
                "scheme": t.scheme,
                "metrics_path": t.path,
                "static_configs": [{"targets": [t.address], "labels": t.labels}],
            });
            if let Some(ca) = &t.ca_file {
                job["tls_config"] = json!({"ca_file": ca.display().to_string()});
            }
            job
        })
        .collect();
    let config = json!({
        // A timeout longer than the interval is refused; the default (10 s) is.
        "global": {"scrape_interval": every, "scrape_timeout": every, "evaluation_interval": every},
        "scrape_configs": jobs,
    });
    serde_json::to_string_pretty(&config).unwrap_or_default()
}

/// `n` distinct free ports on the loopback interface, for servers that take an address rather
/// than a listener. All are held until all are chosen, so they differ from one another; another
/// process may still take one before its server binds it.
pub fn free_loopback_ports(n: usize) -> std::io::Result<Vec<std::net::SocketAddr>> {
    let held: Vec<std::net::TcpListener> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<_>>()?;
    held.iter().map(std::net::TcpListener::local_addr).collect()
}

/// The `prometheus` binary on `PATH`, if there is one.
pub fn find_binary() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(BINARY))
        .find(|candidate| candidate.is_file())
}

/// A running Prometheus server; killed when dropped.
pub struct Prometheus {
    child: tokio::process::Child,
    url: String,
    dir: PathBuf,
    client: prometheus_http_query::Client,
}

impl std::fmt::Debug for Prometheus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prometheus")
            .field("url", &self.url)
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl Prometheus {
    /// Writes the configuration for `targets` under `dir`, starts `binary` on a free loopback
    /// port with its data in `dir/data`, and waits (up to 30 s) until it is ready.
    pub async fn start(
        binary: &Path,
        dir: &Path,
        targets: &[ScrapeTarget],
        interval: Duration,
    ) -> anyhow::Result<Prometheus> {
        let listen = free_loopback_ports(1)?[0];
        Prometheus::start_at(listen, binary, dir, targets, interval).await
    }

    /// As [`Prometheus::start`], listening on `listen`.
    pub async fn start_at(
        listen: std::net::SocketAddr,
        binary: &Path,
        dir: &Path,
        targets: &[ScrapeTarget],
        interval: Duration,
    ) -> anyhow::Result<Prometheus> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let config = dir.join("prometheus.yml");
        std::fs::write(&config, scrape_config(targets, interval))
            .with_context(|| format!("writing {}", config.display()))?;
        let data = dir.join("data");
        // Series of an earlier run name clusters and pods that no longer exist.
        let _ = std::fs::remove_dir_all(&data);
        let log_path = dir.join("prometheus.log");
        let log =
            std::fs::File::create(&log_path).with_context(|| format!("creating {}", log_path.display()))?;
        let child = tokio::process::Command::new(binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", data.display()))
            .arg(format!("--web.listen-address={listen}"))
            // Quick to stop; nothing here is kept.
            .arg("--storage.tsdb.retention.time=1d")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        let url = format!("http://{listen}");
        let client = prometheus_http_query::Client::try_from(url.as_str())
            .map_err(|e| anyhow!("a client for {url}: {e}"))?;
        let mut prometheus = Prometheus {
            child,
            url,
            dir: dir.to_path_buf(),
            client,
        };
        prometheus.wait_ready(Duration::from_secs(30)).await?;
        Ok(prometheus)
    }

    async fn wait_ready(&mut self, deadline: Duration) -> anyhow::Result<()> {
        let started = tokio::time::Instant::now();
        let ready = format!("{}/-/ready", self.url);
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "prometheus exited ({status}) before it was ready; its log:\n{}",
                    self.log_tail()
                );
            }
            let answer = self.client.inner().get(&ready).send().await;
            if answer.as_ref().is_ok_and(|r| r.status().is_success()) {
                return Ok(());
            }
            if started.elapsed() > deadline {
                bail!(
                    "prometheus at {} was not ready within {deadline:?} (last: {answer:?}); its log:\n{}",
                    self.url,
                    self.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The directory holding its configuration, data and log.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A client of its HTTP API.
    pub fn client(&self) -> &prometheus_http_query::Client {
        &self.client
    }

    /// The last lines of its log, for error messages.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Waits until every configured target has been scraped successfully; fails after
    /// `deadline` naming the targets that are not up and why.
    pub async fn wait_targets_up(&self, deadline: Duration) -> anyhow::Result<()> {
        let started = tokio::time::Instant::now();
        loop {
            let seen = match self.client.targets(None).await {
                Ok(targets) if !targets.active().is_empty() => {
                    let down: Vec<String> = targets
                        .active()
                        .iter()
                        .filter(|t| !t.health().is_up())
                        .map(|t| format!("{} ({}: {})", t.scrape_url(), t.health(), t.last_error()))
                        .collect();
                    if down.is_empty() {
                        return Ok(());
                    }
                    down.join(", ")
                }
                Ok(_) => "no active targets".to_owned(),
                Err(e) => e.to_string(),
            };
            if started.elapsed() > deadline {
                bail!("Prometheus targets not up within {deadline:?}: {seen}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Kills the server and waits for it to exit.
    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse_from_urls_and_refuse_what_is_not_http() {
        let t = ScrapeTarget::from_url("eu-1", "https://127.0.0.1:6443/metrics")
            .unwrap()
            .label(CLUSTER_LABEL, "eu-1");
        assert_eq!(
            (t.scheme.as_str(), t.address.as_str(), t.path.as_str()),
            ("https", "127.0.0.1:6443", "/metrics")
        );
        assert_eq!(t.labels.get(CLUSTER_LABEL).map(String::as_str), Some("eu-1"));
        let bare = ScrapeTarget::from_url("hub", "http://127.0.0.1:8443").unwrap();
        assert_eq!(bare.path, "/metrics", "the path defaults to /metrics");
        for bad in ["127.0.0.1:80", "ftp://x/metrics", "http:///metrics"] {
            assert!(
                ScrapeTarget::from_url("x", bad).is_err(),
                "{bad} should be refused"
            );
        }
    }

    #[test]
    fn the_scrape_config_has_a_job_per_target_with_its_labels() {
        let targets = [
            ScrapeTarget::from_url("cluster-eu-1", "http://127.0.0.1:1000/metrics")
                .unwrap()
                .label(CLUSTER_LABEL, "eu-1"),
            ScrapeTarget::from_url("nave-hub", "https://127.0.0.1:2000/metrics")
                .unwrap()
                .ca_file(PathBuf::from("/tmp/ca.pem")),
        ];
        let config: serde_json::Value =
            serde_json::from_str(&scrape_config(&targets, Duration::from_secs(1))).expect("JSON, hence YAML");
        assert_eq!(config["global"]["scrape_interval"], "1000ms");
        assert_eq!(config["global"]["scrape_timeout"], "1000ms");
        let jobs = config["scrape_configs"].as_array().expect("jobs");
        assert_eq!(jobs.len(), 2);
        assert_eq!(jobs[0]["static_configs"][0]["labels"]["cluster"], "eu-1");
        assert_eq!(jobs[0]["static_configs"][0]["targets"][0], "127.0.0.1:1000");
        assert_eq!(jobs[1]["scheme"], "https");
        assert_eq!(jobs[1]["tls_config"]["ca_file"], "/tmp/ca.pem");
    }
}
