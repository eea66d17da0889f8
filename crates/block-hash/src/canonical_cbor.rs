//! The few CBOR items a block hash covers (RFC 8949 §4.2.1 deterministic encoding: definite
//! lengths, shortest argument), written straight into a hasher. Byte for byte what Python's
//! `cbor2.dumps(x, canonical=True)` writes for ints >= 0, bytes, text, tuples and `None`.

/// Anything that takes bytes: a `Sha256`, or a `Vec<u8>` in tests.
pub trait Sink {
    fn put(&mut self, bytes: &[u8]);
}

impl Sink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

impl Sink for sha2::Sha256 {
    fn put(&mut self, bytes: &[u8]) {
        sha2::Digest::update(self, bytes);
    }
}

/// Major types used here (the top three bits of the initial byte).
const UINT: u8 = 0;
const BYTES: u8 = 2;
const TEXT: u8 = 3;
const ARRAY: u8 = 4;
/// Simple value 22.
pub const NULL: u8 = 0xf6;

/// The initial byte and its argument in the shortest form.
pub fn head(sink: &mut impl Sink, major: u8, arg: u64) {
    let m = major << 5;
    if arg < 24 {
        sink.put(&[m | arg as u8]);
    } else if arg <= u64::from(u8::MAX) {
        sink.put(&[m | 24, arg as u8]);
    } else if arg <= u64::from(u16::MAX) {
        let b = (arg as u16).to_be_bytes();
        sink.put(&[m | 25, b[0], b[1]]);
    } else if arg <= u64::from(u32::MAX) {
        let b = (arg as u32).to_be_bytes();
        sink.put(&[m | 26, b[0], b[1], b[2], b[3]]);
    } else {
        sink.put(&[m | 27]);
        sink.put(&arg.to_be_bytes());
    }
}

pub fn uint(sink: &mut impl Sink, v: u64) {
    head(sink, UINT, v);
}

pub fn bytes(sink: &mut impl Sink, b: &[u8]) {
    head(sink, BYTES, b.len() as u64);
    sink.put(b);
}

pub fn text(sink: &mut impl Sink, s: &str) {
    head(sink, TEXT, s.len() as u64);
    sink.put(s.as_bytes());
}

/// The header of an array of `len` items; the items follow.
pub fn array(sink: &mut impl Sink, len: usize) {
    head(sink, ARRAY, len as u64);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shortest_heads_as_rfc8949_appendix_a() {
        let enc = |v: u64| {
            let mut out = Vec::new();
            uint(&mut out, v);
            out
        };
        assert_eq!(enc(0), [0x00]);
        assert_eq!(enc(23), [0x17]);
        assert_eq!(enc(24), [0x18, 0x18]);
        assert_eq!(enc(1000), [0x19, 0x03, 0xe8]);
        assert_eq!(enc(1_000_000), [0x1a, 0x00, 0x0f, 0x42, 0x40]);
        assert_eq!(
            enc(1_000_000_000_000),
            [0x1b, 0x00, 0x00, 0x00, 0xe8, 0xd4, 0xa5, 0x10, 0x00]
        );
        let mut out = Vec::new();
        array(&mut out, 2);
        text(&mut out, "a");
        bytes(&mut out, &[1, 2]);
        assert_eq!(out, [0x82, 0x61, 0x61, 0x42, 0x01, 0x02]);
    }
}
