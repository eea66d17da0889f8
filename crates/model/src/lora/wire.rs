//! An adapter's byte form, for ranks in other processes: rank 0 sends each adapter's weights
//! once, the first time a step uses it, and the ranks keep it under its digest.

use super::adapter::{LoraAdapter, LoraTarget, LoraWeights};
use crate::tensor_parallel::frame::{FrameError, Reader, Writer};

pub(crate) fn encode_adapter(a: &LoraAdapter, w: &mut Writer) {
    w.u64(a.digest());
    w.u64(a.n_layers() as u64);
    let parts: Vec<_> = a.parts().collect();
    w.u64(parts.len() as u64);
    for (il, t, lw) in parts {
        w.u64(il as u64);
        w.u8(t as u8);
        for n in [lw.rank, lw.d_in, lw.d_out] {
            w.u64(n as u64);
        }
        w.u64(u64::from(lw.scale.to_bits()));
        w.f32s(&lw.a);
        w.f32s(&lw.bt);
    }
}

pub(crate) fn decode_adapter(r: &mut Reader) -> Result<LoraAdapter, FrameError> {
    let (digest, n_layers, n_parts) = (r.u64()?, r.usize()?, r.usize()?);
    let mut parts = Vec::new();
    for _ in 0..n_parts {
        let il = r.usize()?;
        if il >= n_layers {
            return Err(FrameError("adapter layer"));
        }
        let t = *LoraTarget::ALL
            .get(usize::from(r.u8()?))
            .ok_or(FrameError("adapter target"))?;
        let (rank, d_in, d_out) = (r.usize()?, r.usize()?, r.usize()?);
        let scale = f32::from_bits(u32::try_from(r.u64()?).map_err(|_| FrameError("scale"))?);
        let (a, bt) = (r.f32s()?, r.f32s()?);
        if Some(a.len()) != rank.checked_mul(d_in) || Some(bt.len()) != rank.checked_mul(d_out) {
            return Err(FrameError("adapter shape"));
        }
        let lw = LoraWeights {
            rank,
            d_in,
            d_out,
            a,
            bt,
            scale,
        };
        parts.push((il, t, lw));
    }
    Ok(LoraAdapter::with_digest(n_layers, parts, digest))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn an_adapter_survives_its_byte_form() {
        let w = LoraWeights::new(2, 3, 4, vec![0.5; 6], &[0.25; 8], 1.5);
        let a = LoraAdapter::from_parts(2, [(1, LoraTarget::V, w)]);
        let mut out = Writer(Vec::new());
        encode_adapter(&a, &mut out);
        let mut r = Reader(&out.0);
        let back = decode_adapter(&mut r).unwrap();
        r.end().unwrap();
        assert_eq!(back.digest(), a.digest());
        assert_eq!(back.n_layers(), 2);
        let (orig, got) = (
            a.get(1, LoraTarget::V).unwrap(),
            back.get(1, LoraTarget::V).unwrap(),
        );
        assert_eq!((got.delta(), got.scale()), (orig.delta(), orig.scale()));
        assert!(decode_adapter(&mut Reader(&out.0[..out.0.len() - 1])).is_err());
    }
}
