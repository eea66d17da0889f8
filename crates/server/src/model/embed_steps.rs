//! Which waiting inputs the embedder's next forward pass (a step) runs: inputs packed under a
//! token budget (`--max-batch-tokens`), the request with the fewest tokens left first, so a
//! short query goes into the next step instead of waiting behind a document batch, which is
//! cut into budget-sized steps. A request passed over in one step goes first in the next, so
//! a stream of short queries cannot starve a long one.

/// A request still waiting, as the planner sees it.
pub(crate) struct Waiting<'a> {
    /// Token counts of its inputs not yet embedded, in order.
    pub lens: &'a [usize],
    /// Whether the previous step took none of its inputs.
    pub passed_over: bool,
}

/// How many of each request's next inputs the step runs (in the order given; 0: none).
/// Inputs are taken in each request's order until the next one would pass `budget`; a single
/// input longer than the budget runs, alone, when it comes first.
pub(crate) fn plan(jobs: &[Waiting], budget: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    // Stable: among equals, arrival order.
    order.sort_by_key(|&j| (!jobs[j].passed_over, jobs[j].lens.iter().sum::<usize>()));
    let mut take = vec![0; jobs.len()];
    let mut used = 0usize;
    for j in order {
        for &len in jobs[j].lens {
            if used > 0 && used + len > budget {
                break;
            }
            take[j] += 1;
            used += len;
        }
        if used >= budget {
            break;
        }
    }
    take
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiting(lens: &[usize]) -> Waiting<'_> {
        Waiting {
            lens,
            passed_over: false,
        }
    }

    #[test]
    fn a_lone_query_is_one_step_of_itself() {
        assert_eq!(plan(&[waiting(&[16])], 2048), [1]);
    }

    #[test]
    fn a_big_request_is_cut_into_budget_sized_steps() {
        let long = [250; 16];
        assert_eq!(plan(&[waiting(&long)], 512), [2]);
        assert_eq!(plan(&[waiting(&long[2..])], 1000), [4]);
    }

    #[test]
    fn a_short_query_goes_before_a_long_batch() {
        let long = [250; 14];
        // The long batch arrived first; the query still runs in the very next step, with as
        // much of the batch as the budget leaves room for.
        assert_eq!(plan(&[waiting(&long), waiting(&[10])], 512), [2, 1]);
        assert_eq!(plan(&[waiting(&long), waiting(&[10])], 300), [1, 1]);
        assert_eq!(plan(&[waiting(&long), waiting(&[10])], 255), [0, 1]);
    }

    #[test]
    fn an_input_over_the_budget_runs_alone() {
        assert_eq!(plan(&[waiting(&[600, 10])], 512), [1]);
        assert_eq!(plan(&[waiting(&[10]), waiting(&[600])], 512), [1, 0]);
    }

    #[test]
    fn a_request_passed_over_goes_first() {
        let long = [300, 300];
        let short = [100; 3];
        let jobs = [
            Waiting {
                lens: &long,
                passed_over: true,
            },
            waiting(&short),
        ];
        assert_eq!(plan(&jobs, 512), [1, 2]);
    }

    #[test]
    fn later_requests_fill_what_an_earlier_one_leaves() {
        // The second request's next input does not fit beside the first; the third's does.
        let jobs = [waiting(&[400]), waiting(&[300, 300]), waiting(&[50, 1000])];
        assert_eq!(plan(&jobs, 512), [1, 0, 1]);
    }
}
