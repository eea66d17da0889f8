//! The rule that makes room for a model about to load: evict the least recently used models
//! with no request in flight until the newcomer fits the memory budget and the count of loaded
//! models. A busy model is never chosen; when only busy ones stand in the way, the load waits.

use std::time::Instant;

/// A loaded model as the rule sees it.
#[derive(Clone, Debug)]
pub struct Resident {
    /// Its index among the server's models.
    pub index: usize,
    /// Weights + KV + scratch.
    pub bytes: u64,
    /// A request is in flight on it.
    pub busy: bool,
    pub last_used: Instant,
}

/// Why the newcomer cannot load now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NoRoom {
    /// It would fit once busy models are idle: wait.
    Busy,
    /// It does not fit even alone.
    TooBig { need: u64, budget: u64 },
}

/// The models to unload, least recently used first, so that a model of `need` bytes fits in
/// `budget` bytes next to what stays, with at most `max_loaded` models loaded (0: no limit).
pub fn victims(
    resident: &[Resident],
    need: u64,
    budget: u64,
    max_loaded: usize,
) -> Result<Vec<usize>, NoRoom> {
    if need > budget {
        return Err(NoRoom::TooBig { need, budget });
    }
    let fits =
        |used: u64, count: usize| used + need <= budget && (max_loaded == 0 || count < max_loaded);
    let mut used: u64 = resident.iter().map(|r| r.bytes).sum();
    let mut count = resident.len();
    let mut idle: Vec<&Resident> = resident.iter().filter(|r| !r.busy).collect();
    idle.sort_by_key(|r| r.last_used);
    let mut out = Vec::new();
    for r in idle {
        if fits(used, count) {
            break;
        }
        used -= r.bytes;
        count -= 1;
        out.push(r.index);
    }
    if fits(used, count) {
        Ok(out)
    } else {
        Err(NoRoom::Busy)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::time::Duration;

    use proptest::prelude::*;

    use super::*;

    fn at(base: Instant, secs: u64) -> Instant {
        base + Duration::from_secs(secs)
    }

    #[test]
    fn the_least_recently_used_idle_model_goes_first() {
        let t = Instant::now();
        let r = [
            Resident {
                index: 0,
                bytes: 4,
                busy: false,
                last_used: at(t, 5),
            },
            Resident {
                index: 1,
                bytes: 4,
                busy: false,
                last_used: at(t, 1),
            },
        ];
        assert_eq!(victims(&r, 4, 10, 0), Ok(vec![1]));
        assert_eq!(victims(&r, 2, 10, 0), Ok(vec![]));
        // The count limit alone also evicts.
        assert_eq!(victims(&r, 1, 100, 2), Ok(vec![1]));
    }

    #[test]
    fn a_busy_model_is_never_evicted() {
        let t = Instant::now();
        let r = [
            Resident {
                index: 0,
                bytes: 4,
                busy: true,
                last_used: at(t, 0),
            },
            Resident {
                index: 1,
                bytes: 4,
                busy: false,
                last_used: at(t, 9),
            },
        ];
        assert_eq!(victims(&r, 4, 10, 0), Ok(vec![1]));
        assert_eq!(victims(&r, 7, 10, 0), Err(NoRoom::Busy));
        assert_eq!(
            victims(&r, 11, 10, 0),
            Err(NoRoom::TooBig {
                need: 11,
                budget: 10
            })
        );
    }

    proptest! {
        #[test]
        fn what_is_chosen_fits_and_is_idle(
            models in proptest::collection::vec((1u64..50, any::<bool>(), 0u64..100), 0..8),
            need in 1u64..60,
            budget in 1u64..200,
            max_loaded in 0usize..5,
        ) {
            let t = Instant::now();
            let r: Vec<Resident> = models
                .iter()
                .enumerate()
                .map(|(index, &(bytes, busy, s))| Resident { index, bytes, busy, last_used: at(t, s) })
                .collect();
            if let Ok(v) = victims(&r, need, budget, max_loaded) {
                let kept: Vec<&Resident> = r.iter().filter(|x| !v.contains(&x.index)).collect();
                let used: u64 = kept.iter().map(|x| x.bytes).sum();
                prop_assert!(used + need <= budget);
                prop_assert!(max_loaded == 0 || kept.len() < max_loaded);
                prop_assert!(v.iter().all(|&i| !r[i].busy));
                // Every evicted model was used no later than every idle model kept.
                for &i in &v {
                    for k in kept.iter().filter(|k| !k.busy) {
                        prop_assert!(r[i].last_used <= k.last_used);
                    }
                }
            }
        }
    }
}
