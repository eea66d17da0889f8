//! Which layers each pipeline stage holds: contiguous runs of about equal length (the first
//! stages one layer longer when they do not divide), embeddings with stage 0, the final norm
//! and LM head with the last. Layers cost the same; the LM head runs only over the rows whose
//! logits are wanted, so it is not weighed against them. The start-up rules live here.

use std::ops::Range;

use super::error::PpError;

/// Layers of stage `stage` of `size` over a model of `n_layers`.
pub fn layers(n_layers: usize, size: usize, stage: usize) -> Result<Range<usize>, PpError> {
    check(n_layers, size)?;
    let (base, extra) = (n_layers / size, n_layers % size);
    let start = stage * base + stage.min(extra);
    Ok(start..start + base + usize::from(stage < extra))
}

/// The start-up rules on a stage count.
pub fn check(n_layers: usize, size: usize) -> Result<(), PpError> {
    if size == 0 {
        return Err(PpError::ZeroSize);
    }
    if size > n_layers {
        return Err(PpError::MoreStagesThanLayers {
            size,
            layers: n_layers,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn stages_cover_the_layers_in_order() {
        let parts: Vec<_> = (0..2).map(|s| layers(24, 2, s).unwrap()).collect();
        assert_eq!(parts, [0..12, 12..24]);
        let parts: Vec<_> = (0..3).map(|s| layers(10, 3, s).unwrap()).collect();
        assert_eq!(parts, [0..4, 4..7, 7..10]);
        assert_eq!(
            layers(2, 3, 0),
            Err(PpError::MoreStagesThanLayers { size: 3, layers: 2 })
        );
        assert_eq!(layers(2, 0, 0), Err(PpError::ZeroSize));
    }
}
