//! Which layers share a block table (`KvGroupPlan`): layers are split by attention kind (full,
//! or a sliding window) into groups of equal size, vLLM's hybrid KV layout. One pool block then
//! holds `layers_per_group` layers' K and V, and layer `il` reads arena `slot(il)` through the
//! table of group `group(il)`, so a block given back by a sliding group serves any group next.

use pagoda_core::kv::KvGroup;

use crate::ModelConfig;

/// Layer -> (group, arena slot), and each group's attention.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvGroupPlan {
    groups: Vec<KvGroup>,
    layer_group: Vec<usize>,
    layer_slot: Vec<usize>,
    layers_per_group: usize,
}

impl KvGroupPlan {
    /// One group of every layer: each block holds all layers (sliding layers keep the blocks
    /// outside their window; the kernel just does not read them).
    pub fn single(n_layers: usize) -> Self {
        Self {
            groups: vec![KvGroup::FULL],
            layer_group: vec![0; n_layers],
            layer_slot: (0..n_layers).collect(),
            layers_per_group: n_layers.max(1),
        }
    }

    /// Full-attention layers and sliding-window layers in groups of their gcd (Gemma 3 270M:
    /// 3 global and 15 local layers make one full group and five sliding ones of 3 layers),
    /// full groups first. A model without sliding layers gets `single`.
    pub fn by_attention(config: &ModelConfig) -> Self {
        let swa: Vec<bool> = (0..config.n_layers)
            .map(|il| config.is_swa_layer(il))
            .collect();
        Self::from_layers(&swa, config.sliding_window)
    }

    /// The plan for layers whose `swa[il]` says they slide over `window`.
    fn from_layers(swa: &[bool], window: Option<u32>) -> Self {
        let n = swa.len();
        let (full, swa): (Vec<usize>, Vec<usize>) = (0..n).partition(|&il| !swa[il]);
        let Some(window) = window.filter(|_| !swa.is_empty()) else {
            return Self::single(n);
        };
        let size = gcd(full.len(), swa.len());
        let mut plan = Self {
            groups: Vec::new(),
            layer_group: vec![0; n],
            layer_slot: vec![0; n],
            layers_per_group: size,
        };
        for (layers, kind) in [
            (&full, KvGroup::FULL),
            (&swa, KvGroup::sliding(window as usize)),
        ] {
            for chunk in layers.chunks(size) {
                let g = plan.groups.len();
                plan.groups.push(kind);
                for (slot, &il) in chunk.iter().enumerate() {
                    plan.layer_group[il] = g;
                    plan.layer_slot[il] = slot;
                }
            }
        }
        plan
    }

    pub fn groups(&self) -> &[KvGroup] {
        &self.groups
    }

    pub fn num_groups(&self) -> usize {
        self.groups.len()
    }

    /// Layers whose K and V one block holds (= arenas in the cache).
    pub fn layers_per_group(&self) -> usize {
        self.layers_per_group
    }

    /// The group whose table layer `il` reads.
    pub fn group(&self, il: usize) -> usize {
        self.layer_group.get(il).copied().unwrap_or(0)
    }

    /// The arena layer `il` lives in.
    pub fn slot(&self, il: usize) -> usize {
        self.layer_slot.get(il).copied().unwrap_or(il)
    }

    /// The plan of a pipeline stage holding `layers`: the same groups and tables, but with one
    /// group its arenas are its own layers only. With several groups a block's slots serve
    /// layers of either stage, so the arenas stay whole: pages of blocks the stage never
    /// writes are never touched (the arenas are calloc'ed), but a block moving between groups
    /// over time can reach every page.
    pub fn for_layers(&self, layers: std::ops::Range<usize>) -> Self {
        if self.groups.len() > 1 {
            return self.clone();
        }
        let mut plan = self.clone();
        for (il, slot) in plan.layer_slot.iter_mut().enumerate() {
            *slot = il.saturating_sub(layers.start);
        }
        plan.layers_per_group = layers.len().max(1);
        plan
    }
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a.max(1) } else { gcd(b, a % b) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stage_keeps_arenas_for_its_layers_only() {
        let p = KvGroupPlan::single(24).for_layers(12..24);
        assert_eq!((p.layers_per_group(), p.slot(12), p.slot(23)), (12, 0, 11));
        assert_eq!(
            KvGroupPlan::single(24).for_layers(0..24),
            KvGroupPlan::single(24)
        );
        let swa: Vec<bool> = (0..18).map(|il| il % 6 != 5).collect();
        let grouped = KvGroupPlan::from_layers(&swa, Some(512));
        assert_eq!(grouped.for_layers(9..18), grouped);
    }

    #[test]
    fn gemma_layers_split_into_equal_groups_full_first() {
        let swa: Vec<bool> = (0..18).map(|il| il % 6 != 5).collect();
        let p = KvGroupPlan::from_layers(&swa, Some(512));
        assert_eq!(p.layers_per_group(), 3);
        assert_eq!(p.num_groups(), 6);
        assert_eq!(p.groups()[0], KvGroup::FULL);
        assert!(
            p.groups()[1..]
                .iter()
                .all(|g| g.sliding_window == Some(512))
        );
        // Layers 5, 11, 17 are global: group 0, slots 0..3.
        assert_eq!(
            (p.group(5), p.slot(5), p.group(17), p.slot(17)),
            (0, 0, 0, 2)
        );
        // Layers 0, 1, 2 are the first sliding group.
        assert_eq!((p.group(0), p.slot(2), p.group(3)), (1, 2, 2));
        assert_eq!(
            KvGroupPlan::from_layers(&swa, None),
            KvGroupPlan::single(18)
        );
        // Gemma 3 1B: 4 global, 22 local layers -> groups of 2.
        let swa: Vec<bool> = (0..26).map(|il| il % 6 != 5).collect();
        let p = KvGroupPlan::from_layers(&swa, Some(512));
        assert_eq!((p.layers_per_group(), p.num_groups()), (2, 13));
    }
}
