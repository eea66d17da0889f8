//! `kv_transfer_params` (vLLM's NixlConnector proxy flow) -> the engine's `KvTransfer`,
//! checked against this replica's `--kv-role`: `do_remote_decode` on a prefill replica ships
//! the prompt's KV to `remote_host:remote_port` under `transfer_id`; `do_remote_prefill` on a
//! decode replica waits for that transfer and imports it. A destination outside
//! `--kv-transfer-peers` is refused before any connection is attempted.

use pagoda_core::kv::{KvRole, KvTransfer};
use serde_json::Value;

use crate::prepare::kv_peers::KvPeers;
use crate::prepare::validation_error::ValidationError;

const FIELD: &str = "kv_transfer_params";
const KEYS: [&str; 5] = [
    "do_remote_decode",
    "do_remote_prefill",
    "transfer_id",
    "remote_host",
    "remote_port",
];

/// The transfer `v` asks for, `None` when absent or null.
pub fn parse(
    v: Option<&Value>,
    role: KvRole,
    peers: &KvPeers,
) -> Result<Option<KvTransfer>, ValidationError> {
    let obj = match v {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(o)) => o,
        Some(other) => return Err(ValidationError::invalid_value(FIELD, "an object", other)),
    };
    crate::prepare::field_policy::parameter_keys(obj, FIELD, &KEYS)?;
    let flag = |k: &str| match obj.get(k) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(other) => Err(ValidationError::invalid_value(
            format!("{FIELD}.{k}"),
            "a boolean",
            other,
        )),
    };
    let (decode, prefill) = (flag("do_remote_decode")?, flag("do_remote_prefill")?);
    if !decode && !prefill {
        return Ok(None);
    }
    if decode && prefill {
        return Err(ValidationError::invalid(
            FIELD,
            "one of do_remote_decode and do_remote_prefill",
        ));
    }
    let id = match obj.get("transfer_id") {
        Some(Value::String(s)) if !s.is_empty() && s.len() <= 256 => s.clone(),
        _ => {
            return Err(ValidationError::invalid(
                format!("{FIELD}.transfer_id"),
                "a string of 1 to 256 bytes",
            ));
        }
    };
    if decode {
        if role != KvRole::Prefill {
            return Err(ValidationError::Requires {
                field: FIELD,
                needs: "do_remote_decode: the server to run with --kv-role prefill",
            });
        }
        let host = match obj.get("remote_host") {
            Some(Value::String(h)) if !h.is_empty() && h.len() <= 253 => h,
            _ => {
                return Err(ValidationError::invalid(
                    format!("{FIELD}.remote_host"),
                    "a host name or address",
                ));
            }
        };
        let port = match obj.get("remote_port").and_then(Value::as_u64) {
            Some(p @ 1..=65535) => p,
            _ => {
                return Err(ValidationError::invalid(
                    format!("{FIELD}.remote_port"),
                    "a port in [1, 65535]",
                ));
            }
        };
        if !peers.allows(host, port as u16) {
            return Err(ValidationError::Rule {
                field: format!("{FIELD}.remote_host"),
                message: format!(
                    "`{host}:{port}` is not a decode replica this server may send KV to (--kv-transfer-peers)"
                ),
            });
        }
        let addr = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        return Ok(Some(KvTransfer::Send { id, addr }));
    }
    if role != KvRole::Decode {
        return Err(ValidationError::Requires {
            field: FIELD,
            needs: "do_remote_prefill: the server to run with --kv-role decode",
        });
    }
    Ok(Some(KvTransfer::Receive { id }))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parse(v: Option<&Value>, role: KvRole) -> Result<Option<KvTransfer>, ValidationError> {
        super::parse(
            v,
            role,
            &KvPeers::parse(&["[::1]:7100"]).unwrap_or_default(),
        )
    }

    #[test]
    fn a_destination_outside_the_peers_is_refused() {
        let to = |host: &str| {
            json!({"do_remote_decode": true, "transfer_id": "t",
                                    "remote_host": host, "remote_port": 7100})
        };
        let peers = KvPeers::parse(&["10.1.2.3"]).unwrap();
        assert!(super::parse(Some(&to("10.1.2.3")), KvRole::Prefill, &peers).is_ok());
        let e = super::parse(Some(&to("169.254.169.254")), KvRole::Prefill, &peers).unwrap_err();
        assert!(e.to_string().contains("--kv-transfer-peers"), "{e}");
        assert!(super::parse(Some(&to("10.1.2.3")), KvRole::Prefill, &KvPeers::default()).is_err());
    }

    #[test]
    fn transfers_parse_and_the_role_is_checked() {
        let send = json!({"do_remote_decode": true, "transfer_id": "t1",
                          "remote_host": "::1", "remote_port": 7100});
        assert_eq!(
            parse(Some(&send), KvRole::Prefill),
            Ok(Some(KvTransfer::Send {
                id: "t1".into(),
                addr: "[::1]:7100".into()
            }))
        );
        assert!(parse(Some(&send), KvRole::Decode).is_err());
        assert!(parse(Some(&send), KvRole::Both).is_err());
        let recv = json!({"do_remote_prefill": true, "transfer_id": "t1"});
        assert_eq!(
            parse(Some(&recv), KvRole::Decode),
            Ok(Some(KvTransfer::Receive { id: "t1".into() }))
        );
        assert!(parse(Some(&recv), KvRole::Prefill).is_err());
        assert_eq!(parse(None, KvRole::Both), Ok(None));
        assert_eq!(parse(Some(&json!({})), KvRole::Both), Ok(None));
        for bad in [
            json!("x"),
            json!({"do_remote_prefill": true}),
            json!({"do_remote_prefill": true, "transfer_id": 3}),
            json!({"do_remote_prefill": true, "do_remote_decode": true, "transfer_id": "a"}),
            json!({"do_remote_prefill": "yes", "transfer_id": "a"}),
            json!({"do_remote_prefill": true, "transfer_id": "a", "other": 1}),
        ] {
            assert!(parse(Some(&bad), KvRole::Decode).is_err(), "{bad}");
        }
        let no_port = json!({"do_remote_decode": true, "transfer_id": "t", "remote_host": "h"});
        assert!(parse(Some(&no_port), KvRole::Prefill).is_err());
    }
}
