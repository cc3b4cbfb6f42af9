//! The idempotency key.

use sha2::{Digest, Sha256};

use crate::Target;

/// The idempotency key of a submit: the lowercase hex SHA-256 of `caller_name`, one 0x00 byte,
/// and the JSON of `targets` (`serde_json::to_vec`).
pub fn idem_key(caller_name: &str, targets: &[Target]) -> String {
    let mut h = Sha256::new();
    h.update(caller_name.as_bytes());
    h.update([0u8]);
    // Serializing plain strings, bools and options into a Vec cannot fail; should it ever, the
    // key still covers the name and the Debug form, so distinct inputs stay distinct.
    match serde_json::to_vec(targets) {
        Ok(json) => h.update(&json),
        Err(_) => h.update(format!("{targets:?}").as_bytes()),
    }
    hex(&h.finalize())
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Options;

    fn a() -> Target {
        Target {
            url: "https://example.com/a".into(),
            options: Options::default(),
        }
    }

    #[test]
    fn idem_key_matches_the_spec_vector_for_alice() {
        assert_eq!(
            idem_key("alice", &[a()]),
            "f922577eec74236c712566c77ae0f6db7f4a009edcce9c67af69ce751e05b012"
        );
    }

    #[test]
    fn idem_key_matches_the_spec_vector_for_bob() {
        assert_eq!(
            idem_key("bob", &[a()]),
            "11074836b4d74bec700b390ae11bc2d4355d6f0d5d1563f31ceab113f573c02d"
        );
    }

    #[test]
    fn idem_key_matches_the_spec_vector_with_options() {
        let b = Target {
            url: "https://example.com/b".into(),
            options: Options {
                mode: "text".into(),
                grep: "rust".into(),
                context: Some(false),
                recover: true,
                ..Options::default()
            },
        };
        assert_eq!(
            idem_key("alice", &[a(), b]),
            "5db441b5c24bffc3ab2ce45e7e6d11f2897557483fa0451ddea80eb9960f46e5"
        );
    }

    #[test]
    fn hex_is_lowercase() {
        assert_eq!(hex(&[0x00, 0xab, 0xff]), "00abff");
    }
}
