//! GPT-2's reversible byte <-> printable-character map used by byte-level BPE vocabularies
//! (openai/gpt-2 encoder.py bytes_to_unicode; llama.cpp unicode.cpp unicode_byte_to_utf8_map).

/// The character that stands for each byte in vocabulary strings.
pub(crate) fn byte_to_char() -> [char; 256] {
    let mut map = ['\0'; 256];
    let mut n = 0u32;
    for b in 0..=255u8 {
        // Printable Latin-1 bytes stand for themselves; the rest are moved to U+0100 and up.
        let printable = (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || b >= 0xAE;
        map[usize::from(b)] = if printable {
            char::from(b)
        } else {
            let c = char::from_u32(256 + n).unwrap_or('\0');
            n += 1;
            c
        };
    }
    map
}

/// Decodes a byte-level vocabulary string to the bytes it stands for. Characters outside the
/// map (not produced by the converter) are kept as their own UTF-8.
pub(crate) fn decode_piece(
    piece: &str,
    char_to_byte: &std::collections::HashMap<char, u8>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(piece.len());
    for c in piece.chars() {
        match char_to_byte.get(&c) {
            Some(&b) => out.push(b),
            None => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn map_is_a_bijection_with_gpt2_landmarks() {
        let m = byte_to_char();
        assert_eq!(m[usize::from(b' ')], '\u{120}'); // 'Ġ'
        assert_eq!(m[usize::from(b'\n')], '\u{10A}'); // 'Ċ'
        assert_eq!(m[usize::from(b'a')], 'a');
        let mut seen: Vec<char> = m.to_vec();
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), 256);
    }
}
