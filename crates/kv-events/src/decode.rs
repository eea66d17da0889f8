//! Reading a `KVEventBatch` payload back (what a router or indexer does): the msgpack that
//! `msgpack.rs` writes, and vLLM's own (hashes as integers, or as bytes of which the last 8
//! are the integer; optional trailing fields such as `lora_name` and `data_parallel_rank`).
//! Every length is checked against the input: a bad payload is an error, never a panic.

/// One event as published, hashes in their external 64-bit form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WireEvent {
    /// Blocks newly cached, `block_size` tokens each, `token_ids` in order.
    BlockStored {
        block_hashes: Vec<u64>,
        parent_block_hash: Option<u64>,
        token_ids: Vec<u32>,
        block_size: usize,
    },
    /// Blocks evicted.
    BlockRemoved { block_hashes: Vec<u64> },
    /// Every cached block dropped.
    AllBlocksCleared,
}

/// One message's payload.
#[derive(Clone, Debug, PartialEq)]
pub struct WireBatch {
    /// Seconds since the epoch when the engine step ended.
    pub ts: f64,
    pub events: Vec<WireEvent>,
}

/// Why a payload is not a `KVEventBatch`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("KV event payload ends early (at byte {0})")]
    Truncated(usize),
    #[error("KV event payload: expected {expected} at byte {at}")]
    Unexpected { expected: &'static str, at: usize },
    #[error("KV event payload: unknown event `{0}`")]
    UnknownEvent(String),
}

/// Decodes one payload frame.
pub fn decode_batch(bytes: &[u8]) -> Result<WireBatch, DecodeError> {
    let mut r = Reader { b: bytes, at: 0 };
    let n = r.array()?;
    if n < 2 {
        return Err(r.unexpected("a batch [ts, events, ...]"));
    }
    let ts = r.float()?;
    let count = r.array()?;
    let mut events = Vec::with_capacity(count.min(1024));
    for _ in 0..count {
        events.push(event(&mut r)?);
    }
    for _ in 2..n {
        r.skip()?;
    }
    Ok(WireBatch { ts, events })
}

fn event(r: &mut Reader<'_>) -> Result<WireEvent, DecodeError> {
    let n = r.array()?;
    if n == 0 {
        return Err(r.unexpected("an event [tag, ...]"));
    }
    let tag = r.str()?;
    let (e, used) = match tag.as_str() {
        "BlockStored" if n >= 5 => {
            let block_hashes = r.hashes()?;
            let parent_block_hash = if r.nil()? { None } else { Some(r.hash()?) };
            let len = r.array()?;
            let mut token_ids = Vec::with_capacity(len.min(1 << 16));
            for _ in 0..len {
                let t = r.uint()?;
                token_ids.push(u32::try_from(t).map_err(|_| r.unexpected("a u32 token id"))?);
            }
            let block_size = usize::try_from(r.uint()?).map_err(|_| r.unexpected("a size"))?;
            let e = WireEvent::BlockStored {
                block_hashes,
                parent_block_hash,
                token_ids,
                block_size,
            };
            (e, 5)
        }
        "BlockRemoved" if n >= 2 => (
            WireEvent::BlockRemoved {
                block_hashes: r.hashes()?,
            },
            2,
        ),
        "AllBlocksCleared" => (WireEvent::AllBlocksCleared, 1),
        _ => return Err(DecodeError::UnknownEvent(tag)),
    };
    for _ in used..n {
        r.skip()?;
    }
    Ok(e)
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn unexpected(&self, expected: &'static str) -> DecodeError {
        DecodeError::Unexpected {
            expected,
            at: self.at,
        }
    }

    fn take(&mut self, n: usize) -> Result<&[u8], DecodeError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len());
        let end = end.ok_or(DecodeError::Truncated(self.at))?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn byte(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    fn peek(&self) -> Result<u8, DecodeError> {
        self.b
            .get(self.at)
            .copied()
            .ok_or(DecodeError::Truncated(self.at))
    }

    fn be(&mut self, n: usize) -> Result<u64, DecodeError> {
        Ok(self
            .take(n)?
            .iter()
            .fold(0u64, |acc, &b| (acc << 8) | u64::from(b)))
    }

    fn array(&mut self) -> Result<usize, DecodeError> {
        let len = match self.byte()? {
            b @ 0x90..=0x9f => u64::from(b & 0x0f),
            0xdc => self.be(2)?,
            0xdd => self.be(4)?,
            _ => return Err(self.unexpected("an array")),
        };
        usize::try_from(len).map_err(|_| self.unexpected("an array length"))
    }

    fn nil(&mut self) -> Result<bool, DecodeError> {
        if self.peek()? == 0xc0 {
            self.at += 1;
            return Ok(true);
        }
        Ok(false)
    }

    fn float(&mut self) -> Result<f64, DecodeError> {
        match self.byte()? {
            0xcb => Ok(f64::from_bits(self.be(8)?)),
            0xca => Ok(f64::from(f32::from_bits(self.be(4)? as u32))),
            _ => {
                // An integer timestamp is unusual but harmless.
                self.at -= 1;
                Ok(self.uint()? as f64)
            }
        }
    }

    fn uint(&mut self) -> Result<u64, DecodeError> {
        match self.byte()? {
            b @ 0x00..=0x7f => Ok(u64::from(b)),
            0xcc => self.be(1),
            0xcd => self.be(2),
            0xce => self.be(4),
            0xcf => self.be(8),
            // Non-negative values written as signed ints; negative hashes wrap to their bits.
            0xd0 => Ok(self.be(1)? as i8 as i64 as u64),
            0xd1 => Ok(self.be(2)? as i16 as i64 as u64),
            0xd2 => Ok(self.be(4)? as i32 as i64 as u64),
            0xd3 => self.be(8),
            b @ 0xe0..=0xff => Ok(b as i8 as i64 as u64),
            _ => Err(self.unexpected("an integer")),
        }
    }

    /// A hash: an integer, or bytes whose last 8 (big-endian) are the integer (vLLM's
    /// `maybe_convert_block_hash`).
    fn hash(&mut self) -> Result<u64, DecodeError> {
        let len = match self.peek()? {
            0xc4 => {
                self.at += 1;
                self.be(1)?
            }
            0xc5 => {
                self.at += 1;
                self.be(2)?
            }
            0xc6 => {
                self.at += 1;
                self.be(4)?
            }
            _ => return self.uint(),
        };
        let b = self.take(usize::try_from(len).map_err(|_| self.unexpected("bytes"))?)?;
        let tail = &b[b.len().saturating_sub(8)..];
        Ok(tail.iter().fold(0u64, |acc, &x| (acc << 8) | u64::from(x)))
    }

    fn hashes(&mut self) -> Result<Vec<u64>, DecodeError> {
        let n = self.array()?;
        let mut out = Vec::with_capacity(n.min(1 << 16));
        for _ in 0..n {
            out.push(self.hash()?);
        }
        Ok(out)
    }

    fn str(&mut self) -> Result<String, DecodeError> {
        let len = match self.byte()? {
            b @ 0xa0..=0xbf => u64::from(b & 0x1f),
            0xd9 => self.be(1)?,
            0xda => self.be(2)?,
            0xdb => self.be(4)?,
            _ => return Err(self.unexpected("a string")),
        };
        let s = self.take(usize::try_from(len).map_err(|_| self.unexpected("a string"))?)?;
        Ok(String::from_utf8_lossy(s).into_owned())
    }

    /// Skips one value of any type (fields this reader does not use).
    fn skip(&mut self) -> Result<(), DecodeError> {
        let b = self.byte()?;
        let (payload, items) = match b {
            0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => (0, 0),
            0x80..=0x8f => (0, 2 * u64::from(b & 0x0f)),
            0x90..=0x9f => (0, u64::from(b & 0x0f)),
            0xa0..=0xbf => (u64::from(b & 0x1f), 0),
            0xc4 | 0xd9 => (self.be(1)?, 0),
            0xc5 | 0xda => (self.be(2)?, 0),
            0xc6 | 0xdb => (self.be(4)?, 0),
            0xcc | 0xd0 => (1, 0),
            0xcd | 0xd1 => (2, 0),
            0xce | 0xd2 | 0xca => (4, 0),
            0xcf | 0xd3 | 0xcb => (8, 0),
            0xdc => (0, self.be(2)?),
            0xdd => (0, self.be(4)?),
            0xde => (0, 2 * self.be(2)?),
            0xdf => (0, 2 * self.be(4)?),
            0xd4 => (2, 0),
            0xd5 => (3, 0),
            0xd6 => (5, 0),
            0xd7 => (9, 0),
            0xd8 => (17, 0),
            0xc7 => (self.be(1)? + 1, 0),
            0xc8 => (self.be(2)? + 1, 0),
            0xc9 => (self.be(4)? + 1, 0),
            0xc1 => return Err(self.unexpected("a msgpack value")),
        };
        self.take(usize::try_from(payload).map_err(|_| self.unexpected("a length"))?)?;
        for _ in 0..items {
            self.skip()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_batch_from_msgspec_bytes_decodes() {
        // [1.5, [["BlockStored", [300], nil, [1, 2], 2, nil, "CPU"], ["AllBlocksCleared"]], 0]
        let mut b = vec![0x93, 0xcb];
        b.extend_from_slice(&1.5f64.to_be_bytes());
        b.extend_from_slice(&[0x92, 0x97, 0xab]);
        b.extend_from_slice(b"BlockStored");
        b.extend_from_slice(&[
            0x91, 0xcd, 0x01, 0x2c, 0xc0, 0x92, 0x01, 0x02, 0x02, 0xc0, 0xa3,
        ]);
        b.extend_from_slice(b"CPU");
        b.extend_from_slice(&[0x91, 0xb0]);
        b.extend_from_slice(b"AllBlocksCleared");
        b.push(0x00);
        let batch = decode_batch(&b).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(batch.ts, 1.5);
        assert_eq!(
            batch.events,
            [
                WireEvent::BlockStored {
                    block_hashes: vec![300],
                    parent_block_hash: None,
                    token_ids: vec![1, 2],
                    block_size: 2,
                },
                WireEvent::AllBlocksCleared
            ]
        );
        for cut in 0..b.len() {
            assert!(decode_batch(&b[..cut]).is_err(), "cut at {cut}");
        }
    }
}
