//! vLLM's `KVEventBatch` in msgpack, as msgspec writes it for its `array_like`, tagged structs:
//! a batch is `[ts, [event, ...]]` (the default `data_parallel_rank` omitted) and an event is
//! `[tag, field, ...]` in declaration order. Only the few msgpack types needed, by hand.

use pagoda_core::engine::KvEventBatch;
use pagoda_core::kv::{BlockHash, KvEvent};

/// Where the blocks live, in events' `medium` field: pagoda's KV cache is in host memory.
pub const MEDIUM: &str = "CPU";

/// The batch's msgpack bytes: the payload frame of one message.
pub fn encode_batch(batch: &KvEventBatch) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    array(&mut out, 2);
    out.push(0xcb);
    out.extend_from_slice(&batch.ts.to_be_bytes());
    array(&mut out, batch.events.len());
    for e in &batch.events {
        event(&mut out, e);
    }
    out
}

fn event(out: &mut Vec<u8>, e: &KvEvent) {
    match e {
        KvEvent::BlockStored {
            block_hashes,
            parent_block_hash,
            token_ids,
            block_size,
            lora_id,
        } => {
            // BlockStored(block_hashes, parent_block_hash, token_ids, block_size, lora_id,
            // medium[, lora_name = None: omitted as a default]).
            array(out, 7);
            str(out, "BlockStored");
            hashes(out, block_hashes);
            match parent_block_hash {
                Some(h) => uint(out, h.external()),
                None => out.push(0xc0),
            }
            array(out, token_ids.len());
            for &t in token_ids {
                uint(out, u64::from(t));
            }
            uint(out, *block_size as u64);
            match lora_id {
                Some(id) => uint(out, *id),
                None => out.push(0xc0),
            }
            str(out, MEDIUM);
        }
        KvEvent::BlockRemoved { block_hashes } => {
            array(out, 3);
            str(out, "BlockRemoved");
            hashes(out, block_hashes);
            str(out, MEDIUM);
        }
        KvEvent::AllBlocksCleared => {
            array(out, 1);
            str(out, "AllBlocksCleared");
        }
    }
}

/// Block hashes as vLLM publishes them by default: 64-bit integers (`BlockHash::external`).
fn hashes(out: &mut Vec<u8>, hs: &[BlockHash]) {
    array(out, hs.len());
    for h in hs {
        uint(out, h.external());
    }
}

fn array(out: &mut Vec<u8>, n: usize) {
    if n < 16 {
        out.push(0x90 | n as u8);
    } else if n <= usize::from(u16::MAX) {
        out.push(0xdc);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(0xdd);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
}

fn uint(out: &mut Vec<u8>, v: u64) {
    if v < 128 {
        out.push(v as u8);
    } else if v <= u64::from(u8::MAX) {
        out.extend_from_slice(&[0xcc, v as u8]);
    } else if v <= u64::from(u16::MAX) {
        out.push(0xcd);
        out.extend_from_slice(&(v as u16).to_be_bytes());
    } else if v <= u64::from(u32::MAX) {
        out.push(0xce);
        out.extend_from_slice(&(v as u32).to_be_bytes());
    } else {
        out.push(0xcf);
        out.extend_from_slice(&v.to_be_bytes());
    }
}

fn str(out: &mut Vec<u8>, s: &str) {
    let n = s.len();
    if n < 32 {
        out.push(0xa0 | n as u8);
    } else {
        out.push(0xd9);
        out.push(n.min(255) as u8);
    }
    out.extend_from_slice(&s.as_bytes()[..n.min(255)]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clear_batch_is_the_msgspec_bytes() {
        let b = KvEventBatch {
            ts: 1.5,
            events: vec![KvEvent::AllBlocksCleared],
        };
        let mut want = vec![0x92, 0xcb];
        want.extend_from_slice(&1.5f64.to_be_bytes());
        want.extend_from_slice(&[0x91, 0x91, 0xb0]);
        want.extend_from_slice(b"AllBlocksCleared");
        assert_eq!(encode_batch(&b), want);
        let mut v = Vec::new();
        uint(&mut v, 300);
        uint(&mut v, 70_000);
        assert_eq!(v, [0xcd, 0x01, 0x2c, 0xce, 0x00, 0x01, 0x11, 0x70]);
    }

    #[test]
    fn what_is_encoded_decodes_to_the_same_events() {
        use crate::decode::{WireEvent, decode_batch};
        let h = |b: u8| BlockHash([b; 32]);
        let b = KvEventBatch {
            ts: 2.0,
            events: vec![
                KvEvent::BlockStored {
                    block_hashes: vec![h(1), h(200)],
                    parent_block_hash: Some(h(7)),
                    token_ids: (0..32).map(|t| t * 1000).collect(),
                    block_size: 16,
                    lora_id: Some(u64::MAX),
                },
                KvEvent::BlockRemoved {
                    block_hashes: vec![h(1)],
                },
                KvEvent::AllBlocksCleared,
            ],
        };
        let got = decode_batch(&encode_batch(&b)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got.ts, 2.0);
        assert_eq!(
            got.events,
            [
                WireEvent::BlockStored {
                    block_hashes: vec![h(1).external(), h(200).external()],
                    parent_block_hash: Some(h(7).external()),
                    token_ids: (0..32).map(|t| t * 1000).collect(),
                    block_size: 16,
                },
                WireEvent::BlockRemoved {
                    block_hashes: vec![h(1).external()],
                },
                WireEvent::AllBlocksCleared,
            ]
        );
    }
}
