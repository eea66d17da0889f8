//! The wire format of a KV transfer (prefill replica -> decode replica, one TCP connection per
//! transfer): a `Begin` frame (version, layout digest, transfer id, block count, payload
//! length), one `Block` frame per block (group key, then the block's per-layer K and V bytes
//! as `kv/disk/block_bytes.rs` lays them out), an `End` frame. Every frame is
//! `magic "PGKX" | kind u8 | body length u32 LE | body | trailer`: the pack cache's checksum of
//! the body (u64 LE, the kind mixed in), or on an authenticated connection the frame's
//! HMAC-SHA256 tag (`auth.rs`); a peer's lengths are bounded before anything is allocated.

use std::io::{self, Read, Write};

use pagoda_core::kv::BlockHash;
use thiserror::Error;

use super::auth::Seal;
use super::{FRAME_MAGIC as MAGIC, HELLO_MAGIC as HELLO};
use crate::pack_cache::checksum::checksum;

/// Version of the transfer protocol (in `Begin`).
pub const VERSION: u16 = 1;
/// The longest transfer id accepted.
pub const MAX_ID_LEN: usize = 256;
/// The largest block payload accepted (far above any model's block; bounds allocations).
pub const MAX_PAYLOAD: usize = 256 << 20;

/// Magic, kind and body length.
const HEAD: usize = 9;
const KIND_BEGIN: u8 = 1;
const KIND_BLOCK: u8 = 2;
const KIND_END: u8 = 3;

/// One frame of a transfer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    Begin {
        version: u16,
        /// SHA-256 of the KV layout (model, dtype, block size, heads, layers): both sides'
        /// must match or the block bytes mean nothing.
        layout: [u8; 32],
        id: String,
        num_blocks: u32,
        payload_len: u32,
    },
    Block {
        key: BlockHash,
        payload: Vec<u8>,
    },
    End,
}

/// Why a frame could not be read.
#[derive(Debug, Error)]
pub enum FrameError {
    #[error("connection: {0}")]
    Io(#[from] io::Error),
    #[error("the stream ended inside a frame")]
    Truncated,
    #[error("not a KV transfer frame (bad magic)")]
    BadMagic,
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    #[error("a frame of {len} bytes is over the limit of {max}")]
    TooLong { len: usize, max: usize },
    #[error("frame checksum mismatch")]
    Checksum,
    #[error("frame authentication failed (tampered, replayed or out of order)")]
    BadTag,
    #[error("the peer authenticates (--kv-transfer-secret-file) and this replica has no secret")]
    PeerAuthenticates,
    #[error("malformed {0} frame")]
    Malformed(&'static str),
}

impl Frame {
    fn kind(&self) -> u8 {
        match self {
            Self::Begin { .. } => KIND_BEGIN,
            Self::Block { .. } => KIND_BLOCK,
            Self::End => KIND_END,
        }
    }

    /// The frame's bytes, its trailer made by `seal`.
    pub fn encode(&self, seal: &mut Seal) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        out.extend_from_slice(MAGIC);
        out.push(self.kind());
        out.extend_from_slice(&[0; 4]); // the body's length, set below
        match self {
            Self::Begin {
                version,
                layout,
                id,
                num_blocks,
                payload_len,
            } => {
                out.extend_from_slice(&version.to_le_bytes());
                out.extend_from_slice(layout);
                let id = &id.as_bytes()[..id.len().min(MAX_ID_LEN)];
                out.extend_from_slice(&(id.len() as u16).to_le_bytes());
                out.extend_from_slice(id);
                out.extend_from_slice(&num_blocks.to_le_bytes());
                out.extend_from_slice(&payload_len.to_le_bytes());
            }
            Self::Block { key, payload } => {
                out.reserve(32 + payload.len() + 8);
                out.extend_from_slice(&key.0);
                out.extend_from_slice(payload);
            }
            Self::End => {}
        }
        let len = (out.len() - HEAD) as u32;
        out[5..HEAD].copy_from_slice(&len.to_le_bytes());
        match seal {
            Seal::Checksum => {
                let sum = frame_sum(self.kind(), &out[HEAD..]);
                out.extend_from_slice(&sum.to_le_bytes());
            }
            Seal::Mac { .. } => {
                let tag = seal.tag(&out[..HEAD], &out[HEAD..]);
                out.extend_from_slice(&tag);
            }
        }
        out
    }

    /// Writes the frame.
    pub fn write_to(&self, w: &mut impl Write, seal: &mut Seal) -> io::Result<()> {
        w.write_all(&self.encode(seal))
    }

    /// Reads one frame whose body is at most `max_body` bytes and whose trailer `seal`
    /// accepts. A clean end of stream before the first byte is `Ok(None)`.
    pub fn read_from(
        r: &mut impl Read,
        max_body: usize,
        seal: &mut Seal,
    ) -> Result<Option<Self>, FrameError> {
        let mut head = [0u8; HEAD];
        match read_full(r, &mut head)? {
            0 => return Ok(None),
            n if n < head.len() => return Err(FrameError::Truncated),
            _ => {}
        }
        if &head[..4] == HELLO {
            return Err(FrameError::PeerAuthenticates);
        }
        if &head[..4] != MAGIC {
            return Err(FrameError::BadMagic);
        }
        let kind = head[4];
        if !matches!(kind, KIND_BEGIN | KIND_BLOCK | KIND_END) {
            return Err(FrameError::UnknownKind(kind));
        }
        let len = u32::from_le_bytes([head[5], head[6], head[7], head[8]]) as usize;
        if len > max_body {
            return Err(FrameError::TooLong { len, max: max_body });
        }
        let mut body = vec![0u8; len];
        if read_full(r, &mut body)? < len {
            return Err(FrameError::Truncated);
        }
        let mut trailer = [0u8; super::auth::TAG];
        let trailer = &mut trailer[..seal.trailer_len()];
        if read_full(r, trailer)? < trailer.len() {
            return Err(FrameError::Truncated);
        }
        match seal {
            Seal::Checksum => {
                let mut sum = [0u8; 8];
                sum.copy_from_slice(trailer);
                if frame_sum(kind, &body) != u64::from_le_bytes(sum) {
                    return Err(FrameError::Checksum);
                }
            }
            Seal::Mac { .. } => {
                if !seal.check(&head, &body, trailer) {
                    return Err(FrameError::BadTag);
                }
            }
        }
        Self::decode(kind, body).map(Some)
    }

    fn decode(kind: u8, body: Vec<u8>) -> Result<Self, FrameError> {
        match kind {
            KIND_BEGIN => {
                let bad = || FrameError::Malformed("Begin");
                let fixed = 2 + 32 + 2;
                if body.len() < fixed {
                    return Err(bad());
                }
                let version = u16::from_le_bytes([body[0], body[1]]);
                let mut layout = [0u8; 32];
                layout.copy_from_slice(&body[2..34]);
                let id_len = u16::from_le_bytes([body[34], body[35]]) as usize;
                if id_len > MAX_ID_LEN || body.len() != fixed + id_len + 8 {
                    return Err(bad());
                }
                let id = std::str::from_utf8(&body[fixed..fixed + id_len])
                    .map_err(|_| bad())?
                    .to_owned();
                let at = fixed + id_len;
                let word =
                    |i: usize| u32::from_le_bytes([body[i], body[i + 1], body[i + 2], body[i + 3]]);
                Ok(Self::Begin {
                    version,
                    layout,
                    id,
                    num_blocks: word(at),
                    payload_len: word(at + 4),
                })
            }
            KIND_BLOCK => {
                if body.len() < 32 {
                    return Err(FrameError::Malformed("Block"));
                }
                let mut key = [0u8; 32];
                key.copy_from_slice(&body[..32]);
                let mut payload = body;
                payload.drain(..32);
                Ok(Self::Block {
                    key: BlockHash(key),
                    payload,
                })
            }
            KIND_END if body.is_empty() => Ok(Self::End),
            KIND_END => Err(FrameError::Malformed("End")),
            other => Err(FrameError::UnknownKind(other)),
        }
    }
}

/// The checksum of a frame: of its body, with its kind mixed in (a flipped kind byte changes
/// it too).
fn frame_sum(kind: u8, body: &[u8]) -> u64 {
    checksum(body).rotate_left(8) ^ u64::from(kind)
}

/// Reads until `buf` is full or the stream ends; the bytes read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames() -> Vec<Frame> {
        vec![
            Frame::Begin {
                version: VERSION,
                layout: [7; 32],
                id: "req-1".into(),
                num_blocks: 2,
                payload_len: 5,
            },
            Frame::Block {
                key: BlockHash([3; 32]),
                payload: vec![1, 2, 3, 4, 5],
            },
            Frame::End,
        ]
    }

    fn read(bytes: &[u8]) -> Result<Option<Frame>, FrameError> {
        Frame::read_from(&mut &bytes[..], 1 << 20, &mut Seal::Checksum)
    }

    #[test]
    fn frames_round_trip() {
        let mut wire = Vec::new();
        for f in frames() {
            f.write_to(&mut wire, &mut Seal::Checksum)
                .unwrap_or_else(|e| panic!("{e}"));
        }
        let mut r = &wire[..];
        for f in frames() {
            let got = Frame::read_from(&mut r, 1 << 20, &mut Seal::Checksum)
                .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(got, Some(f));
        }
        assert!(matches!(
            Frame::read_from(&mut r, 1 << 20, &mut Seal::Checksum),
            Ok(None)
        ));
    }

    #[test]
    fn a_flipped_byte_is_a_checksum_error() {
        for f in frames() {
            let wire = f.encode(&mut Seal::Checksum);
            // Every byte after the header: body or checksum.
            for i in HEAD..wire.len() {
                let mut bad = wire.clone();
                bad[i] ^= 0x40;
                assert!(
                    matches!(read(&bad), Err(FrameError::Checksum)),
                    "byte {i} of {f:?}"
                );
            }
        }
    }

    #[test]
    fn a_truncated_frame_is_a_typed_error() {
        for f in frames() {
            let wire = f.encode(&mut Seal::Checksum);
            for cut in 1..wire.len() {
                assert!(
                    matches!(read(&wire[..cut]), Err(FrameError::Truncated)),
                    "cut at {cut} of {f:?}"
                );
            }
        }
    }

    #[test]
    fn an_authenticated_frame_altered_replayed_or_reordered_is_refused() {
        let (mut send, mut recv) = super::super::auth::seal_pair();
        let wire: Vec<Vec<u8>> = frames().iter().map(|f| f.encode(&mut send)).collect();
        // Checksum readers cannot take them (the trailer is a 32-byte tag).
        assert!(read(&wire[2]).is_err());
        // Tampered: any flipped byte after the magic.
        for i in 4..wire[0].len() {
            let (_, mut r) = super::super::auth::seal_pair();
            let mut bad = wire[0].clone();
            bad[i] ^= 0x01;
            let got = Frame::read_from(&mut &bad[..], 1 << 20, &mut r);
            assert!(got.is_err(), "byte {i}");
        }
        // Out of order: the second frame read first.
        let (_, mut r) = super::super::auth::seal_pair();
        let got = Frame::read_from(&mut &wire[1][..], 1 << 20, &mut r);
        assert!(matches!(got, Err(FrameError::BadTag)), "{got:?}");
        // In order, each once: accepted; the same frame again: refused.
        for (w, f) in wire.iter().zip(frames()) {
            let got = Frame::read_from(&mut &w[..], 1 << 20, &mut recv);
            assert_eq!(got.ok().flatten(), Some(f));
        }
        let got = Frame::read_from(&mut &wire[2][..], 1 << 20, &mut recv);
        assert!(matches!(got, Err(FrameError::BadTag)), "{got:?}");
    }

    #[test]
    fn hostile_headers_are_refused_before_allocating() {
        let mut wire = Frame::End.encode(&mut Seal::Checksum);
        wire[5..9].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(read(&wire), Err(FrameError::TooLong { .. })));
        let mut wire = Frame::End.encode(&mut Seal::Checksum);
        wire[0] = b'X';
        assert!(matches!(read(&wire), Err(FrameError::BadMagic)));
        let mut wire = Frame::End.encode(&mut Seal::Checksum);
        wire[4] = 9;
        assert!(matches!(read(&wire), Err(FrameError::UnknownKind(9))));
        // A Begin whose id length points past its body (checksum made valid).
        let mut body = vec![0u8; 36];
        body[34..36].copy_from_slice(&200u16.to_le_bytes());
        let mut wire = MAGIC.to_vec();
        wire.push(KIND_BEGIN);
        wire.extend_from_slice(&(body.len() as u32).to_le_bytes());
        wire.extend_from_slice(&body);
        wire.extend_from_slice(&frame_sum(KIND_BEGIN, &body).to_le_bytes());
        assert!(matches!(read(&wire), Err(FrameError::Malformed("Begin"))));
    }
}
