//! The placement algorithm: filter, rank, divide, overflow, burst; or shrink.

use std::collections::BTreeSet;

use crate::capacity::Capacity;
use crate::decision::{
    Addition, Change, ClusterDecision, Decision, Filter, Idle, Note, Rank, Removal, Role, Score,
};
use crate::divide::{Slot, remove_proportional, water_fill, webster};
use crate::fleet::{Cluster, Fleet};
use crate::ledger::Ledger;
use crate::policy::{Request, Strategy};
use crate::proximity::{Point, Proximity};
use crate::traffic::Traffic;

#[cfg(test)]
mod properties;
#[cfg(test)]
mod tests;

/// Decides where `request`'s replicas go on `fleet`, with room already promised in `ledger`
/// taken out.
///
/// Steady: replicas in `request.current` stay unless their cluster was dropped from the
/// placement (allow-list, selector, gone from the fleet) or is evacuated. A scale-up places only
/// the missing replicas; a scale-down empties burst clusters first, then removes proportionally,
/// and adds nowhere. What fits nowhere is reported in [`Decision::unplaced`]. The same inputs
/// always give the same decision; ties go to the earlier cluster name.
pub fn decide(fleet: &Fleet, ledger: &Ledger, request: &Request) -> Decision {
    let mut t = evaluate(fleet, ledger, request);
    if request.policy.strategy == Strategy::Everywhere {
        let (asked, unplaced, notes) = everywhere(&mut t, request);
        return finish(t, request, asked, unplaced, notes);
    }
    let ranked = rank(&mut t, fleet, request);
    let kept: u64 = t.cands.iter().map(|c| c.kept).sum();
    let asked = u64::from(request.replicas);
    let mut notes = Vec::new();
    if matches!(&request.policy.strategy, Strategy::Traffic(t) if !t.measured()) {
        notes.push(Note::NoTraffic);
    }
    let unplaced = if asked >= kept {
        let unplaced = grow(&mut t, &ranked, request, asked - kept, &mut notes);
        stay_for_room(&mut t, unplaced, &mut notes)
    } else {
        shrink(&mut t, request, kept - asked);
        0
    };
    finish(t, request, u64::from(request.replicas), unplaced, notes)
}

/// Policy `everywhere`: every eligible cluster (regular or burst) to `request.replicas`, as far
/// as its room goes; a cluster that is not eligible keeps what it has (up to that count) unless
/// its filter moves replicas away. Returns the replicas asked in total, those unplaced, and a
/// note per cluster short of room.
fn everywhere(t: &mut Table<'_>, request: &Request) -> (u64, u64, Vec<Note>) {
    let per_cluster = u64::from(request.replicas);
    let (mut asked, mut unplaced, mut notes) = (0, 0, Vec::new());
    for i in 0..t.cands.len() {
        let (kept, free, eligible) = (t.cands[i].kept, t.cands[i].free, t.cands[i].eligible);
        if kept > per_cluster {
            t.remove(i, kept - per_cluster, Removal::PerCluster);
            if eligible {
                t.outs[i].idle = Some(Idle::ScaleDown);
            }
        }
        if !eligible {
            asked += kept.min(per_cluster);
            continue;
        }
        asked += per_cluster;
        let want = per_cluster.saturating_sub(kept);
        let give = want.min(free);
        t.add(i, give, Addition::Everywhere);
        if give < want {
            unplaced += want - give;
            notes.push(Note::ShortOfRoom {
                cluster: t.outs[i].cluster.to_string(),
                placed: to_u32(kept + give),
                per_cluster: request.replicas,
            });
        }
        if give == 0 && t.outs[i].idle.is_none() {
            t.outs[i].idle = Some(if want == 0 {
                Idle::NothingToPlace
            } else {
                Idle::NoRoom
            });
        }
    }
    (asked, unplaced, notes)
}

/// The traffic replicas are divided by: policy `traffic` with traffic measured and no static
/// weights (which take precedence; the schema refuses both together).
fn dividing_traffic(request: &Request) -> Option<&Traffic> {
    match &request.policy.strategy {
        Strategy::Traffic(t) if request.policy.weights.is_empty() && t.measured() => Some(t),
        _ => None,
    }
}

/// Whether replicas are divided by weight: static weights, or traffic's.
fn weighted(request: &Request) -> bool {
    !request.policy.weights.is_empty() || dividing_traffic(request).is_some()
}

/// A cluster's working state while the decision is being made; its explanation is built beside
/// it in [`Table::outs`], so the large explanation is written once and never moved.
#[derive(Debug)]
struct Cand<'a> {
    cluster: Option<&'a Cluster>,
    role: Role,
    /// Static weight, or its traffic's in millionths with policy `traffic`; zero when replicas
    /// are not divided by weight or it has none.
    weight: u64,
    /// Replicas staying from the current assignment (after moves, before scale-down).
    kept: u64,
    /// Room left for new replicas; zero when filtered.
    free: u64,
    /// Replicas that fit in what measured usage leaves, when usage is measured; ranking takes
    /// the lower of this and `free`, filling never more than `free`.
    headroom: Option<u64>,
    added: u64,
    eligible: bool,
    changed: bool,
}

impl Cand<'_> {
    fn holds(&self) -> u64 {
        self.kept + self.added
    }

    /// What the strategies rank by: the room by requests, or less when measured usage says the
    /// cluster is busier than its requests show.
    fn score(&self) -> u64 {
        self.headroom.map_or(self.free, |h| h.min(self.free))
    }
}

/// Every cluster, in name order: working state and explanation at the same index.
#[derive(Debug)]
struct Table<'a> {
    cands: Vec<Cand<'a>>,
    outs: Vec<ClusterDecision>,
}

impl Table<'_> {
    fn add(&mut self, i: usize, replicas: u64, why: Addition) {
        if replicas == 0 {
            return;
        }
        let cand = &mut self.cands[i];
        cand.added += replicas;
        cand.free -= replicas;
        cand.changed = true;
        self.outs[i].changes.push(Change::Added {
            replicas: to_u32(replicas),
            why,
        });
    }

    fn remove(&mut self, i: usize, replicas: u64, why: Removal) {
        if replicas == 0 {
            return;
        }
        let cand = &mut self.cands[i];
        cand.kept -= replicas;
        cand.changed = true;
        self.outs[i].changes.push(Change::Removed {
            replicas: to_u32(replicas),
            why,
        });
    }
}

fn to_u32(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn evaluate<'a>(fleet: &'a Fleet, ledger: &Ledger, request: &Request) -> Table<'a> {
    let policy = &request.policy;
    let allow: BTreeSet<&str> = policy.clusters.iter().map(String::as_str).collect();
    let mut t = Table {
        cands: Vec::with_capacity(fleet.len()),
        outs: Vec::with_capacity(fleet.len()),
    };
    let layout = fleet.layout();
    let mut prepared = layout.prepare(&request.demand);
    let traffic = dividing_traffic(request);
    let ordinal_top = ordinal_top(request);
    // Both in name order: the ledger is walked beside the fleet instead of searched once for
    // each of thousands of clusters (in a burst it holds room in many of them).
    let mut ledger = ledger.by_cluster().peekable();
    for (index, cluster) in fleet.iter().enumerate() {
        let name = cluster.name.as_str();
        while ledger.next_if(|(reserved, _)| *reserved < name).is_some() {}
        let reservations = ledger
            .next_if(|(reserved, _)| *reserved == name)
            .map_or(&[][..], |(_, r)| r);
        let burst = cluster.burst_only
            || policy
                .bursting
                .targets
                .as_ref()
                .is_some_and(|t| t.matches(&cluster.labels));
        let role = if burst { Role::Burst } else { Role::Regular };
        let mut filter = if cluster.unaccepted {
            Some(Filter::NotAccepted)
        } else if !allow.is_empty() && !allow.contains(name) {
            Some(Filter::NotAllowed)
        } else {
            policy
                .cluster_selector
                .as_ref()
                .and_then(|s| s.first_mismatch(&cluster.labels))
                .map(Filter::SelectorMismatch)
                .or_else(|| {
                    crate::taint_verdict(&cluster.taints, &policy.tolerations)
                        .map(|v| Filter::Tainted(Box::new(v)))
                })
        };
        // Room is not worth computing for a cluster the workload may not use at all.
        let (room, utilization, headroom) = match (&cluster.capacity, &filter) {
            (Capacity::Known(model), None) => {
                // Utilization is a second pass over every node; only the threshold needs it.
                let utilization = policy
                    .bursting
                    .threshold_percent
                    .map(|_| model.utilization(reservations));
                let room = if reservations.is_empty() {
                    layout.room(index, &request.demand, &mut prepared)
                } else {
                    None
                };
                (
                    Some(room.unwrap_or_else(|| model.room(&request.demand, reservations))),
                    utilization,
                    model.headroom(&request.demand, reservations),
                )
            }
            _ => (None, None, None),
        };
        let evacuating = request.evacuate.get(name).copied().unwrap_or(0);
        let previous = request.current.get(name).copied().unwrap_or(0);
        if filter.is_none() {
            filter = if !cluster.ready {
                Some(Filter::NotReady)
            } else if cluster.unschedulable {
                Some(Filter::Cordoned)
            } else if room.is_none() {
                Some(Filter::CapacityUnknown)
            } else if request.evacuate.contains_key(name) {
                Some(Filter::Evacuating)
            } else if let Some(needs) = request.min_kubernetes_minor
                && cluster.kubernetes_minor.is_none_or(|minor| minor < needs)
            {
                Some(Filter::OlderKubernetes {
                    minor: cluster.kubernetes_minor,
                    needs,
                })
            } else if let Some(top) = ordinal_top.filter(|top| previous > 0 && *top != name) {
                Some(Filter::LowerOrdinals { top: top.to_owned() })
            } else {
                match (role, policy.bursting.threshold_percent, utilization) {
                    (Role::Regular, Some(threshold), Some(u)) if u.exceeds(threshold) => {
                        Some(Filter::AboveThreshold {
                            utilization_percent: u.percent(),
                            threshold_percent: threshold,
                        })
                    }
                    _ => None,
                }
            };
        }
        let eligible = filter.is_none();
        let moves_away = filter.as_ref().is_some_and(Filter::moves_replicas_away);
        let free = if eligible {
            room.as_ref().map_or(0, |r| r.replicas)
        } else {
            0
        };
        let weight = (!policy.weights.is_empty()).then(|| policy.weights.get(name).copied().unwrap_or(0));
        let by_weight = match traffic {
            Some(traffic) => traffic.weight(name),
            None => u64::from(weight.unwrap_or(0)),
        };
        t.cands.push(Cand {
            cluster: Some(cluster),
            role,
            weight: by_weight,
            kept: u64::from(previous),
            free,
            headroom,
            added: 0,
            eligible,
            changed: false,
        });
        t.outs.push(ClusterDecision {
            cluster: layout.name(index),
            role,
            filter,
            room,
            utilization,
            rank: None,
            weight,
            previous,
            replicas: 0,
            changes: Vec::new(),
            idle: None,
        });
        move_away(&mut t, u64::from(previous), moves_away, evacuating);
    }
    let mut absent = false;
    for (name, &previous) in &request.current {
        if previous > 0 && fleet.get(name).is_none() {
            absent = true;
            t.cands.push(Cand {
                cluster: None,
                role: Role::Regular,
                weight: 0,
                kept: u64::from(previous),
                free: 0,
                headroom: None,
                added: 0,
                eligible: false,
                changed: false,
            });
            t.outs.push(ClusterDecision {
                cluster: name.as_str().into(),
                role: Role::Regular,
                filter: Some(Filter::NotInFleet),
                room: None,
                utilization: None,
                rank: None,
                weight: None,
                previous,
                replicas: 0,
                changes: Vec::new(),
                idle: None,
            });
            move_away(&mut t, u64::from(previous), true, 0);
        }
    }
    if absent {
        let mut rows: Vec<_> = t.cands.into_iter().zip(t.outs).collect();
        rows.sort_by(|a, b| a.1.cluster.cmp(&b.1.cluster));
        (t.cands, t.outs) = rows.into_iter().unzip();
    }
    t
}

/// A taint that moves replicas away moves only what the rest of the fleet has room for: the
/// replicas that would be unplaced stay in the tainted clusters (in name order) until room
/// appears, so a drain never lowers what runs. Answers what is still unplaced.
fn stay_for_room(t: &mut Table<'_>, mut unplaced: u64, notes: &mut Vec<Note>) -> u64 {
    for i in 0..t.cands.len() {
        if unplaced == 0 {
            break;
        }
        if !matches!(&t.outs[i].filter, Some(Filter::Tainted(v)) if v.evicts) {
            continue;
        }
        let changes = &mut t.outs[i].changes;
        let Some(at) = changes.iter().position(|c| {
            matches!(
                c,
                Change::Removed {
                    why: Removal::MovedAway,
                    ..
                }
            )
        }) else {
            continue;
        };
        let Change::Removed { replicas, .. } = &mut changes[at] else {
            continue;
        };
        let back = u64::from(*replicas).min(unplaced);
        *replicas -= to_u32(back);
        if *replicas == 0 {
            changes.remove(at);
        }
        t.cands[i].kept += back;
        unplaced -= back;
        notes.push(Note::StayForRoom {
            cluster: t.outs[i].cluster.to_string(),
            replicas: to_u32(back),
        });
    }
    unplaced
}

/// Takes replicas out of the last cluster added to `t`, which holds `kept`, if its filter moves
/// them away or an evacuation says so.
///
/// Told rather than read back from the row just written: reading a field of a row right after
/// it was copied into place waits for the copy to land, and that wait was a twentieth of a
/// decision over 1,000 clusters.
fn move_away(t: &mut Table<'_>, kept: u64, moves_away: bool, evacuating: u32) {
    let i = t.cands.len() - 1;
    if moves_away {
        t.remove(i, kept, Removal::MovedAway);
    } else {
        t.remove(i, kept.min(u64::from(evacuating)), Removal::Evacuated);
    }
}

/// Eligible regular clusters in strategy order (indices into `cands`, which are in name order,
/// so an index comparison is the name tie-break). Records each one's rank.
fn rank(t: &mut Table<'_>, fleet: &Fleet, request: &Request) -> Vec<usize> {
    let cands = &t.cands;
    let mut ranked: Vec<usize> = (0..cands.len())
        .filter(|&i| cands[i].eligible && cands[i].role == Role::Regular)
        .collect();
    let strategy = &request.policy.strategy;
    let mut proximity: Vec<Option<Proximity>> = Vec::new();
    let traffic = dividing_traffic(request);
    match strategy {
        // Most traffic first, then the most room.
        Strategy::Traffic(_) if traffic.is_some() => {
            ranked.sort_by(|&a, &b| {
                (cands[b].weight, cands[b].score())
                    .cmp(&(cands[a].weight, cands[a].score()))
                    .then(a.cmp(&b))
            });
        }
        // `everywhere` ranks nothing (see [`everywhere`]); listed so the match stays complete.
        // Traffic without any measured ranks as worst-fit.
        Strategy::WorstFit | Strategy::Spread | Strategy::Everywhere | Strategy::Traffic(_) => {
            // Largest score first, then name order: sorting (score, index) pairs, each with its
            // key computed once, is several times cheaper than comparing through the table.
            // Both fit one u64 in any real fleet (scores below 2^40 replicas, indexes below
            // 2^24 clusters), which sorts faster still.
            let packed = cands.len() < 1 << 24 && ranked.iter().all(|&i| cands[i].score() < 1 << 40);
            if packed {
                let mut keyed: Vec<u64> = ranked
                    .iter()
                    .map(|&i| (((1u64 << 40) - 1 - cands[i].score()) << 24) | i as u64)
                    .collect();
                keyed.sort_unstable();
                ranked = keyed
                    .into_iter()
                    .map(|k| (k & ((1 << 24) - 1)) as usize)
                    .collect();
            } else {
                let mut keyed: Vec<(std::cmp::Reverse<u64>, usize)> = ranked
                    .iter()
                    .map(|&i| (std::cmp::Reverse(cands[i].score()), i))
                    .collect();
                keyed.sort_unstable();
                ranked = keyed.into_iter().map(|(_, i)| i).collect();
            }
        }
        Strategy::BestFit => {
            let need = u64::from(request.replicas)
                .saturating_sub(cands.iter().map(|c| c.kept).sum::<u64>())
                .max(1);
            // Smallest room that takes everything, then the largest of those that do not (fewest
            // clusters), then the full ones.
            let key = |free: u64| match free {
                f if f >= need => (0, f),
                0 => (2, 0),
                f => (1, u64::MAX - f),
            };
            ranked.sort_by(|&a, &b| key(cands[a].score()).cmp(&key(cands[b].score())).then(a.cmp(&b)));
        }
        Strategy::Proximity(origin) => {
            let point = Point::of_origin(origin, fleet);
            proximity = cands
                .iter()
                .map(|c| c.cluster.map(|cl| point.proximity(cl)))
                .collect();
            let near = |i: usize| proximity[i].unwrap_or(FAR);
            ranked.sort_by(|&a, &b| near(a).nearness_cmp(&near(b)).then(a.cmp(&b)));
        }
    }
    let of = ranked.len();
    for (position, &i) in ranked.iter().enumerate() {
        let c = &cands[i];
        let score = match (proximity.get(i).copied().flatten(), traffic) {
            (Some(p), _) => Score::Proximity(p),
            (None, Some(traffic)) => {
                let name = c.cluster.map_or("", |cl| cl.name.as_str());
                Score::Traffic {
                    value: traffic.of(name),
                    percent: (traffic.share(name) * 100.0).round() as u32,
                }
            }
            (None, None) if c.score() < c.free => Score::MeasuredHeadroom(c.score()),
            (None, None) => Score::Room(c.free),
        };
        t.outs[i].rank = Some(Rank {
            order: strategy.name(),
            position: position + 1,
            of,
            score,
        });
    }
    ranked
}

const FAR: Proximity = Proximity {
    latency: None,
    estimated_latency: None,
    distance_km: None,
    topology: crate::proximity::Topology::Elsewhere,
};

/// Places `need` new replicas; returns how many fit nowhere.
fn grow(t: &mut Table<'_>, ranked: &[usize], request: &Request, need: u64, notes: &mut Vec<Note>) -> u64 {
    let policy = &request.policy;
    let by_traffic = dividing_traffic(request).is_some();
    let weighted = weighted(request);
    let weight = |c: &Cand<'_>| c.weight;
    let in_use = t
        .cands
        .iter()
        .filter(|c| c.role == Role::Regular && c.kept > 0)
        .count();
    if let Some(max) = policy.max_clusters
        && in_use > max as usize
    {
        notes.push(Note::MaxClustersExceeded {
            max,
            in_use: in_use as u32,
        });
    }

    // The preferred clusters: those already holding replicas, then the best-ranked others up to
    // maxClusters.
    let mut slots_left = policy.max_clusters.map(|m| (m as usize).saturating_sub(in_use));
    let mut preferred = Vec::new();
    let mut beyond = Vec::new();
    for &i in ranked.iter().filter(|&&i| !weighted || weight(&t.cands[i]) > 0) {
        if t.cands[i].kept > 0 {
            preferred.push(i);
        } else if t.cands[i].free > 0 {
            match &mut slots_left {
                Some(0) => beyond.push(i),
                Some(n) => {
                    *n -= 1;
                    preferred.push(i);
                }
                None => preferred.push(i),
            }
        }
    }

    let mut left = need;
    let slots = |cands: &[Cand<'_>], set: &[usize]| -> Vec<Slot> {
        set.iter()
            .map(|&i| Slot {
                base: cands[i].kept,
                room: cands[i].free,
            })
            .collect()
    };
    if weighted {
        if by_traffic
            && let Some(min) = policy.min_clusters
            && (in_use as u64) < u64::from(min)
        {
            // One replica in each of the first clusters in traffic order (then by room) that
            // hold none, until minClusters hold some; the traffic divides the rest.
            let mut holding = in_use as u64;
            for &i in ranked {
                if holding >= u64::from(min) || left == 0 {
                    break;
                }
                if t.cands[i].kept == 0 && t.cands[i].free > 0 {
                    t.add(i, 1, Addition::MinClusters(min));
                    left -= 1;
                    holding += 1;
                }
            }
        }
        let weights: Vec<u64> = preferred.iter().map(|&i| weight(&t.cands[i])).collect();
        let slots: Vec<Slot> = preferred
            .iter()
            .map(|&i| Slot {
                base: t.cands[i].holds(),
                room: t.cands[i].free,
            })
            .collect();
        let given = webster(&slots, &weights, left);
        let why = if by_traffic {
            Addition::Traffic
        } else {
            Addition::Weight
        };
        left -= apply(t, &preferred, &given, || why.clone());
    } else if policy.strategy == Strategy::Spread {
        let given = water_fill(&slots(&t.cands, &preferred), left);
        left -= apply(t, &preferred, &given, || Addition::Spread);
    } else {
        if let Some(min) = policy.min_clusters
            && (in_use as u64) < u64::from(min)
        {
            let mut first = Vec::new();
            let mut newcomers = in_use as u64;
            for &i in &preferred {
                if t.cands[i].kept > 0 {
                    first.push(i);
                } else if newcomers < u64::from(min) {
                    newcomers += 1;
                    first.push(i);
                }
            }
            let given = water_fill(&slots(&t.cands, &first), left);
            left -= apply(t, &first, &given, || Addition::MinClusters(min));
        }
        for &i in &preferred {
            let give = left.min(t.cands[i].free);
            t.add(i, give, Addition::Policy);
            left -= give;
        }
    }

    // Overflow beyond the preferred set, nearest to what is already chosen.
    if left > 0 && (policy.max_clusters.is_some() || weighted) {
        let chosen: BTreeSet<usize> = preferred.iter().copied().collect();
        let pool: Vec<usize> = ranked
            .iter()
            .copied()
            .filter(|i| !chosen.contains(i) && t.cands[*i].free > 0)
            .collect();
        // Under policy `traffic`, nearest to where the traffic arrives.
        let anchors = if by_traffic {
            t.cands
                .iter()
                .filter(|c| c.weight > 0)
                .filter_map(|c| c.cluster)
                .collect()
        } else {
            anchors(&t.cands, &preferred)
        };
        let order = by_nearness(&t.cands, &pool, &anchors, false);
        for (i, near) in order.into_iter().map(|(i, near, _)| (i, near)) {
            let give = left.min(t.cands[i].free);
            if give > 0
                && (!weighted || by_traffic)
                && let Some(max) = policy.max_clusters
                && !notes.contains(&Note::OverflowBeyondMaxClusters { max })
            {
                notes.push(Note::OverflowBeyondMaxClusters { max });
            }
            t.add(i, give, Addition::Overflow { near });
            left -= give;
        }
    }

    // Burst clusters last, nearest to what is already chosen.
    if left > 0 {
        let pool: Vec<usize> = (0..t.cands.len())
            .filter(|&i| t.cands[i].eligible && t.cands[i].role == Role::Burst)
            .collect();
        let order = by_nearness(&t.cands, &pool, &anchors(&t.cands, &preferred), false);
        let of = order.len();
        for (position, (i, near, score)) in order.into_iter().enumerate() {
            t.outs[i].rank = Some(Rank {
                order: "burst",
                position: position + 1,
                of,
                score,
            });
            let give = left.min(t.cands[i].free);
            t.add(i, give, Addition::Burst { near });
            left -= give;
        }
    }

    for (c, out) in t
        .cands
        .iter()
        .zip(t.outs.iter_mut())
        .filter(|(c, _)| c.eligible && c.added == 0)
    {
        out.idle = Some(if need == 0 {
            Idle::NothingToPlace
        } else if c.free == 0 {
            Idle::NoRoom
        } else if c.role == Role::Burst {
            Idle::BurstNotNeeded
        } else if by_traffic && weight(c) == 0 {
            Idle::NoTraffic
        } else if weighted && weight(c) == 0 {
            Idle::NoWeight
        } else {
            Idle::NotNeeded
        });
    }
    for &i in &beyond {
        if t.cands[i].added == 0
            && let Some(max) = policy.max_clusters
        {
            t.outs[i].idle = Some(Idle::BeyondMaxClusters(max));
        }
    }
    left
}

/// Adds `given[k]` to `set[k]`; returns the total.
fn apply(t: &mut Table<'_>, set: &[usize], given: &[u64], why: impl Fn() -> Addition) -> u64 {
    set.iter()
        .zip(given)
        .map(|(&i, &n)| {
            t.add(i, n, why());
            n
        })
        .sum()
}

/// The clusters new replicas should be near: those holding replicas, or else the preferred ones.
fn anchors<'a>(cands: &[Cand<'a>], preferred: &[usize]) -> Vec<&'a Cluster> {
    let holding: Vec<&Cluster> = cands
        .iter()
        .filter(|c| c.holds() > 0)
        .filter_map(|c| c.cluster)
        .collect();
    if holding.is_empty() {
        preferred.iter().filter_map(|&i| cands[i].cluster).collect()
    } else {
        holding
    }
}

/// `pool` ordered by nearness to the nearest anchor (farthest first when `farthest`), each with
/// the name of that anchor and its score. Ties keep name order.
fn by_nearness(
    cands: &[Cand<'_>],
    pool: &[usize],
    anchors: &[&Cluster],
    farthest: bool,
) -> Vec<(usize, Option<String>, Score)> {
    let points: Vec<Point<'_>> = anchors.iter().map(|a| Point::of_cluster(a)).collect();
    let mut scored: Vec<(usize, Option<&str>, Proximity)> = pool
        .iter()
        .map(|&i| {
            let Some(cluster) = cands[i].cluster else {
                return (i, None, FAR);
            };
            points
                .iter()
                .zip(anchors)
                .map(|(p, a)| (i, Some(a.name.as_str()), p.proximity(cluster)))
                .min_by(|x, y| x.2.nearness_cmp(&y.2))
                .unwrap_or((i, None, FAR))
        })
        .collect();
    scored.sort_by(|a, b| {
        let near = a.2.nearness_cmp(&b.2);
        if farthest { near.reverse() } else { near }.then(a.0.cmp(&b.0))
    });
    // "Nearest to X" is only worth saying when something was measured or labelled.
    scored
        .into_iter()
        .map(|(i, near, p)| {
            (
                i,
                near.filter(|_| p != FAR).map(str::to_owned),
                Score::Proximity(p),
            )
        })
        .collect()
}

/// The cluster holding a StatefulSet's highest ordinals: the last of `ordinal_order` that holds
/// replicas now.
fn ordinal_top(request: &Request) -> Option<&str> {
    request
        .ordinal_order
        .iter()
        .rev()
        .find(|c| request.current.get(c.as_str()).is_some_and(|n| *n > 0))
        .map(String::as_str)
}

/// Removes `surplus` replicas: a StatefulSet's from its highest ordinals; otherwise burst
/// clusters first (farthest from the regular ones first), then proportionally over the rest.
fn shrink(t: &mut Table<'_>, request: &Request, surplus: u64) {
    let mut left = surplus;
    // A StatefulSet scales down from its highest ordinals: the last cluster's first.
    for name in request.ordinal_order.iter().rev() {
        if left == 0 {
            break;
        }
        if let Some(i) = t.outs.iter().position(|o| *o.cluster == **name) {
            let take = left.min(t.cands[i].kept);
            if take > 0 {
                t.remove(i, take, Removal::HighestOrdinals);
                left -= take;
            }
        }
    }
    let cands = &t.cands;
    let burst: Vec<usize> = (0..cands.len())
        .filter(|&i| cands[i].role == Role::Burst && cands[i].kept > 0)
        .collect();
    let regular_anchors: Vec<&Cluster> = cands
        .iter()
        .filter(|c| c.role == Role::Regular && c.kept > 0)
        .filter_map(|c| c.cluster)
        .collect();
    for (i, _, _) in by_nearness(cands, &burst, &regular_anchors, true) {
        let take = left.min(t.cands[i].kept);
        t.remove(i, take, Removal::BurstFirst);
        left -= take;
    }
    if left > 0 {
        let holders: Vec<usize> = (0..t.cands.len()).filter(|&i| t.cands[i].kept > 0).collect();
        // Under policy `traffic`, clusters without traffic lose theirs first, so the replica
        // that `minClusters` put in one would go at the first scale-down: one replica stays in
        // each of the first `minClusters` holders (most traffic, then most replicas).
        let mut protected: Vec<usize> = Vec::new();
        if dividing_traffic(request).is_some()
            && let Some(min) = request.policy.min_clusters
        {
            protected = holders
                .iter()
                .copied()
                .filter(|&i| t.cands[i].role == Role::Regular)
                .collect();
            protected.sort_by_key(|&i| {
                (
                    std::cmp::Reverse(t.cands[i].weight),
                    std::cmp::Reverse(t.cands[i].kept),
                    i,
                )
            });
            protected.truncate(min.min(request.replicas) as usize);
        }
        let seats: Vec<u64> = holders
            .iter()
            .map(|&i| t.cands[i].kept - u64::from(protected.contains(&i)))
            .collect();
        // Proportional to weight when weights are set (or traffic divides), else to what each
        // holds now.
        let weights: Vec<u64> = if !weighted(request) {
            seats.clone()
        } else {
            holders.iter().map(|&i| t.cands[i].weight).collect()
        };
        let removed = remove_proportional(&seats, &weights, left);
        for (&i, &n) in holders.iter().zip(&removed) {
            t.remove(i, n, Removal::Proportional);
        }
    }
    for (c, out) in t.cands.iter().zip(t.outs.iter_mut()) {
        if c.eligible && !c.changed {
            out.idle = Some(Idle::ScaleDown);
        }
    }
}

fn finish(t: Table<'_>, request: &Request, asked: u64, unplaced: u64, mut notes: Vec<Note>) -> Decision {
    let mut assignment = std::collections::BTreeMap::new();
    let mut clusters = t.outs;
    for (c, out) in t.cands.iter().zip(clusters.iter_mut()) {
        out.replicas = to_u32(c.holds());
        if out.replicas > 0 {
            assignment.insert(out.cluster.to_string(), out.replicas);
        }
    }
    if let Some(min) = request.policy.min_clusters
        && assignment.len() < min.min(request.replicas) as usize
    {
        notes.push(Note::MinClustersNotMet {
            min,
            reached: assignment.len() as u32,
        });
    }
    Decision {
        strategy: request.policy.strategy.clone(),
        replicas: to_u32(asked),
        assignment,
        unplaced: to_u32(unplaced),
        clusters,
        notes,
    }
}
