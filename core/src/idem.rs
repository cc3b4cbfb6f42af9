//! The idempotency key.

use sha2::{Digest, Sha256};

use crate::Target;

/// The idempotency key of a submit: the lowercase hex SHA-256 of `caller_name`, one 0x00 byte,
/// and the JSON of `targets` (`serde_json::to_vec`).
pub fn idem_key(caller_name: &str, targets: &[Target]) -> String {
    let mut h = Sha256::new();
    h.update(caller_name.as_bytes());
    h.update([0u8]);
    // The JSON is hashed as it is written (the same bytes as `serde_json::to_vec`, without
    // building them: a job of 32 targets is several KiB). Serializing plain strings, bools and
    // options cannot fail, and hashing never does; should it ever, the key covers the Debug
    // form after what was hashed, so distinct inputs stay distinct.
    if serde_json::to_writer(Hashing(&mut h), targets).is_err() {
        h.update(format!("{targets:?}").as_bytes());
    }
    hex(&h.finalize())
}

/// An [`io::Write`](std::io::Write) that feeds a hasher.
struct Hashing<'a>(&'a mut Sha256);

impl std::io::Write for Hashing<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
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

    proptest::proptest! {
        /// The streamed hash is the hash of SPEC's bytes: name, 0x00, `serde_json::to_vec`.
        #[test]
        fn idem_key_hashes_exactly_the_spec_bytes(
            name in ".{0,12}",
            targets in proptest::collection::vec(
                (
                    ".{0,40}",
                    ".{0,6}",
                    ".{0,6}",
                    proptest::option::of(proptest::bool::ANY),
                    proptest::bool::ANY,
                ),
                0..40,
            ),
        ) {
            let targets: Vec<Target> = targets
                .into_iter()
                .map(|(url, mode, grep, context, recover)| Target {
                    url,
                    options: Options { mode, grep, context, recover, ..Options::default() },
                })
                .collect();
            let mut bytes = name.as_bytes().to_vec();
            bytes.push(0);
            bytes.extend(serde_json::to_vec(&targets).unwrap());
            proptest::prop_assert_eq!(idem_key(&name, &targets), hex(&Sha256::digest(&bytes)));
        }
    }

    #[test]
    fn hex_is_lowercase() {
        assert_eq!(hex(&[0x00, 0xab, 0xff]), "00abff");
    }
}
