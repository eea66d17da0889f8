//! A step's rows grouped by the adapter they use: planned once per step from each row's adapter,
//! then shared by every projection of every layer. Built only here, so its invariants (each row
//! in at most one group, increasing within a group) hold by construction and the kernel can write
//! the groups' rows from several threads at once.

/// The rows of a batch grouped by adapter (segments, in Punica's SGMV terms).
#[derive(Clone, Debug, Default)]
pub struct LoraGroups {
    /// Rows of the batch.
    rows: usize,
    /// The rows that use an adapter, group after group, increasing within each.
    order: Vec<u32>,
    /// `order[starts[g]..starts[g + 1]]` are group `g`'s rows.
    starts: Vec<usize>,
    /// Scratch for `plan`: each group's next free place in `order`.
    next: Vec<usize>,
}

impl LoraGroups {
    /// Groups the rows by `owner`: row `i` uses adapter `owner[i]` (`None`: the base model).
    /// Adapters are `0..adapters`; an index at or above that counts as no adapter.
    pub fn plan(
        &mut self,
        owner: impl ExactSizeIterator<Item = Option<u32>> + Clone,
        adapters: usize,
    ) {
        let group = |g: Option<u32>| g.map(|g| g as usize).filter(|&g| g < adapters);
        self.rows = owner.len();
        // A counting sort: count each group's rows, turn the counts into starts, place the rows.
        self.starts.clear();
        self.starts.resize(adapters + 1, 0);
        for g in owner.clone().filter_map(group) {
            self.starts[g + 1] += 1;
        }
        for g in 0..adapters {
            self.starts[g + 1] += self.starts[g];
        }
        self.order.clear();
        self.order.resize(self.starts[adapters], 0);
        self.next.clear();
        self.next.extend_from_slice(&self.starts[..adapters]);
        for (i, g) in owner.enumerate() {
            if let Some(g) = group(g) {
                self.order[self.next[g]] = i as u32;
                self.next[g] += 1;
            }
        }
    }

    /// Rows of the batch the groups were planned for.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Number of groups (adapters), empty ones included.
    pub fn len(&self) -> usize {
        self.starts.len().saturating_sub(1)
    }

    /// Whether no row uses an adapter.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Group `g`'s rows, increasing.
    pub fn group(&self, g: usize) -> &[u32] {
        &self.order[self.starts[g]..self.starts[g + 1]]
    }
}
