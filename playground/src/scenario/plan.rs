//! What a scenario does, decided before it runs: the fleet, the other tenants' pods, and a
//! timeline of workloads that arrive, scale and leave. Pure and deterministic: the same shape and
//! seed give the same plan, so every run of a comparison faces exactly the same events.

use std::collections::BTreeMap;
use std::time::Duration;

use nave_sim::config::{ClusterConfig, Coordinates, FleetConfig, NodePool, Timing};

/// Label of every pod of a scenario workload (its value is the workload's name); the monitor
/// counts these pods and no others.
pub const WORKLOAD_LABEL: &str = "scenario.nave.dev/workload";
/// Label of every pod of a batch job of the scenario (its value is the job's name), beside
/// [`WORKLOAD_LABEL`]; the monitor counts these pods apart.
pub const JOB_LABEL: &str = "scenario.nave.dev/job";
/// Label of the other tenants' pods (its value is the group they arrive and leave with).
pub const TENANT_LABEL: &str = "scenario.nave.dev/tenant";
/// Label of the WorkloadClusters that bursting targets.
pub const TIER_LABEL: &str = "nave.dev/tier";
/// Name of the burst cluster.
pub const BURST_CLUSTER: &str = "burst";
/// Namespace of the workloads and the tenants' pods.
pub const NAMESPACE: &str = "default";
/// Seed of `nave-sim scenario testbed` unless `--seed` says otherwise.
pub const DEFAULT_SEED: u64 = 20_190_611;

/// Where the workload clusters are: two in Europe near each other, so that "nearest" means
/// something to the proximity policy and to overflow.
const SITES: [(&str, f64, f64); 6] = [
    ("eu-west", 53.35, -6.26),
    ("eu-central", 50.11, 8.68),
    ("us-east", 38.9, -77.04),
    ("us-west", 45.52, -122.68),
    ("ap-south", 19.08, 72.88),
    ("sa-east", -23.55, -46.63),
];

/// Where the burst cluster is (Stockholm): near the European clusters.
const BURST_SITE: (&str, f64, f64) = ("eu-north", 59.33, 18.07);

/// The sizes of a scenario.
#[derive(Debug, Clone, PartialEq)]
pub struct Shape {
    /// Regular workload clusters, `cluster-1` to `cluster-N`.
    pub regular_clusters: usize,
    /// Nodes per regular cluster.
    pub nodes: u32,
    /// CPU per regular node (a quantity).
    pub node_cpu: String,
    /// Memory per regular node (a quantity).
    pub node_memory: String,
    /// Nodes of the burst cluster.
    pub burst_nodes: u32,
    /// CPU per burst node (a quantity).
    pub burst_cpu: String,
    /// Memory per burst node (a quantity).
    pub burst_memory: String,
    /// How full the other tenants make each regular cluster at the start, in percent of every
    /// node (rounded to tenths of a node), cluster by cluster; repeated when there are more
    /// clusters than entries.
    pub background_percent: Vec<u32>,
    /// How many workloads (MultiClusterDeployments) arrive.
    pub workloads: usize,
    /// How many batch jobs arrive (MultiClusterJobs; in the static run, a Job per regular
    /// cluster with an even share of the completions and pods).
    pub jobs: usize,
    /// How long the scenario lasts, in scenario time.
    pub duration: Duration,
    /// When the traffic shifts ([`Event::TrafficShifts`]), as a fraction of the run; `None`
    /// keeps it where it is.
    pub traffic_shift: Option<f64>,
}

impl Shape {
    /// mck8s's testbed: 5 clusters of 5 workers with 4 vCPU / 4 GiB each, a burst cluster of
    /// 10 × 8 CPU / 16 GiB, other tenants filling the clusters 60/40/20/10/0 %, and 40 workloads
    /// and 16 batch jobs over 40 minutes.
    pub fn testbed() -> Shape {
        Shape {
            regular_clusters: 5,
            nodes: 5,
            node_cpu: "4".to_owned(),
            node_memory: "4Gi".to_owned(),
            burst_nodes: 10,
            burst_cpu: "8".to_owned(),
            burst_memory: "16Gi".to_owned(),
            background_percent: vec![60, 40, 20, 10, 0],
            workloads: 40,
            jobs: 16,
            duration: Duration::from_secs(40 * 60),
            traffic_shift: Some(0.5),
        }
    }

    /// Checks what the generator relies on.
    pub fn check(&self) -> Result<(), String> {
        if self.regular_clusters == 0 || self.regular_clusters > 100 {
            return Err(format!(
                "regular clusters: {} is not between 1 and 100",
                self.regular_clusters
            ));
        }
        if self.nodes == 0 || self.burst_nodes == 0 {
            return Err("every cluster needs at least one node".to_owned());
        }
        for (what, value) in [
            ("node cpu", &self.node_cpu),
            ("node memory", &self.node_memory),
            ("burst cpu", &self.burst_cpu),
            ("burst memory", &self.burst_memory),
        ] {
            if !nave_sim_core::quantity::parse_milli(value).is_ok_and(|v| v > 0) {
                return Err(format!("{what}: {value:?} is not a positive quantity"));
            }
        }
        if let Some(p) = self.background_percent.iter().find(|p| **p > 100) {
            return Err(format!("background: {p}% is more than a whole cluster"));
        }
        if self.workloads == 0 {
            return Err("a scenario needs at least one workload".to_owned());
        }
        if let Some(at) = self.traffic_shift
            && !(0.0..1.0).contains(&at)
        {
            return Err(format!(
                "traffic shift: {at} is not a fraction of the run (0 to 1)"
            ));
        }
        if self.duration < Duration::from_secs(60) {
            return Err("a scenario lasts at least one scenario minute".to_owned());
        }
        Ok(())
    }
}

/// One workload as it arrives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadSpec {
    /// Name of the MultiClusterDeployment (and of the Deployments of the static run).
    pub name: String,
    /// Total replicas.
    pub replicas: u32,
    /// CPU request per replica, in millicores.
    pub cpu_millis: u32,
    /// Memory request per replica, in MiB.
    pub memory_mib: u32,
}

/// One batch job as it arrives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobSpec {
    /// Name of the MultiClusterJob (and of the Jobs of the static run).
    pub name: String,
    /// Completions in all.
    pub completions: u32,
    /// Pods at once in all.
    pub parallelism: u32,
    /// CPU request per pod, in millicores.
    pub cpu_millis: u32,
    /// Memory request per pod, in MiB.
    pub memory_mib: u32,
    /// How long each pod runs, in scenario time.
    pub run: Duration,
}

/// Something that happens at a moment of the scenario.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A workload is created.
    Arrive(WorkloadSpec),
    /// A workload's total replicas change.
    Scale {
        /// The workload.
        name: String,
        /// The new total.
        replicas: u32,
    },
    /// A workload is deleted.
    Leave {
        /// The workload.
        name: String,
    },
    /// A batch job is submitted; it is done when all its completions succeeded.
    JobArrives(JobSpec),
    /// Another tenant creates pods in a cluster; the cluster's scheduler places them where they
    /// fit, and they wait Pending where nothing does.
    TenantArrives {
        /// The cluster.
        cluster: String,
        /// The group, to remove them together later.
        group: String,
        /// How many pods, each a tenth of a regular node.
        pods: u32,
    },
    /// A group of another tenant's pods leaves.
    TenantLeaves {
        /// The cluster.
        cluster: String,
        /// The group.
        group: String,
    },
    /// The day moves on: every workload's traffic swaps its two busy regions (see
    /// [`Plan::traffic`]).
    TrafficShifts,
}

/// An event and when it happens, in scenario time from the start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timed {
    /// When, in scenario time.
    pub at: Duration,
    /// What.
    pub event: Event,
}

/// Other tenants' pods present before the scenario starts, bound to one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Background {
    /// The cluster.
    pub cluster: String,
    /// Index of the node in the cluster's nodes sorted by name.
    pub node: usize,
    /// The group the pods leave with.
    pub group: String,
    /// How many pods, each a tenth of a regular node.
    pub pods: u32,
}

/// A generated scenario.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The sizes it was generated for.
    pub shape: Shape,
    /// The seed it was generated from.
    pub seed: u64,
    /// The regular workload clusters.
    pub regular: Vec<ClusterConfig>,
    /// The burst cluster (declared `burstOnly`, labelled [`TIER_LABEL`]`: burst`).
    pub burst: ClusterConfig,
    /// The other tenants' pods at the start.
    pub background: Vec<Background>,
    /// Everything that happens, in order of time.
    pub events: Vec<Timed>,
    /// Each workload's traffic: requests per second in all, and which of the two busy regions
    /// is its home (see [`Plan::traffic`]).
    pub traffic: BTreeMap<String, Demand>,
}

/// A workload's traffic: how many requests per second arrive for it, and where most of them do.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Demand {
    /// Requests per second over every cluster.
    pub requests_per_second: f64,
    /// Its home: 0 for the first busy region ([`BUSY`]), 1 for the second.
    pub home: usize,
}

/// The two regions most traffic arrives at: the regular clusters in `eu-west` (`cluster-1`) and
/// `us-east` (`cluster-3`).
pub const BUSY: [usize; 2] = [0, 2];
/// Share of a workload's traffic arriving in its home region.
const HOME_SHARE: f64 = 0.7;
/// Share arriving in the other busy region; the rest is divided evenly over the other regular
/// clusters (none arrives at the burst cluster).
const AWAY_SHARE: f64 = 0.15;
/// Seeds the traffic's random stream apart from the workloads', so that adding traffic changed
/// nothing else of a seed's scenario.
const TRAFFIC_SALT: u64 = 0x7472_6166_6669_6321;
/// Seeds the batch jobs' stream apart from the workloads' likewise.
const JOB_SALT: u64 = 0x6261_7463_685f_6a6f;

/// CPU (millicores) and memory (bytes) of one tenant pod: a tenth of a regular node.
pub fn tenant_pod_size(shape: &Shape) -> (i128, i128) {
    let milli = |q: &str| nave_sim_core::quantity::parse_milli(q).unwrap_or(0);
    (milli(&shape.node_cpu) / 10, milli(&shape.node_memory) / 10 / 1000)
}

impl Plan {
    /// Generates the scenario of `shape` from `seed`.
    pub fn generate(shape: &Shape, seed: u64) -> Result<Plan, String> {
        shape.check()?;
        let regular: Vec<ClusterConfig> = (0..shape.regular_clusters)
            .map(|i| {
                let (region, latitude, longitude) = SITES[i % SITES.len()];
                cluster_config(
                    &format!("cluster-{}", i + 1),
                    (region, latitude, longitude),
                    shape.nodes,
                    &shape.node_cpu,
                    &shape.node_memory,
                    "regular",
                )
            })
            .collect();
        let mut burst = cluster_config(
            BURST_CLUSTER,
            BURST_SITE,
            shape.burst_nodes,
            &shape.burst_cpu,
            &shape.burst_memory,
            "burst",
        );
        burst.burst_only = true;

        let mut background = Vec::new();
        for (i, cluster) in regular.iter().enumerate() {
            let percent = shape
                .background_percent
                .get(i % shape.background_percent.len().max(1));
            let pods = percent.map_or(0, |p| (p + 5) / 10);
            if pods == 0 {
                continue;
            }
            for node in 0..shape.nodes as usize {
                background.push(Background {
                    cluster: cluster.name.clone(),
                    node,
                    group: format!("{}-node-{node}", cluster.name),
                    pods,
                });
            }
        }

        let mut events = tenant_churn(shape, &regular, &background);
        events.extend(workload_stream(shape, &mut Rng::new(seed)));
        events.extend(job_stream(shape, &mut Rng::new(seed ^ JOB_SALT)));
        let mut rng = Rng::new(seed ^ TRAFFIC_SALT);
        let traffic = events
            .iter()
            .filter_map(|e| match &e.event {
                Event::Arrive(w) => Some(w.name.clone()),
                _ => None,
            })
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .map(|name| {
                let demand = Demand {
                    requests_per_second: (rng.between(20.0, 500.0) * 10.0).round() / 10.0,
                    home: usize::from(rng.between(0.0, 1.0) >= 0.6),
                };
                (name, demand)
            })
            .collect();
        if let Some(at) = shape.traffic_shift {
            events.push(Timed {
                at: Duration::from_secs_f64(shape.duration.as_secs_f64() * at),
                event: Event::TrafficShifts,
            });
        }
        // Stable: events at the same moment keep the order they were generated in.
        events.sort_by_key(|e| e.at);
        Ok(Plan {
            shape: shape.clone(),
            seed,
            regular,
            burst,
            background,
            events,
            traffic,
        })
    }

    /// Requests per second arriving for workload `name` at each regular cluster (by index in
    /// [`Plan::regular`]), before or after the traffic shifts: 70% in its home region, 15% in
    /// the other busy one, the rest divided evenly over the other regular clusters. After the
    /// shift the two busy regions swap. Empty for a workload the plan does not know.
    pub fn traffic(&self, name: &str, shifted: bool) -> Vec<f64> {
        let Some(demand) = self.traffic.get(name) else {
            return Vec::new();
        };
        let n = self.regular.len();
        let busy: Vec<usize> = BUSY.iter().map(|&i| i.min(n - 1)).collect();
        let home = busy[demand.home ^ usize::from(shifted)];
        let away = busy[1 - (demand.home ^ usize::from(shifted))];
        let rest: Vec<usize> = (0..n).filter(|i| !busy.contains(i)).collect();
        let mut shares = vec![0.0; n];
        shares[home] += HOME_SHARE;
        shares[away] += AWAY_SHARE;
        let spare = 1.0 - HOME_SHARE - AWAY_SHARE;
        if rest.is_empty() {
            shares[home] += spare;
        } else {
            for &i in &rest {
                shares[i] += spare / rest.len() as f64;
            }
        }
        shares
            .into_iter()
            .map(|s| s * demand.requests_per_second)
            .collect()
    }

    /// The fleet with every node's timing scaled: `time_scale` scenario seconds pass per real
    /// second, so a pod that takes 10 scenario seconds to start takes 10 / `time_scale` real ones;
    /// links between the sites emulate distance ([`crate::up::with_distance_links`]).
    pub fn fleet(&self, with_burst: bool, time_scale: f64) -> FleetConfig {
        let timing = Timing {
            pod_start_millis: real_millis(POD_START, time_scale),
            pod_delete_millis: real_millis(POD_DELETE, time_scale),
            ..Timing::default()
        };
        let mut clusters = self.regular.clone();
        if with_burst {
            clusters.push(self.burst.clone());
        }
        for c in &mut clusters {
            c.timing = timing.clone();
        }
        // Round trips that grow with distance, as the agents would measure them between these
        // sites; the proximity policy and overflow rank by them.
        crate::up::with_distance_links(FleetConfig {
            clusters,
            ..FleetConfig::default()
        })
    }

    /// The largest total CPU (millicores) the workloads ask for at any moment.
    pub fn peak_cpu_millis(&self) -> u64 {
        let mut live: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
        let mut peak = 0;
        for timed in &self.events {
            match &timed.event {
                Event::Arrive(w) => {
                    live.insert(&w.name, (u64::from(w.replicas), u64::from(w.cpu_millis)));
                }
                Event::Scale { name, replicas } => {
                    if let Some(entry) = live.get_mut(name.as_str()) {
                        entry.0 = u64::from(*replicas);
                    }
                }
                Event::Leave { name } => {
                    live.remove(name.as_str());
                }
                Event::TenantArrives { .. }
                | Event::TenantLeaves { .. }
                | Event::TrafficShifts
                | Event::JobArrives(_) => {}
            }
            peak = peak.max(live.values().map(|(r, cpu)| r * cpu).sum());
        }
        peak
    }

    /// CPU (millicores) of the regular clusters left free by the other tenants at the start.
    pub fn regular_free_cpu_millis(&self) -> u64 {
        let (pod_cpu, _) = tenant_pod_size(&self.shape);
        let node = nave_sim_core::quantity::parse_milli(&self.shape.node_cpu).unwrap_or(0);
        let total = node * i128::from(self.shape.nodes) * self.regular.len() as i128;
        let taken: i128 = self.background.iter().map(|b| i128::from(b.pods) * pod_cpu).sum();
        u64::try_from(total - taken).unwrap_or(0)
    }

    /// CPU (millicores) of the burst cluster.
    pub fn burst_cpu_millis(&self) -> u64 {
        let node = nave_sim_core::quantity::parse_milli(&self.shape.burst_cpu).unwrap_or(0);
        u64::try_from(node * i128::from(self.shape.burst_nodes)).unwrap_or(0)
    }

    /// How many events ask for replicas to become ready (arrivals and scale-ups).
    pub fn readiness_events(&self) -> usize {
        let mut replicas: BTreeMap<&str, u32> = BTreeMap::new();
        let mut n = 0;
        for timed in &self.events {
            match &timed.event {
                Event::Arrive(w) => {
                    replicas.insert(&w.name, w.replicas);
                    n += 1;
                }
                Event::Scale { name, replicas: to } => {
                    if let Some(from) = replicas.insert(name, *to)
                        && *to > from
                    {
                        n += 1;
                    }
                }
                _ => {}
            }
        }
        n
    }
}

/// How long a simulated pod takes to start, in scenario time (image pull and start-up).
const POD_START: Duration = Duration::from_secs(10);
/// How long a simulated pod takes to go once deleted, in scenario time.
const POD_DELETE: Duration = Duration::from_secs(5);

/// `scenario` in real milliseconds at `time_scale`, at least 1.
pub fn real_millis(scenario: Duration, time_scale: f64) -> u64 {
    ((scenario.as_secs_f64() * 1000.0 / time_scale).round() as u64).max(1)
}

/// `scenario` in real time at `time_scale`.
pub fn real(scenario: Duration, time_scale: f64) -> Duration {
    Duration::from_secs_f64(scenario.as_secs_f64() / time_scale)
}

fn cluster_config(
    name: &str,
    (region, latitude, longitude): (&str, f64, f64),
    nodes: u32,
    cpu: &str,
    memory: &str,
    tier: &str,
) -> ClusterConfig {
    ClusterConfig {
        name: name.to_owned(),
        region: Some(region.to_owned()),
        zone: Some(format!("{region}-1a")),
        labels: BTreeMap::from([(TIER_LABEL.to_owned(), tier.to_owned())]),
        coordinates: Some(Coordinates { latitude, longitude }),
        node_pools: vec![NodePool {
            name: "worker".to_owned(),
            count: nodes,
            cpu: cpu.to_owned(),
            memory: memory.to_owned(),
            ..NodePool::default()
        }],
        ..ClusterConfig::default()
    }
}

/// Room that comes and goes under Nave's feet: a tenant fills the emptiest cluster half-way a
/// quarter into the run, the fullest cluster's tenant leaves two nodes, another leaves later, and
/// a last tenant takes 30 % of a fourth cluster.
fn tenant_churn(shape: &Shape, regular: &[ClusterConfig], background: &[Background]) -> Vec<Timed> {
    let n = regular.len();
    let at = |fraction: f64| Duration::from_secs_f64(shape.duration.as_secs_f64() * fraction);
    let mut events = Vec::new();
    let arrive = |fraction: f64, cluster: usize, percent: u32, events: &mut Vec<Timed>| {
        let name = regular[cluster % n].name.clone();
        events.push(Timed {
            at: at(fraction),
            event: Event::TenantArrives {
                group: format!("{name}-tenant-{}", events.len()),
                cluster: name,
                pods: shape.nodes * percent / 10,
            },
        });
    };
    arrive(0.25, n - 1, 50, &mut events);
    let leave = |fraction: f64, cluster: usize, events: &mut Vec<Timed>| {
        let name = &regular[cluster % n].name;
        let groups: Vec<&Background> = background.iter().filter(|b| &b.cluster == name).collect();
        // The last two nodes' tenants go.
        for b in groups.iter().rev().take(2) {
            events.push(Timed {
                at: at(fraction),
                event: Event::TenantLeaves {
                    cluster: b.cluster.clone(),
                    group: b.group.clone(),
                },
            });
        }
    };
    leave(0.35, 0, &mut events);
    leave(0.6, 1, &mut events);
    arrive(0.7, 3, 30, &mut events);
    events
}

/// Two waves of workloads: the first 60 % arrive over the first 45 % of the run and stay long;
/// the rest arrive between 40 % and 75 % and stay briefly, so demand peaks past the middle, above
/// what the regular clusters hold. Each workload is scaled zero, one or two times while it lives.
fn workload_stream(shape: &Shape, rng: &mut Rng) -> Vec<Timed> {
    const CPU: [u32; 4] = [250, 500, 750, 1000];
    const MEMORY: [u32; 4] = [256, 512, 768, 1024];
    let d = shape.duration.as_secs_f64();
    let first_wave = (shape.workloads * 6).div_ceil(10);
    let mut drafts: Vec<(f64, f64, WorkloadSpec)> = (0..shape.workloads)
        .map(|i| {
            let (arrive, life) = if i < first_wave {
                (rng.between(0.0, 0.45) * d, rng.between(0.35, 0.8) * d)
            } else {
                (rng.between(0.4, 0.75) * d, rng.between(0.1, 0.3) * d)
            };
            let spec = WorkloadSpec {
                name: String::new(),
                replicas: rng.int(2, 12),
                cpu_millis: CPU[rng.int(0, 3) as usize],
                memory_mib: MEMORY[rng.int(0, 3) as usize],
            };
            (arrive, life, spec)
        })
        .collect();
    // Named in order of arrival, so `wl-01` is the first to come.
    drafts.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut events = Vec::new();
    for (i, (arrive, life, mut spec)) in drafts.into_iter().enumerate() {
        spec.name = format!("wl-{:02}", i + 1);
        let name = spec.name.clone();
        let mut replicas = spec.replicas;
        let leave = arrive + life;
        events.push(Timed {
            at: Duration::from_secs_f64(arrive),
            event: Event::Arrive(spec),
        });
        let scales = match rng.int(0, 9) {
            0..=3 => 0,
            4..=7 => 1,
            _ => 2,
        };
        let until = leave.min(d);
        let mut times: Vec<f64> = (0..scales)
            .map(|_| arrive + (until - arrive) * rng.between(0.15, 0.85))
            .collect();
        times.sort_by(f64::total_cmp);
        for t in times {
            let mut to = rng.int(2, 12);
            if to == replicas {
                to = if to == 12 { 2 } else { to + 1 };
            }
            replicas = to;
            events.push(Timed {
                at: Duration::from_secs_f64(t),
                event: Event::Scale {
                    name: name.clone(),
                    replicas: to,
                },
            });
        }
        if leave < d {
            events.push(Timed {
                at: Duration::from_secs_f64(leave),
                event: Event::Leave { name },
            });
        }
    }
    events
}

/// Batch jobs arriving over the run, mck8s-like: 2-8 pods at once, one to three rounds of them
/// (2 to 24 completions), each pod running 1-3 scenario minutes; arrivals spread over the first
/// 85% of the run (the last ones may not finish: they count as unfinished, until the end).
fn job_stream(shape: &Shape, rng: &mut Rng) -> Vec<Timed> {
    const CPU: [u32; 3] = [500, 1000, 1500];
    const MEMORY: [u32; 2] = [256, 512];
    let d = shape.duration.as_secs_f64();
    let mut drafts: Vec<(f64, JobSpec)> = (0..shape.jobs)
        .map(|_| {
            let arrive = rng.between(0.05, 0.85) * d;
            let parallelism = rng.int(2, 8);
            let spec = JobSpec {
                name: String::new(),
                completions: parallelism * rng.int(1, 3),
                parallelism,
                cpu_millis: CPU[rng.int(0, 2) as usize],
                memory_mib: MEMORY[rng.int(0, 1) as usize],
                run: Duration::from_secs(u64::from(rng.int(60, 180))),
            };
            (arrive, spec)
        })
        .collect();
    drafts.sort_by(|a, b| a.0.total_cmp(&b.0));
    drafts
        .into_iter()
        .enumerate()
        .map(|(i, (arrive, mut spec))| {
            spec.name = format!("job-{:02}", i + 1);
            Timed {
                at: Duration::from_secs_f64(arrive),
                event: Event::JobArrives(spec),
            }
        })
        .collect()
}

/// SplitMix64: small, fast, and its sequence never changes with a dependency's version, so a
/// seed names the same scenario forever.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[low, high)`.
    pub fn between(&mut self, low: f64, high: f64) -> f64 {
        let unit = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        low + (high - low) * unit
    }

    /// Uniform in `low..=high`.
    pub fn int(&mut self, low: u32, high: u32) -> u32 {
        let span = u64::from(high - low) + 1;
        low + (self.next_u64() % span) as u32
    }
}

/// KubeFed's even division (a ReplicaSchedulingPreference with equal weights and no rebalance):
/// `replicas / clusters` each, the remainder one by one from a position that depends on the
/// workload's name, so remainders do not always land on the same cluster.
pub fn even_split(replicas: u32, clusters: usize, name: &str) -> Vec<u32> {
    if clusters == 0 {
        return Vec::new();
    }
    let n = clusters as u32;
    let mut shares = vec![replicas / n; clusters];
    let start = (fnv1a(name) % u64::from(n)) as usize;
    for i in 0..(replicas % n) as usize {
        shares[(start + i) % clusters] += 1;
    }
    shares
}

/// FNV-1a, a hash whose value is fixed by its definition (std's may change between releases).
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}
