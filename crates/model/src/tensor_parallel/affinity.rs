//! Pinning a rank's thread to its share of the CPUs the process may use (Linux
//! `sched_setaffinity`), so ranks do not migrate onto each other's cores and the pages a rank
//! touches first (its weights, its KV) land on its core's NUMA node.

/// The CPUs this process may run on, in order (empty when unknown).
pub fn allowed_cpus() -> Vec<usize> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: `cpu_set_t` is plain data; zeroed is the empty set, and the call writes at
        // most `size_of::<cpu_set_t>()` bytes into it.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
                return Vec::new();
            }
            (0..libc::CPU_SETSIZE as usize)
                .filter(|&c| libc::CPU_ISSET(c, &set))
                .collect()
        }
    }
    #[cfg(not(target_os = "linux"))]
    Vec::new()
}

/// Rank `rank`'s CPUs of `size` ranks: a contiguous share of `cpus` (empty when there are
/// fewer CPUs than ranks: then no rank is pinned).
pub fn rank_cpus(cpus: &[usize], rank: usize, size: usize) -> Vec<usize> {
    if size == 0 || cpus.len() < size {
        return Vec::new();
    }
    cpus[rank * cpus.len() / size..(rank + 1) * cpus.len() / size].to_vec()
}

/// Pins the calling thread to `cpus`; false when it could not (or `cpus` is empty).
pub fn pin_current_thread(cpus: &[usize]) -> bool {
    if cpus.is_empty() {
        return false;
    }
    #[cfg(target_os = "linux")]
    {
        // SAFETY: as in `allowed_cpus`; CPU_SET only sets bits below CPU_SETSIZE (checked).
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            for &c in cpus.iter().filter(|&&c| c < libc::CPU_SETSIZE as usize) {
                libc::CPU_SET(c, &mut set);
            }
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
        }
    }
    #[cfg(not(target_os = "linux"))]
    false
}
