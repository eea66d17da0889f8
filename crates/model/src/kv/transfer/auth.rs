//! Who may send KV: with `--kv-transfer-secret-file` both ends prove the shared secret before
//! any frame is read (a challenge-response over a fresh nonce from each side, so a recorded
//! handshake cannot be replayed), then every frame carries an HMAC-SHA256 tag under a key
//! derived for this connection, over its sequence number: a frame cannot be altered,
//! reordered, dropped or replayed into another connection without the tag failing.
//!
//! Handshake (fixed sizes, so nothing is allocated from a peer's lengths): the sender opens
//! with `"PGKH" | nonce_s`; the receiver answers `"PGKC" | nonce_r | tag_r`; the sender checks
//! `tag_r` (it never ships KV to a listener without the secret) and replies `"PGKP" | tag_s`.
//! `tag_x = HMAC(secret, label_x | nonce_s | nonce_r)`; the session key is the same with a
//! third label.

use std::io::{self, Read, Write};
use std::path::Path;

use hmac::{Hmac, Mac};
use sha2::Sha256;
use thiserror::Error;

use super::{FRAME_MAGIC, HELLO_MAGIC as HELLO};

type HmacSha256 = Hmac<Sha256>;

const CHALLENGE: &[u8; 4] = b"PGKC";
const PROOF: &[u8; 4] = b"PGKP";
const NONCE: usize = 32;
/// An HMAC-SHA256 tag.
pub const TAG: usize = 32;

const LABEL_RECEIVER: &[u8] = b"pagoda kv-transfer receiver v1";
const LABEL_SENDER: &[u8] = b"pagoda kv-transfer sender v1";
const LABEL_SESSION: &[u8] = b"pagoda kv-transfer session v1";

/// The shared secret of a PD deployment's replicas.
#[derive(Clone)]
pub struct KvSecret(Vec<u8>);

impl std::fmt::Debug for KvSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KvSecret(..)")
    }
}

impl PartialEq for KvSecret {
    fn eq(&self, o: &Self) -> bool {
        self.0 == o.0
    }
}

impl Eq for KvSecret {}

/// Why a secret file cannot be used.
#[derive(Debug, Error)]
pub enum SecretError {
    #[error("cannot read {path}: {source}")]
    Read { path: String, source: io::Error },
    #[error(
        "{path} holds {len} bytes after trimming whitespace; a KV transfer secret needs at least {min} (make one: head -c 32 /dev/urandom | base64 > {path})"
    )]
    TooShort {
        path: String,
        len: usize,
        min: usize,
    },
}

impl KvSecret {
    /// Fewest bytes a secret may have (a 16-byte random secret is 128 bits).
    pub const MIN_LEN: usize = 16;

    /// The file's bytes, surrounding whitespace trimmed (so `base64 > file` and editors'
    /// trailing newlines give the same secret on every replica).
    pub fn from_file(path: &Path) -> Result<Self, SecretError> {
        let shown = path.display().to_string();
        let meta = std::fs::metadata(path).map_err(|source| SecretError::Read {
            path: shown.clone(),
            source,
        })?;
        // A secret is short; refuse to read a large file whole (a wrong path to a model).
        if meta.len() > 4096 {
            return Err(SecretError::Read {
                path: shown,
                source: io::Error::other("over 4 KiB: not a secret file"),
            });
        }
        let bytes = std::fs::read(path).map_err(|source| SecretError::Read {
            path: shown.clone(),
            source,
        })?;
        Self::from_bytes(&bytes).map_err(|e| match e {
            SecretError::TooShort { len, min, .. } => SecretError::TooShort {
                path: shown,
                len,
                min,
            },
            other => other,
        })
    }

    /// `bytes` with surrounding whitespace trimmed.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, SecretError> {
        let trimmed = bytes.trim_ascii();
        if trimmed.len() < Self::MIN_LEN {
            return Err(SecretError::TooShort {
                path: "the secret".into(),
                len: trimmed.len(),
                min: Self::MIN_LEN,
            });
        }
        Ok(Self(trimmed.to_vec()))
    }

    fn tag(&self, label: &[u8], nonce_s: &[u8; NONCE], nonce_r: &[u8; NONCE]) -> [u8; TAG] {
        let mut m = self.mac();
        m.update(label);
        m.update(nonce_s);
        m.update(nonce_r);
        m.finalize().into_bytes().into()
    }

    fn verify(&self, label: &[u8], s: &[u8; NONCE], r: &[u8; NONCE], tag: &[u8]) -> bool {
        let mut m = self.mac();
        m.update(label);
        m.update(s);
        m.update(r);
        m.verify_slice(tag).is_ok()
    }

    fn mac(&self) -> HmacSha256 {
        // HMAC takes a key of any length; the error arm cannot happen.
        HmacSha256::new_from_slice(&self.0).unwrap_or_else(|_| unreachable!())
    }

    fn session(&self, nonce_s: &[u8; NONCE], nonce_r: &[u8; NONCE]) -> Seal {
        let key = self.tag(LABEL_SESSION, nonce_s, nonce_r);
        Seal::Mac {
            key: Box::new(HmacSha256::new_from_slice(&key).unwrap_or_else(|_| unreachable!())),
            seq: 0,
        }
    }
}

/// Why a peer was not let in.
#[derive(Debug, Error)]
pub enum AuthError {
    #[error("connection: {0}")]
    Io(#[from] io::Error),
    #[error(
        "the peer sent KV without authenticating (it has no --kv-transfer-secret-file, this replica has one)"
    )]
    Unauthenticated,
    #[error("the peer's handshake is malformed")]
    Malformed,
    #[error(
        "the peer does not know the shared secret (wrong --kv-transfer-secret-file, or a replay)"
    )]
    BadProof,
}

/// How each frame's trailer is made: the checksum of an unauthenticated connection, or the
/// connection's HMAC over a sequence number both ends count.
pub enum Seal {
    Checksum,
    Mac { key: Box<HmacSha256>, seq: u64 },
}

impl Seal {
    /// Bytes of the trailer after a frame's body.
    pub(super) fn trailer_len(&self) -> usize {
        match self {
            Self::Checksum => 8,
            Self::Mac { .. } => TAG,
        }
    }

    /// The tag of the next frame (`head` is its magic, kind and length).
    pub(super) fn tag(&mut self, head: &[u8], body: &[u8]) -> [u8; TAG] {
        match self {
            Self::Checksum => [0; TAG],
            Self::Mac { key, seq } => {
                let mut m = (**key).clone();
                m.update(&seq.to_le_bytes());
                m.update(head);
                m.update(body);
                *seq += 1;
                m.finalize().into_bytes().into()
            }
        }
    }

    /// Whether `tag` is the next frame's (constant time).
    pub(super) fn check(&mut self, head: &[u8], body: &[u8], tag: &[u8]) -> bool {
        match self {
            Self::Checksum => true,
            Self::Mac { key, seq } => {
                let mut m = (**key).clone();
                m.update(&seq.to_le_bytes());
                m.update(head);
                m.update(body);
                *seq += 1;
                m.verify_slice(tag).is_ok()
            }
        }
    }
}

fn nonce() -> [u8; NONCE] {
    let mut n = [0u8; NONCE];
    // The thread RNG is a CSPRNG seeded from the OS: nonces must not be predictable.
    rand::fill(&mut n[..]);
    n
}

/// The sender's half: proves the secret and checks the receiver's proof before any KV byte.
pub fn sender_handshake(
    stream: &mut (impl Read + Write),
    secret: &KvSecret,
) -> Result<Seal, AuthError> {
    let nonce_s = nonce();
    let mut hello = HELLO.to_vec();
    hello.extend_from_slice(&nonce_s);
    stream.write_all(&hello)?;
    stream.flush()?;
    let mut challenge = [0u8; 4 + NONCE + TAG];
    stream.read_exact(&mut challenge)?;
    if &challenge[..4] != CHALLENGE {
        return Err(AuthError::Malformed);
    }
    let mut nonce_r = [0u8; NONCE];
    nonce_r.copy_from_slice(&challenge[4..4 + NONCE]);
    if !secret.verify(LABEL_RECEIVER, &nonce_s, &nonce_r, &challenge[4 + NONCE..]) {
        return Err(AuthError::BadProof);
    }
    let mut proof = PROOF.to_vec();
    proof.extend_from_slice(&secret.tag(LABEL_SENDER, &nonce_s, &nonce_r));
    stream.write_all(&proof)?;
    Ok(secret.session(&nonce_s, &nonce_r))
}

/// The receiver's half: nothing past the handshake is read from a peer that has not proved
/// the secret over this connection's fresh nonce.
pub fn receiver_handshake(
    stream: &mut (impl Read + Write),
    secret: &KvSecret,
) -> Result<Seal, AuthError> {
    let mut hello = [0u8; 4 + NONCE];
    stream.read_exact(&mut hello[..4])?;
    if &hello[..4] == FRAME_MAGIC {
        return Err(AuthError::Unauthenticated);
    }
    if &hello[..4] != HELLO {
        return Err(AuthError::Malformed);
    }
    stream.read_exact(&mut hello[4..])?;
    let mut nonce_s = [0u8; NONCE];
    nonce_s.copy_from_slice(&hello[4..]);
    let nonce_r = nonce();
    let mut challenge = CHALLENGE.to_vec();
    challenge.extend_from_slice(&nonce_r);
    challenge.extend_from_slice(&secret.tag(LABEL_RECEIVER, &nonce_s, &nonce_r));
    stream.write_all(&challenge)?;
    stream.flush()?;
    let mut proof = [0u8; 4 + TAG];
    stream.read_exact(&mut proof)?;
    if &proof[..4] != PROOF {
        return Err(AuthError::Malformed);
    }
    if !secret.verify(LABEL_SENDER, &nonce_s, &nonce_r, &proof[4..]) {
        return Err(AuthError::BadProof);
    }
    Ok(secret.session(&nonce_s, &nonce_r))
}

/// Two ends of one session, for tests of the frame codec.
#[cfg(test)]
pub(super) fn seal_pair() -> (Seal, Seal) {
    let s = KvSecret(vec![9; 32]);
    let n = [1; NONCE];
    (s.session(&n, &n), s.session(&n, &n))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    fn secret(b: u8) -> KvSecret {
        KvSecret::from_bytes(&[b; 32]).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Runs both halves over a real socket pair; (sender's result, receiver's result).
    fn handshake(s: KvSecret, r: KvSecret) -> (Result<Seal, AuthError>, Result<Seal, AuthError>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
        let addr = l.local_addr().unwrap_or_else(|e| panic!("{e}"));
        let t = std::thread::spawn(move || {
            let (mut c, _) = l.accept().unwrap_or_else(|e| panic!("{e}"));
            let got = receiver_handshake(&mut c, &r);
            drop(c);
            got
        });
        let mut c = TcpStream::connect(addr).unwrap_or_else(|e| panic!("{e}"));
        let sent = sender_handshake(&mut c, &s);
        drop(c);
        (
            sent,
            t.join().unwrap_or_else(|_| panic!("receiver panicked")),
        )
    }

    #[test]
    fn equal_secrets_agree_on_a_session_key_and_count_frames_alike() {
        let (s, r) = handshake(secret(1), secret(1));
        let (mut s, mut r) = (
            s.unwrap_or_else(|e| panic!("{e}")),
            r.unwrap_or_else(|e| panic!("{e}")),
        );
        for body in [&b"first"[..], b"second"] {
            let tag = s.tag(b"head", body);
            assert!(r.check(b"head", body, &tag));
        }
        // A replayed (or reordered) frame: the receiver's count has moved on.
        let tag = s.tag(b"head", b"third");
        let replay = tag;
        assert!(r.check(b"head", b"third", &tag));
        assert!(!r.check(b"head", b"third", &replay));
    }

    #[test]
    fn a_wrong_secret_fails_on_both_sides() {
        let (s, r) = handshake(secret(1), secret(2));
        assert!(
            matches!(s, Err(AuthError::BadProof)),
            "sender: {s:?}",
            s = s.err()
        );
        // The sender hangs up at the bad challenge, so the receiver never gets a proof.
        assert!(r.is_err());
    }

    #[test]
    fn session_keys_differ_per_connection() {
        let (a, _) = handshake(secret(1), secret(1));
        let (b, _) = handshake(secret(1), secret(1));
        let (mut a, mut b) = (
            a.unwrap_or_else(|e| panic!("{e}")),
            b.unwrap_or_else(|e| panic!("{e}")),
        );
        assert_ne!(a.tag(b"h", b"body"), b.tag(b"h", b"body"));
    }

    #[test]
    fn short_or_unreadable_secrets_are_refused_with_the_way_to_make_one() {
        let e = KvSecret::from_bytes(b"  short\n").err();
        assert!(
            matches!(e, Some(SecretError::TooShort { len: 5, .. })),
            "{e:?}"
        );
        let dir = std::env::temp_dir().join(format!("pagoda-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        let f = dir.join("kv.secret");
        std::fs::write(&f, b"tiny\n").unwrap_or_else(|e| panic!("{e}"));
        let msg = KvSecret::from_file(&f).err().map(|e| e.to_string());
        assert!(
            msg.as_deref()
                .is_some_and(|m| m.contains("head -c 32 /dev/urandom")),
            "{msg:?}"
        );
        std::fs::write(&f, b"0123456789abcdef0123456789abcdef\n").unwrap_or_else(|e| panic!("{e}"));
        let a = KvSecret::from_file(&f).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            a,
            KvSecret::from_bytes(b"0123456789abcdef0123456789abcdef")
                .unwrap_or_else(|e| panic!("{e}"))
        );
        assert!(KvSecret::from_file(&dir.join("missing")).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
