//! A bounded little-endian cursor over the file bytes. Every read checks the bytes exist first,
//! and callers attach the context (key or tensor name) lazily, so the happy path builds no strings.

use crate::GgufError;

/// A read that ran past the end; turned into [`GgufError::Truncated`] once the caller names it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Short {
    needed: u64,
    offset: u64,
    available: u64,
    file_len: u64,
}

impl Short {
    pub(crate) fn context(self, context: String) -> GgufError {
        GgufError::Truncated {
            context,
            needed: self.needed,
            offset: self.offset,
            available: self.available,
            file_len: self.file_len,
        }
    }
}

/// Attach a lazily built context to a [`Short`] read.
pub(crate) trait ShortExt<T> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T, GgufError>;
}

impl<T> ShortExt<T> for Result<T, Short> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T, GgufError> {
        self.map_err(|short| short.context(context()))
    }
}

pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, pos: 0 }
    }

    pub(crate) fn position(&self) -> usize {
        self.pos
    }

    /// Bytes left after the cursor.
    pub(crate) fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    pub(crate) fn take(&mut self, n: u64) -> Result<&'a [u8], Short> {
        let available = self.remaining();
        match usize::try_from(n) {
            Ok(len) if len <= available => {
                let out = &self.bytes[self.pos..self.pos + len];
                self.pos += len;
                Ok(out)
            }
            _ => Err(Short {
                needed: n,
                offset: self.pos as u64,
                available: available as u64,
                file_len: self.bytes.len() as u64,
            }),
        }
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], Short> {
        let bytes = self.take(N as u64)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, Short> {
        Ok(self.array::<1>()?[0])
    }

    pub(crate) fn i8(&mut self) -> Result<i8, Short> {
        Ok(i8::from_le_bytes(self.array()?))
    }

    pub(crate) fn u16(&mut self) -> Result<u16, Short> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    pub(crate) fn i16(&mut self) -> Result<i16, Short> {
        Ok(i16::from_le_bytes(self.array()?))
    }

    pub(crate) fn u32(&mut self) -> Result<u32, Short> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    pub(crate) fn i32(&mut self) -> Result<i32, Short> {
        Ok(i32::from_le_bytes(self.array()?))
    }

    pub(crate) fn u64(&mut self) -> Result<u64, Short> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    pub(crate) fn i64(&mut self) -> Result<i64, Short> {
        Ok(i64::from_le_bytes(self.array()?))
    }

    pub(crate) fn f32(&mut self) -> Result<f32, Short> {
        Ok(f32::from_le_bytes(self.array()?))
    }

    pub(crate) fn f64(&mut self) -> Result<f64, Short> {
        Ok(f64::from_le_bytes(self.array()?))
    }

    /// A GGUF string: u64 byte length, then UTF-8 bytes (no terminator). `what` names the string
    /// in the UTF-8 error ("key name", "string value").
    pub(crate) fn string(
        &mut self,
        what: &'static str,
        context: impl Fn() -> String,
    ) -> Result<String, GgufError> {
        let len = self.u64().ctx(|| format!("{}: {what} length", context()))?;
        let bytes = self
            .take(len)
            .ctx(|| format!("{}: {what} of {len} bytes", context()))?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_owned()),
            Err(_) => Err(GgufError::InvalidUtf8 {
                context: context(),
                what,
            }),
        }
    }
}
