//! The outcome of a placement and its explanation, per cluster, in words a user can read as is.

use std::collections::BTreeMap;
use std::fmt;

use crate::capacity::{Room, Utilization};
use crate::name::ClusterName;
use crate::policy::Strategy;
use crate::proximity::Proximity;

/// How a cluster may be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Chosen by the strategy, or through overflow.
    Regular,
    /// Used only when regular clusters are full, and emptied first on scale-down (`burstOnly`,
    /// or matched by the bursting targets).
    Burst,
}

/// Why a cluster takes no new replicas. The first four also move its replicas away.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Filter {
    /// The current assignment names a cluster the fleet no longer has.
    NotInFleet,
    /// The fleet's admin has not accepted the cluster (or withdrew the acceptance).
    NotAccepted,
    /// Not in the `clusters` allow-list.
    NotAllowed,
    /// `clusterSelector` does not match; the first unmet part, with the value seen.
    SelectorMismatch(String),
    /// Condition `Ready` is not true.
    NotReady,
    /// Cordoned (`unschedulable`).
    Cordoned,
    /// A taint the workload does not tolerate, or tolerates only for a while (boxed: it is rare,
    /// and a filter is moved once per cluster in every decision).
    Tainted(Box<crate::TaintVerdict>),
    /// No capacity report yet.
    CapacityUnknown,
    /// Replicas are being evacuated from it in this decision.
    Evacuating,
    /// Its Kubernetes is older than the workload needs, or unknown (its agent did not say).
    OlderKubernetes {
        /// The cluster's minor version, when known.
        minor: Option<u32>,
        /// The oldest minor version the workload runs on.
        needs: u32,
    },
    /// A StatefulSet's cluster holding ordinals below those of another: it keeps its replicas
    /// but cannot gain any (its range would run into the next cluster's).
    LowerOrdinals {
        /// The cluster holding the highest ordinals, where the StatefulSet grows.
        top: String,
    },
    /// Utilization is above the bursting threshold.
    AboveThreshold {
        /// Utilization in percent (the higher of CPU and memory).
        utilization_percent: u64,
        /// The threshold in percent.
        threshold_percent: u32,
    },
}

impl Filter {
    /// Whether the cluster's current replicas move elsewhere (it is no longer a place for this
    /// workload at all), rather than stay while it only takes nothing new.
    pub fn moves_replicas_away(&self) -> bool {
        match self {
            Filter::NotInFleet | Filter::NotAccepted | Filter::NotAllowed | Filter::SelectorMismatch(_) => {
                true
            }
            Filter::Tainted(verdict) => verdict.evicts,
            _ => false,
        }
    }
}

impl Filter {
    /// The reason in a few words, without its particulars: how a summary counts clusters.
    pub fn kind(&self) -> &'static str {
        match self {
            Filter::NotInFleet => "not in the fleet",
            Filter::NotAccepted => "not accepted",
            Filter::NotAllowed => "not in the allow-list",
            Filter::SelectorMismatch(_) => "clusterSelector",
            Filter::NotReady => "not Ready",
            Filter::Cordoned => "cordoned",
            Filter::Tainted(_) => "taint",
            Filter::CapacityUnknown => "capacity unknown",
            Filter::Evacuating => "evacuating",
            Filter::OlderKubernetes { .. } => "older Kubernetes",
            Filter::LowerOrdinals { .. } => "lower ordinals",
            Filter::AboveThreshold { .. } => "above the bursting threshold",
        }
    }
}

impl fmt::Display for Filter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Filter::NotInFleet => f.write_str("not in the fleet"),
            Filter::NotAccepted => f.write_str("not accepted into the fleet by its admin"),
            Filter::NotAllowed => f.write_str("not in the clusters allow-list"),
            Filter::SelectorMismatch(why) => write!(f, "clusterSelector needs {why}"),
            Filter::NotReady => f.write_str("not Ready"),
            Filter::Cordoned => f.write_str("cordoned (unschedulable)"),
            Filter::Tainted(v) => match (v.evicts, v.tolerated_for) {
                (true, Some(limit)) => write!(
                    f,
                    "taint {} tolerated for {} s, which have passed: its replicas move away",
                    v.taint,
                    limit.as_secs()
                ),
                (true, None) => write!(f, "taint {} not tolerated: its replicas move away", v.taint),
                (false, Some(limit)) => write!(
                    f,
                    "taint {} tolerated for {} s: no new replicas, those here stay that long",
                    v.taint,
                    limit.as_secs()
                ),
                (false, None) => write!(f, "taint {} not tolerated", v.taint),
            },
            Filter::CapacityUnknown => f.write_str("capacity unknown (no agent report yet)"),
            Filter::Evacuating => f.write_str("evacuating"),
            Filter::OlderKubernetes {
                minor: Some(minor),
                needs,
            } => write!(
                f,
                "Kubernetes 1.{minor}, older than the 1.{needs} this workload needs (a StatefulSet's spec.ordinals)"
            ),
            Filter::OlderKubernetes { minor: None, needs } => write!(
                f,
                "Kubernetes version unknown (its agent did not say), and this workload needs 1.{needs} (a StatefulSet's spec.ordinals)"
            ),
            Filter::LowerOrdinals { top } => write!(
                f,
                "holds lower ordinals than {top}: a StatefulSet grows only at its highest ordinals"
            ),
            Filter::AboveThreshold {
                utilization_percent,
                threshold_percent,
            } => {
                write!(
                    f,
                    "utilization {utilization_percent}% above the bursting threshold {threshold_percent}%"
                )
            }
        }
    }
}

/// How a cluster compared in the order it was considered in.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Score {
    /// Replicas of this demand that fit (worst-fit, best-fit, spread rank by it).
    Room(u64),
    /// Replicas of this demand that fit in what measured usage leaves free, when that is less
    /// than the room by requests: worst-fit, best-fit and spread ranked the cluster by it.
    MeasuredHeadroom(u64),
    /// Nearness to the origin, or to the clusters already chosen.
    Proximity(Proximity),
    /// Traffic arriving at the cluster (policy `traffic`).
    Traffic {
        /// The measured value, in the query's unit.
        value: f64,
        /// Its share of the traffic in percent, rounded.
        percent: u32,
    },
}

/// A cluster's position in an order.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rank {
    /// Which order: the strategy's name, or `burst`.
    pub order: &'static str,
    /// 1-based position.
    pub position: usize,
    /// Clusters in the order.
    pub of: usize,
    /// What the cluster was ranked by.
    pub score: Score,
}

impl fmt::Display for Rank {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} rank {} of {}", self.order, self.position, self.of)?;
        match self.score {
            // Room is printed beside the rank anyway.
            Score::Room(_) => Ok(()),
            Score::MeasuredHeadroom(1) => f.write_str(" (by measured usage: headroom for 1 replica)"),
            Score::MeasuredHeadroom(n) => write!(f, " (by measured usage: headroom for {n} replicas)"),
            Score::Proximity(p) => write!(f, " ({p})"),
            Score::Traffic { value, percent } => write!(f, " (traffic {value:.3}, {percent}% of it)"),
        }
    }
}

/// Why replicas were added to a cluster.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Addition {
    /// Filled in strategy order, up to its room.
    Policy,
    /// Shared evenly among the first clusters to reach `minClusters`.
    MinClusters(u32),
    /// Spread evenly.
    Spread,
    /// Its share by static weight (Webster).
    Weight,
    /// Its share of the traffic (Webster, policy `traffic`).
    Traffic,
    /// The chosen clusters were full; nearest to the named one.
    Overflow {
        /// The chosen cluster it is nearest to.
        near: Option<String>,
    },
    /// Regular clusters were full; nearest to the named one.
    Burst {
        /// The cluster already holding replicas it is nearest to.
        near: Option<String>,
    },
    /// Every eligible cluster runs the same number (policy `everywhere`).
    Everywhere,
}

impl fmt::Display for Addition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Addition::Policy => f.write_str("in policy order"),
            Addition::MinClusters(min) => write!(f, "shared evenly to reach minClusters={min}"),
            Addition::Spread => f.write_str("spread evenly"),
            Addition::Weight => f.write_str("by weight (Webster)"),
            Addition::Traffic => f.write_str("by its share of the traffic (Webster)"),
            Addition::Overflow { near: Some(near) } => write!(f, "overflow, nearest to {near}"),
            Addition::Overflow { near: None } => f.write_str("overflow"),
            Addition::Burst { near: Some(near) } => write!(f, "burst, nearest to {near}"),
            Addition::Burst { near: None } => f.write_str("burst"),
            Addition::Everywhere => f.write_str("every eligible cluster runs the same count"),
        }
    }
}

/// Why replicas were removed from a cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Removal {
    /// The cluster is filtered out in a way that moves replicas away; they are placed anew.
    MovedAway,
    /// Evacuated on request; they are placed anew.
    Evacuated,
    /// Scale-down, burst clusters first.
    BurstFirst,
    /// Scale-down, proportionally to what each cluster holds (or to its weight).
    Proportional,
    /// Scale-down to the count every cluster runs (policy `everywhere`).
    PerCluster,
    /// Scale-down of a StatefulSet: the highest ordinals first.
    HighestOrdinals,
}

impl fmt::Display for Removal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Removal::MovedAway => "moved away",
            Removal::Evacuated => "evacuated",
            Removal::BurstFirst => "scale-down, burst clusters first",
            Removal::Proportional => "scale-down, proportionally",
            Removal::PerCluster => "scale-down to the count every cluster runs",
            Removal::HighestOrdinals => "scale-down, highest ordinals first",
        })
    }
}

/// One change to a cluster's replica count.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Change {
    /// Replicas added.
    Added {
        /// How many.
        replicas: u32,
        /// Why.
        why: Addition,
    },
    /// Replicas removed.
    Removed {
        /// How many.
        replicas: u32,
        /// Why.
        why: Removal,
    },
}

/// Why an eligible cluster was given nothing new.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Idle {
    /// The request needed no new replicas.
    NothingToPlace,
    /// Scale-down never adds.
    ScaleDown,
    /// Nothing fits.
    NoRoom,
    /// `maxClusters` clusters were chosen before it.
    BeyondMaxClusters(u32),
    /// Weights are set and it has none: it only takes overflow.
    NoWeight,
    /// Policy `traffic` and no traffic arrives there: it only takes overflow.
    NoTraffic,
    /// Clusters before it took every replica.
    NotNeeded,
    /// A burst cluster, and regular clusters had room.
    BurstNotNeeded,
}

impl fmt::Display for Idle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Idle::NothingToPlace => f.write_str("nothing new to place"),
            Idle::ScaleDown => f.write_str("scale-down adds nowhere"),
            Idle::NoRoom => f.write_str("no room"),
            Idle::BeyondMaxClusters(max) => write!(f, "beyond maxClusters={max}"),
            Idle::NoWeight => f.write_str("no weight, overflow only"),
            Idle::NoTraffic => f.write_str("no traffic arrives here, overflow only"),
            Idle::NotNeeded => f.write_str("not needed, earlier clusters took every replica"),
            Idle::BurstNotNeeded => f.write_str("not needed, regular clusters had room"),
        }
    }
}

/// Everything decided about one cluster, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterDecision {
    /// Cluster name.
    pub cluster: ClusterName,
    /// Regular or burst.
    pub role: Role,
    /// Why it takes no new replicas, if it does not.
    pub filter: Option<Filter>,
    /// Room for more replicas of this demand, when its capacity is known and it is a candidate.
    pub room: Option<Room>,
    /// Its utilization, when its capacity is known and a bursting threshold is set (otherwise
    /// [`CapacityModel::utilization`](crate::CapacityModel::utilization) gives it).
    pub utilization: Option<Utilization>,
    /// Position in the strategy's order (eligible regular clusters), or in the burst order
    /// (eligible burst clusters, when they were needed).
    pub rank: Option<Rank>,
    /// Static weight, when weights are set.
    pub weight: Option<u32>,
    /// Replicas before the decision.
    pub previous: u32,
    /// Replicas after the decision.
    pub replicas: u32,
    /// What changed, in order.
    pub changes: Vec<Change>,
    /// Why it got nothing new, when it was eligible and did not.
    pub idle: Option<Idle>,
}

impl ClusterDecision {
    /// Replicas added by this decision.
    pub fn added(&self) -> u32 {
        self.changes
            .iter()
            .map(|c| match c {
                Change::Added { replicas, .. } => *replicas,
                Change::Removed { .. } => 0,
            })
            .sum()
    }

    /// Replicas removed by this decision.
    pub fn removed(&self) -> u32 {
        self.changes
            .iter()
            .map(|c| match c {
                Change::Removed { replicas, .. } => *replicas,
                Change::Added { .. } => 0,
            })
            .sum()
    }
}

impl fmt::Display for ClusterDecision {
    /// One line, for example
    /// `eu-1: worst-fit rank 1 of 3, room for 12 replicas (cpu-bound), given 4 (kept 4 existing)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.cluster)?;
        let mut head = Vec::new();
        if let Some(filter) = &self.filter {
            head.push(format!("filtered out: {filter}"));
        }
        if self.role == Role::Burst {
            head.push("burst-only".to_owned());
        }
        if let Some(weight) = self.weight {
            head.push(format!("weight {weight}"));
        }
        if let Some(rank) = &self.rank {
            head.push(rank.to_string());
        }
        if let Some(room) = &self.room {
            head.push(room.to_string());
        }
        if let Some(utilization) = &self.utilization
            && matches!(self.filter, Some(Filter::AboveThreshold { .. }))
        {
            head.push(format!("utilization {utilization}"));
        }
        for part in &head {
            write!(f, "{part}, ")?;
        }
        write!(f, "given {}", self.replicas)?;
        let mut why = Vec::new();
        let kept = self.previous - self.removed();
        if kept > 0 {
            why.push(format!("kept {kept} existing"));
        }
        for change in &self.changes {
            why.push(match change {
                Change::Added { replicas, why } => format!("+{replicas} {why}"),
                Change::Removed { replicas, why } => format!("-{replicas} {why}"),
            });
        }
        if let Some(idle) = self.idle {
            why.push(idle.to_string());
        }
        if !why.is_empty() {
            write!(f, " ({})", why.join(", "))?;
        }
        Ok(())
    }
}

/// Something about the decision as a whole that a user should know.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Note {
    /// Fewer clusters hold replicas than `minClusters` asks.
    MinClustersNotMet {
        /// `minClusters`.
        min: u32,
        /// Clusters holding replicas after the decision.
        reached: u32,
    },
    /// More clusters already hold replicas than `maxClusters`; steady placement does not move
    /// them, but adds no further clusters by policy.
    MaxClustersExceeded {
        /// `maxClusters`.
        max: u32,
        /// Regular clusters holding replicas before the decision.
        in_use: u32,
    },
    /// The chosen clusters were full, so replicas overflowed to clusters beyond `maxClusters`.
    OverflowBeyondMaxClusters {
        /// `maxClusters`.
        max: u32,
    },
    /// Policy `everywhere`: a cluster has room for fewer than the count every cluster runs; the
    /// rest are unplaced until room frees there (they never go to another cluster).
    ShortOfRoom {
        /// The cluster.
        cluster: String,
        /// Replicas it runs or was given.
        placed: u32,
        /// The count every cluster runs.
        per_cluster: u32,
    },
    /// Policy `traffic` and no traffic was measured for the workload or its clusters: ranked
    /// and divided as worst-fit.
    NoTraffic,
    /// A taint moves replicas away from a cluster, and the rest of the fleet has no room for
    /// some of them: those stay where they are until room appears.
    StayForRoom {
        /// The tainted cluster.
        cluster: String,
        /// Replicas that stay.
        replicas: u32,
    },
    /// A StatefulSet's layout is being read back from the clusters (the stored one is gone): its
    /// replicas beyond those known to run wait until every Ready cluster has reported.
    AwaitingReports {
        /// Clusters not heard from yet (the first few).
        clusters: Vec<String>,
        /// Replicas waiting.
        replicas: u32,
    },
    /// A StatefulSet's replicas wait for ordinals another cluster ran until it reports them
    /// stopped: an ordinal never runs in two clusters at once.
    OrdinalsReleasing {
        /// The cluster still running them (or not yet reporting them gone).
        cluster: String,
        /// The first and last ordinal waited for.
        ordinals: (u32, u32),
        /// Replicas waiting.
        replicas: u32,
    },
}

impl Note {
    /// Replicas this note holds back from running though they have room: a StatefulSet's
    /// waiting for ordinals another cluster still stops ([`Note::OrdinalsReleasing`]).
    pub fn waiting_replicas(&self) -> u32 {
        match self {
            Note::OrdinalsReleasing { replicas, .. } | Note::AwaitingReports { replicas, .. } => *replicas,
            _ => 0,
        }
    }
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Note::MinClustersNotMet { min, reached } => {
                write!(f, "minClusters={min} not met: {reached} cluster(s) hold replicas")
            }
            Note::MaxClustersExceeded { max, in_use } => write!(
                f,
                "maxClusters={max} but {in_use} clusters already hold replicas; they stay (steady placement)"
            ),
            Note::OverflowBeyondMaxClusters { max } => {
                write!(
                    f,
                    "the {max} chosen cluster(s) were full; overflow went beyond maxClusters={max}"
                )
            }
            Note::ShortOfRoom {
                cluster,
                placed,
                per_cluster,
            } => write!(
                f,
                "{cluster} has room for {placed} of the {per_cluster} replica(s) every cluster runs; the rest wait for room there"
            ),
            Note::NoTraffic => f.write_str(
                "no traffic measured for this workload or its clusters (no traffic query, or its values are stale): placed as worst-fit"
            ),
            Note::StayForRoom { cluster, replicas } => write!(
                f,
                "{replicas} replica(s) stay in {cluster} despite its taint: no other cluster has room for them yet"
            ),
            Note::AwaitingReports { clusters, replicas } => write!(
                f,
                "{replicas} replica(s) wait until {} report(s) what runs there: a StatefulSet's ordinals are laid out anew only from every cluster's word",
                clusters.join(", ")
            ),
            Note::OrdinalsReleasing {
                cluster,
                ordinals: (first, last),
                replicas,
            } => write!(
                f,
                "{replicas} replica(s) wait until {cluster} reports ordinals {first}-{last} stopped: an ordinal never runs in two clusters"
            ),
        }
    }
}

/// A placement: replicas per cluster, what could not be placed, and why, for every cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The strategy used.
    pub strategy: Strategy,
    /// Replicas asked for in total (with `everywhere`, the count per cluster times the clusters).
    pub replicas: u32,
    /// Replicas per cluster, clusters with none left out.
    pub assignment: BTreeMap<String, u32>,
    /// Replicas that fit nowhere; the caller reports them (`Degraded`) and asks again when
    /// capacity changes.
    pub unplaced: u32,
    /// Every cluster of the fleet and of the current assignment, by name.
    pub clusters: Vec<ClusterDecision>,
    /// Remarks about the decision as a whole.
    pub notes: Vec<Note>,
}

/// The clusters an explanation names, and what it says of the others in a line.
#[derive(Debug, Clone, PartialEq)]
pub struct Named<'a> {
    /// The clusters named, by name.
    pub clusters: Vec<&'a ClusterDecision>,
    /// Eligible clusters left out (each given nothing).
    pub eligible_left_out: usize,
    /// Clusters filtered out and left out, by [`Filter::kind`].
    pub filtered_left_out: BTreeMap<&'static str, usize>,
}

impl fmt::Display for Named<'_> {
    /// What is left out, as `4980 more cluster(s): 4900 eligible, given nothing; 80 filtered
    /// out (clusterSelector 30, not Ready 50)`; nothing when nothing is.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let filtered: usize = self.filtered_left_out.values().sum();
        if self.eligible_left_out + filtered == 0 {
            return Ok(());
        }
        write!(f, "{} more cluster(s):", self.eligible_left_out + filtered)?;
        if self.eligible_left_out > 0 {
            write!(f, " {} eligible, given nothing", self.eligible_left_out)?;
            if filtered > 0 {
                f.write_str(";")?;
            }
        }
        if filtered > 0 {
            write!(f, " {filtered} filtered out (")?;
            for (i, (kind, n)) in self.filtered_left_out.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{kind} {n}")?;
            }
            f.write_str(")")?;
        }
        Ok(())
    }
}

impl Decision {
    /// How many clusters an explanation names at least, when the fleet has them (see
    /// [`Decision::named`]): in a fleet of thousands, a line per cluster in every placement would
    /// make its explanation, its event and its stored row grow with the fleet.
    pub const NAMED_CLUSTERS: usize = 20;

    /// The clusters an explanation names: every cluster that holds replicas, held some before or
    /// changed; then, up to [`Decision::NAMED_CLUSTERS`] in all, one cluster filtered out for
    /// each reason, the eligible clusters in the order they ranked, and the others in name
    /// order. The others are counted. A decision asks for the whole
    /// fleet's explanation through [`Decision::clusters`].
    pub fn named(&self) -> Named<'_> {
        let limit = Self::NAMED_CLUSTERS;
        let mut named = vec![false; self.clusters.len()];
        let mut count = 0;
        let involved = |c: &ClusterDecision| c.previous > 0 || c.replicas > 0 || !c.changes.is_empty();
        for (i, c) in self.clusters.iter().enumerate() {
            if involved(c) {
                named[i] = true;
                count += 1;
            }
        }
        if self.clusters.len() > limit {
            let mut ranked: Vec<(usize, usize)> = self
                .clusters
                .iter()
                .enumerate()
                .filter(|(i, c)| !named[*i] && c.filter.is_none())
                .filter_map(|(i, c)| c.rank.map(|r| (r.position, i)))
                .collect();
            // At most `limit` are named: only the best `limit` ranks need sorting (a fleet of
            // thousands has thousands of eligible clusters).
            if ranked.len() > limit {
                ranked.select_nth_unstable(limit);
                ranked.truncate(limit);
            }
            ranked.sort_unstable();
            let mut kinds = std::collections::BTreeSet::new();
            let one_per_reason = self.clusters.iter().enumerate().filter_map(|(i, c)| {
                let kind = c.filter.as_ref()?.kind();
                kinds.insert(kind).then_some(i)
            });
            let order = one_per_reason
                .chain(ranked.into_iter().map(|(_, i)| i))
                .chain(0..self.clusters.len());
            for i in order {
                if count >= limit {
                    break;
                }
                if !named[i] {
                    named[i] = true;
                    count += 1;
                }
            }
        } else {
            named.iter_mut().for_each(|n| *n = true);
        }
        let mut out = Named {
            clusters: Vec::with_capacity(count),
            eligible_left_out: 0,
            filtered_left_out: BTreeMap::new(),
        };
        for (c, named) in self.clusters.iter().zip(named) {
            match (named, &c.filter) {
                (true, _) => out.clusters.push(c),
                (false, None) => out.eligible_left_out += 1,
                (false, Some(filter)) => *out.filtered_left_out.entry(filter.kind()).or_default() += 1,
            }
        }
        out
    }

    /// Replicas placed (`replicas - unplaced`).
    pub fn placed(&self) -> u32 {
        self.assignment.values().sum()
    }

    /// The explanation for one cluster.
    pub fn cluster(&self, name: &str) -> Option<&ClusterDecision> {
        self.clusters
            .binary_search_by(|c| (*c.cluster).cmp(name))
            .ok()
            .map(|i| &self.clusters[i])
    }

    /// Replicas assigned to `name` (zero when none).
    pub fn replicas_in(&self, name: &str) -> u32 {
        self.assignment.get(name).copied().unwrap_or(0)
    }

    /// The first line of the explanation alone, for example
    /// `worst-fit: 3 replica(s) asked, 3 placed on 2 cluster(s)`.
    pub fn summary(&self) -> String {
        let mut line = String::new();
        // Writing to a String does not fail.
        let _ = self.write_summary(&mut line);
        line
    }

    fn write_summary(&self, f: &mut impl fmt::Write) -> fmt::Result {
        let placed = self.placed();
        write!(
            f,
            "{}: {} replica(s) asked, {} placed on {} cluster(s)",
            self.strategy,
            self.replicas,
            placed,
            self.assignment.len()
        )?;
        let waiting: u32 = self.notes.iter().map(Note::waiting_replicas).sum();
        let no_room = self.unplaced.saturating_sub(waiting);
        if no_room > 0 {
            write!(f, ", {no_room} unplaced (no room left in any eligible cluster)")?;
        }
        for note in self.notes.iter().filter(|n| n.waiting_replicas() > 0) {
            write!(f, "; {note}")?;
        }
        Ok(())
    }
}

impl fmt::Display for Decision {
    /// A summary line, one line per cluster named (by name; see [`Decision::named`]), a line
    /// counting the others, then the notes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_summary(f)?;
        let named = self.named();
        for cluster in &named.clusters {
            write!(f, "\n  {cluster}")?;
        }
        let left_out = named.to_string();
        if !left_out.is_empty() {
            write!(f, "\n  {left_out}")?;
        }
        for note in &self.notes {
            write!(f, "\n  note: {note}")?;
        }
        Ok(())
    }
}
