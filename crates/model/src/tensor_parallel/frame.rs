//! The byte form of what ranks in different processes send each other: little-endian fields,
//! each vector after its length, every length checked against the bytes left on reading. The
//! frames come from rank 0, so one that does not decode is a bug or a mismatched build.

/// Why a frame between ranks did not decode.
#[derive(Debug, thiserror::Error)]
#[error("a frame between parallel ranks is malformed: {0}")]
pub struct FrameError(pub(crate) &'static str);

/// Little-endian fields, each vector after its length.
pub(crate) struct Writer(pub(crate) Vec<u8>);

impl Writer {
    pub(crate) fn u8(&mut self, v: u8) {
        self.0.push(v);
    }

    pub(crate) fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }

    pub(crate) fn u32s(&mut self, v: &[u32]) {
        self.u64(v.len() as u64);
        for x in v {
            self.0.extend_from_slice(&x.to_le_bytes());
        }
    }

    pub(crate) fn f32s(&mut self, v: &[f32]) {
        self.u64(v.len() as u64);
        for x in v {
            self.0.extend_from_slice(&x.to_le_bytes());
        }
    }

    pub(crate) fn bytes(&mut self, v: &[u8]) {
        self.u64(v.len() as u64);
        self.0.extend_from_slice(v);
    }
}

/// Reads what `Writer` wrote; every length is checked against the bytes left.
pub(crate) struct Reader<'a>(pub(crate) &'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], FrameError> {
        if n > self.0.len() {
            return Err(FrameError("truncated"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, FrameError> {
        Ok(self.take(1)?[0])
    }

    pub(crate) fn u64(&mut self) -> Result<u64, FrameError> {
        let b = self.take(8)?;
        Ok(u64::from_le_bytes(
            b.try_into().map_err(|_| FrameError("truncated"))?,
        ))
    }

    pub(crate) fn usize(&mut self) -> Result<usize, FrameError> {
        usize::try_from(self.u64()?).map_err(|_| FrameError("length"))
    }

    pub(crate) fn u32s(&mut self) -> Result<Vec<u32>, FrameError> {
        let n = self.usize()?;
        let b = self.take(n.checked_mul(4).ok_or(FrameError("length"))?)?;
        Ok(b.chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    pub(crate) fn f32s(&mut self) -> Result<Vec<f32>, FrameError> {
        Ok(self.u32s()?.into_iter().map(f32::from_bits).collect())
    }

    pub(crate) fn bytes(&mut self) -> Result<&'a [u8], FrameError> {
        let n = self.usize()?;
        self.take(n)
    }

    pub(crate) fn end(&self) -> Result<(), FrameError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(FrameError("trailing bytes"))
        }
    }
}
