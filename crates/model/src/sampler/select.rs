//! Picking the few candidates that matter out of a whole vocabulary row without sorting it:
//! the `k` best scores, or every score above a floor. Both scan the row with a vectorised
//! threshold search, so a 262k-entry row costs one pass plus work per candidate kept.

use pagoda_kernels::ops::find_greater;

/// Orders candidates best first: higher score, then lower id (so ties favour the lower id).
pub(super) fn by_score_desc(a: &(f32, u32), b: &(f32, u32)) -> std::cmp::Ordering {
    b.0.total_cmp(&a.0).then(a.1.cmp(&b.1))
}

/// Fills `out` with the `k` best `(score, id)` of `scores` under [`by_score_desc`], -inf and NaN
/// excluded. When at most `k` entries qualify, `out` holds all of them in id order (unsorted,
/// as they were met); otherwise exactly `k`, best first.
pub(super) fn top_k(scores: &[f32], k: usize, out: &mut Vec<(f32, u32)>) {
    out.clear();
    if k == 0 {
        return;
    }
    // Collect everything above the current k-th best; when the buffer fills, cut it back to
    // the best k and raise the bar. The cut is O(buffer), so the scan stays linear even on a
    // row sorted in ascending order.
    let cap = (2 * k).max(k + 64);
    let mut bar = f32::NEG_INFINITY;
    let mut from = 0;
    while let Some(j) = find_greater(&scores[from..], bar) {
        let id = from + j;
        out.push((scores[id], id as u32));
        from = id + 1;
        if out.len() == cap {
            out.select_nth_unstable_by(k - 1, by_score_desc);
            out.truncate(k);
            // Later entries equal to the bar have higher ids, so they lose the tie: strict `>`.
            bar = out[k - 1].0;
        }
    }
    if out.len() > k {
        out.select_nth_unstable_by(k - 1, by_score_desc);
        out.truncate(k);
        out.sort_unstable_by(by_score_desc);
    } else if bar > f32::NEG_INFINITY {
        // A cut happened, so exactly k entries remain, in no useful order.
        out.sort_unstable_by(by_score_desc);
    }
}

/// Fills `out` with every `(score, id)` whose score is strictly above `floor`, in id order.
pub(super) fn above(scores: &[f32], floor: f32, out: &mut Vec<(f32, u32)>) {
    out.clear();
    let mut from = 0;
    while let Some(j) = find_greater(&scores[from..], floor) {
        let id = from + j;
        out.push((scores[id], id as u32));
        from = id + 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `k` best the slow way: every finite-or-+inf entry, fully sorted.
    fn reference(scores: &[f32], k: usize) -> Vec<(f32, u32)> {
        let mut all: Vec<(f32, u32)> = scores
            .iter()
            .enumerate()
            .filter(|(_, l)| **l > f32::NEG_INFINITY)
            .map(|(i, &l)| (l, i as u32))
            .collect();
        all.sort_by(by_score_desc);
        all.truncate(k);
        all
    }

    #[test]
    fn top_k_matches_a_full_sort_with_ties_to_the_lower_id() {
        let mut out = Vec::new();
        let rows: Vec<Vec<f32>> = vec![
            // Many ties: only 7 distinct values.
            (0..3000).map(|i| ((i * 37) % 7) as f32).collect(),
            // Ascending: every entry raises the bar (the worst case for the scan).
            (0..5000).map(|i| i as f32 * 0.01).collect(),
            (0..10_000)
                .map(|i| match i % 50 {
                    3 => f32::NAN,
                    4 => f32::NEG_INFINITY,
                    _ => (i as f32 * 0.173).sin() * 5.0,
                })
                .collect(),
        ];
        for row in &rows {
            for k in [1, 2, 10, 40, 64, 100, 999] {
                top_k(row, k, &mut out);
                assert_eq!(out, reference(row, k), "k={k}");
            }
        }
    }

    #[test]
    fn top_k_keeps_id_order_when_few_qualify() {
        let row = [1.0, f32::NEG_INFINITY, 3.0, f32::NAN, 2.0];
        let mut out = Vec::new();
        top_k(&row, 3, &mut out);
        assert_eq!(out, vec![(1.0, 0), (3.0, 2), (2.0, 4)]);
        top_k(&row, 10, &mut out);
        assert_eq!(out.len(), 3);
        top_k(&row, 0, &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn above_keeps_id_order() {
        let row = [1.0, 5.0, f32::NAN, 4.0, 4.5, f32::NEG_INFINITY];
        let mut out = Vec::new();
        above(&row, 4.0, &mut out);
        assert_eq!(out, vec![(5.0, 1), (4.5, 4)]);
        above(&row, f32::NEG_INFINITY, &mut out);
        assert_eq!(out.len(), 4);
    }
}
