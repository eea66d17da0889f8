//! How a structured-output mask meets the sampler's other bans. The grammar's mask wins: the
//! `min_tokens` ban on end-of-generation ids is applied only where it leaves some token allowed,
//! so a finished-but-young grammar never ends up with no token to pick.

/// Sets `banned` ids to -inf unless that would leave no finite logit in `scores`.
pub(super) fn ban_unless_nothing_left(scores: &mut [f32], banned: &[u32]) {
    // Stops at the first allowed id outside the ban list, usually within a few entries.
    let other_allowed = scores
        .iter()
        .enumerate()
        .any(|(i, l)| *l > f32::NEG_INFINITY && !banned.contains(&(i as u32)));
    if !other_allowed {
        return;
    }
    for &id in banned {
        if let Some(l) = scores.get_mut(id as usize) {
            *l = f32::NEG_INFINITY;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bans_only_while_something_else_stays_allowed() {
        let ninf = f32::NEG_INFINITY;
        let mut s = [1.0, ninf, 2.0, ninf];
        ban_unless_nothing_left(&mut s, &[2]);
        assert_eq!(s, [1.0, ninf, ninf, ninf]);
        // Only the banned id is allowed by the mask: the ban yields.
        let mut s = [ninf, ninf, 2.0, ninf];
        ban_unless_nothing_left(&mut s, &[2, 3]);
        assert_eq!(s, [ninf, ninf, 2.0, ninf]);
        // Duplicate ids in the ban list do not count twice against the allowed ones.
        let mut s = [0.5, ninf, 2.0];
        ban_unless_nothing_left(&mut s, &[2, 2]);
        assert_eq!(s, [0.5, ninf, ninf]);
    }
}
