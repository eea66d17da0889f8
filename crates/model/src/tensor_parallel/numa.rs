//! `--numa distribute|isolate` for one rank (llama.cpp's meaning): `distribute` spreads the
//! kernel pool's threads evenly over the NUMA nodes (thread i on node i mod nodes, pinned to
//! that node's CPUs), `isolate` keeps every thread on the node the process started on. Nodes
//! come from /sys/devices/system/node; the rule (`placement`) is a pure function of them. And
//! which CPUs each rank of a split model gets (`rank_cpus`): a node, or a run of one, per rank.

use std::path::Path;

use super::affinity;

/// Where the pool's threads go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NumaPolicy {
    Distribute,
    Isolate,
}

impl NumaPolicy {
    pub fn name(self) -> &'static str {
        match self {
            Self::Distribute => "distribute",
            Self::Isolate => "isolate",
        }
    }
}

impl std::str::FromStr for NumaPolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "distribute" => Ok(Self::Distribute),
            "isolate" => Ok(Self::Isolate),
            _ => Err(format!(
                "unknown --numa policy `{s}` (distribute or isolate)"
            )),
        }
    }
}

/// The CPUs of thread `0..threads` under `policy`, over `nodes` (each node's CPUs, already cut
/// to the ones the process may use; empty nodes are skipped) when the process started on node
/// `home`. Empty when nothing is known (no nodes): the threads are then left alone.
pub fn placement(
    policy: NumaPolicy,
    nodes: &[Vec<usize>],
    home: usize,
    threads: usize,
) -> Vec<Vec<usize>> {
    let nodes: Vec<&Vec<usize>> = nodes.iter().filter(|n| !n.is_empty()).collect();
    if nodes.is_empty() {
        return Vec::new();
    }
    match policy {
        NumaPolicy::Distribute => (0..threads)
            .map(|i| nodes[i % nodes.len()].clone())
            .collect(),
        NumaPolicy::Isolate => {
            let home = nodes.get(home).copied().unwrap_or(nodes[0]);
            vec![home.clone(); threads]
        }
    }
}

/// Every rank's CPUs when `size` ranks share `allowed` over `nodes` (each node's CPUs, cut to
/// `allowed`): one rank per node, or an equal run of a node's CPUs when the ranks are a multiple
/// of the nodes, or whole nodes when the nodes are a multiple of the ranks, so that no rank
/// straddles a node it shares with another rank (its weights and KV then sit in its node's
/// memory). Otherwise, and on one node, contiguous equal shares of `allowed`. A rank gets no
/// CPUs (and is not pinned) when there are fewer CPUs than ranks.
pub fn rank_cpus(allowed: &[usize], nodes: &[Vec<usize>], size: usize) -> Vec<Vec<usize>> {
    let nodes: Vec<&Vec<usize>> = nodes.iter().filter(|n| !n.is_empty()).collect();
    let n = nodes.len();
    let share = |cpus: &[usize], r: usize, of: usize| affinity::rank_cpus(cpus, r, of);
    if n >= 2 && size.is_multiple_of(n) {
        let per_node = size / n;
        (0..size)
            .map(|r| share(nodes[r / per_node], r % per_node, per_node))
            .collect()
    } else if n >= 2 && size >= 1 && n.is_multiple_of(size) {
        let per_rank = n / size;
        (0..size)
            .map(|r| {
                nodes[r * per_rank..(r + 1) * per_rank]
                    .iter()
                    .flat_map(|n| n.iter().copied())
                    .collect()
            })
            .collect()
    } else {
        (0..size).map(|r| share(allowed, r, size)).collect()
    }
}

/// Each online node's CPUs (from `root`, /sys/devices/system/node), cut to `allowed`.
pub fn read_nodes(root: &Path, allowed: &[usize]) -> Vec<Vec<usize>> {
    let mut nodes: Vec<(usize, Vec<usize>)> = std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let id: usize = name.strip_prefix("node")?.parse().ok()?;
            let list = std::fs::read_to_string(e.path().join("cpulist")).ok()?;
            let cpus = parse_cpulist(&list)
                .into_iter()
                .filter(|c| allowed.is_empty() || allowed.contains(c))
                .collect();
            Some((id, cpus))
        })
        .collect();
    nodes.sort_by_key(|(id, _)| *id);
    nodes.into_iter().map(|(_, cpus)| cpus).collect()
}

/// A kernel cpulist (`0-3,8,10-11`); malformed parts are skipped.
pub fn parse_cpulist(s: &str) -> Vec<usize> {
    let mut cpus = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<usize>(), b.parse::<usize>()) {
                    cpus.extend(a..=b.min(a + 65536));
                }
            }
            None => cpus.extend(part.parse::<usize>().ok()),
        }
    }
    cpus
}

/// The CPU this thread runs on now.
fn current_cpu() -> Option<usize> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: no arguments; returns -1 on error.
        let c = unsafe { libc::sched_getcpu() };
        usize::try_from(c).ok()
    }
    #[cfg(not(target_os = "linux"))]
    None
}

/// Applies `policy` to the kernel pool of `threads` threads (call before the first kernel
/// runs) and logs where the threads go. Returns the CPUs of the home node (isolate sizes the
/// pool to them when `--threads` is not given).
pub fn apply(policy: NumaPolicy, threads: usize) -> Vec<usize> {
    let allowed = affinity::allowed_cpus();
    let nodes = read_nodes(Path::new("/sys/devices/system/node"), &allowed);
    let home = current_cpu()
        .and_then(|c| nodes.iter().position(|n| n.contains(&c)))
        .unwrap_or(0);
    let home_cpus = nodes.get(home).cloned().unwrap_or_default();
    let plan = placement(policy, &nodes, home, threads);
    if plan.is_empty() {
        tracing::warn!(
            policy = policy.name(),
            "--numa: no NUMA nodes under /sys/devices/system/node; threads are left unpinned"
        );
        return home_cpus;
    }
    if nodes.len() == 1 {
        tracing::info!(
            policy = policy.name(),
            cpus = ?home_cpus,
            "--numa: one NUMA node on this machine: {} keeps the {threads} threads on its CPUs (nothing to spread or isolate from)",
            policy.name()
        );
    } else {
        tracing::info!(
            policy = policy.name(),
            nodes = nodes.len(),
            home,
            threads,
            "--numa: kernel threads pinned by node"
        );
    }
    pagoda_kernels::parallel::set_thread_placement(move |i| {
        if let Some(cpus) = plan.get(i) {
            affinity::pin_current_thread(cpus);
        }
    });
    home_cpus
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distribute_spreads_threads_and_isolate_keeps_the_home_node() {
        let nodes = vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]];
        let d = placement(NumaPolicy::Distribute, &nodes, 1, 5);
        let (a, b) = (nodes[0].clone(), nodes[1].clone());
        assert_eq!(d, [a.clone(), b.clone(), a.clone(), b, a]);
        let i = placement(NumaPolicy::Isolate, &nodes, 1, 3);
        assert_eq!(i, vec![nodes[1].clone(); 3]);
        // A node with none of the allowed CPUs is skipped; one node: both the same.
        let one = vec![vec![], vec![4, 5]];
        assert_eq!(
            placement(NumaPolicy::Distribute, &one, 0, 2),
            [[4, 5], [4, 5]]
        );
        assert_eq!(placement(NumaPolicy::Isolate, &one, 0, 2), [[4, 5], [4, 5]]);
        assert!(placement(NumaPolicy::Isolate, &[], 0, 2).is_empty());
    }

    #[test]
    fn ranks_follow_the_nodes() {
        // Two sockets whose CPUs the BIOS numbered alternately.
        let nodes = vec![vec![0, 2, 4, 6], vec![1, 3, 5, 7]];
        let all: Vec<usize> = (0..8).collect();
        assert_eq!(
            rank_cpus(&all, &nodes, 2),
            [nodes[0].clone(), nodes[1].clone()]
        );
        // Four ranks: two per node, each a run of its node's CPUs.
        assert_eq!(
            rank_cpus(&all, &nodes, 4),
            [vec![0, 2], vec![4, 6], vec![1, 3], vec![5, 7]]
        );
        // Four nodes, two ranks: two whole nodes each.
        let four = vec![vec![0, 1], vec![2, 3], vec![4, 5], vec![6, 7]];
        assert_eq!(
            rank_cpus(&all, &four, 2),
            [vec![0, 1, 2, 3], vec![4, 5, 6, 7]]
        );
        // Three ranks over two nodes, or one node: equal shares of the allowed CPUs.
        assert_eq!(
            rank_cpus(&all, &nodes, 3),
            [vec![0, 1], vec![2, 3, 4], vec![5, 6, 7]]
        );
        assert_eq!(rank_cpus(&[0, 1], &[vec![0, 1]], 2), [vec![0], vec![1]]);
        // Fewer CPUs than ranks: none pinned.
        assert_eq!(rank_cpus(&[0], &[], 2), [Vec::<usize>::new(), Vec::new()]);
    }

    #[test]
    fn cpulists_and_a_fake_sysfs_are_read() {
        assert_eq!(parse_cpulist("0-2,8,10-11\n"), [0, 1, 2, 8, 10, 11]);
        assert_eq!(parse_cpulist("x,3"), [3]);
        let root = std::env::temp_dir().join(format!("pagoda-numa-{}", std::process::id()));
        for (n, list) in [("node1", "4-7"), ("node0", "0-3")] {
            std::fs::create_dir_all(root.join(n)).ok();
            std::fs::write(root.join(n).join("cpulist"), list).ok();
        }
        assert_eq!(
            read_nodes(&root, &[1, 2, 5]),
            [vec![1, 2], vec![5]],
            "nodes in id order, cut to the allowed CPUs"
        );
        std::fs::remove_dir_all(&root).ok();
    }
}
