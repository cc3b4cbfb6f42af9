//! The byte encoding of the stored rows.
//!
//! A row is a format byte, then its fields in a fixed order: strings as a LEB128 length and the
//! UTF-8 bytes, integers as LEB128 (signed ones zigzagged), enums as their index in `ALL`. The
//! key carries what it already holds (a job's id, a target's job id and idx), so the value does
//! not repeat it. Decoding checks every length and every byte: a bad row is
//! [`StoreError::Corrupt`], never a panic.

use rota_core::{CallerClass, JobRow, JobStatus, StoreError, TargetRow, TargetState};

const JOB_FORMAT: u8 = 1;
const TARGET_FORMAT: u8 = 1;

/// Encodes a job row (its id is the key).
pub(crate) fn encode_job(job: &JobRow) -> Vec<u8> {
    let mut w = Writer(Vec::with_capacity(
        64 + job.caller.len() + job.idem_key.len() + job.error.len(),
    ));
    w.byte(JOB_FORMAT);
    w.str(&job.caller);
    w.byte(index_of(CallerClass::ALL, &job.class));
    w.str(&job.idem_key);
    w.byte(index_of(JobStatus::ALL, &job.status));
    w.str(&job.error);
    w.uint(job.targets_total as u64);
    w.uint(job.targets_done as u64);
    w.int(job.created_at);
    w.int(job.lease);
    w.uint(job.n_bytes);
    w.0
}

/// Decodes the job row stored under `id`.
pub(crate) fn decode_job(id: &str, bytes: &[u8]) -> Result<JobRow, StoreError> {
    let mut r = Reader { bytes, what: "job" };
    r.format(JOB_FORMAT)?;
    let job = JobRow {
        id: id.to_owned(),
        caller: r.str()?,
        class: r.variant(CallerClass::ALL)?,
        idem_key: r.str()?,
        status: r.variant(JobStatus::ALL)?,
        error: r.str()?,
        targets_total: r.usize()?,
        targets_done: r.usize()?,
        created_at: r.int()?,
        lease: r.int()?,
        n_bytes: r.uint()?,
    };
    r.end()?;
    Ok(job)
}

/// Encodes a target row (its job id and idx are the key).
pub(crate) fn encode_target(t: &TargetRow) -> Vec<u8> {
    let result_len = t.result.as_ref().map_or(0, String::len);
    let mut w = Writer(Vec::with_capacity(
        32 + t.url.len() + t.options.len() + result_len + t.error.len() + t.hint.len(),
    ));
    w.byte(TARGET_FORMAT);
    w.str(&t.url);
    w.str(&t.options);
    w.byte(index_of(TargetState::ALL, &t.status));
    match &t.result {
        None => w.byte(0),
        Some(result) => {
            w.byte(1);
            w.str(result);
        }
    }
    w.str(&t.error);
    w.str(&t.hint);
    w.0
}

/// Decodes the target row stored under (job id, `idx`).
pub(crate) fn decode_target(idx: u64, bytes: &[u8]) -> Result<TargetRow, StoreError> {
    let mut r = Reader {
        bytes,
        what: "target",
    };
    r.format(TARGET_FORMAT)?;
    let idx = usize::try_from(idx).map_err(|_| r.corrupt("idx out of range"))?;
    let url = r.str()?;
    let options = r.str()?;
    let status = r.variant(TargetState::ALL)?;
    let result = match r.byte()? {
        0 => None,
        1 => Some(r.str()?),
        _ => return Err(r.corrupt("bad result flag")),
    };
    let t = TargetRow {
        idx,
        url,
        options,
        status,
        result,
        error: r.str()?,
        hint: r.str()?,
    };
    r.end()?;
    Ok(t)
}

fn index_of<T: PartialEq>(all: &[T], v: &T) -> u8 {
    // Every enum here has a handful of variants, so the index always fits a byte.
    all.iter().position(|x| x == v).unwrap_or(0) as u8
}

struct Writer(Vec<u8>);

impl Writer {
    fn byte(&mut self, b: u8) {
        self.0.push(b);
    }

    fn uint(&mut self, mut n: u64) {
        loop {
            let low = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                self.0.push(low);
                return;
            }
            self.0.push(low | 0x80);
        }
    }

    fn int(&mut self, n: i64) {
        self.uint(((n << 1) ^ (n >> 63)) as u64);
    }

    fn str(&mut self, s: &str) {
        self.uint(s.len() as u64);
        self.0.extend_from_slice(s.as_bytes());
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    what: &'static str,
}

impl Reader<'_> {
    fn corrupt(&self, why: &str) -> StoreError {
        StoreError::Corrupt(format!("stored {} row: {why}", self.what))
    }

    fn byte(&mut self) -> Result<u8, StoreError> {
        let (&b, rest) = self
            .bytes
            .split_first()
            .ok_or_else(|| self.corrupt("truncated"))?;
        self.bytes = rest;
        Ok(b)
    }

    fn format(&mut self, expected: u8) -> Result<(), StoreError> {
        let b = self.byte()?;
        if b == expected {
            Ok(())
        } else {
            Err(self.corrupt(&format!("unknown row format {b}")))
        }
    }

    fn uint(&mut self) -> Result<u64, StoreError> {
        let mut n: u64 = 0;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            let part = u64::from(b & 0x7f);
            if shift == 63 && part > 1 {
                return Err(self.corrupt("integer overflow"));
            }
            n |= part << shift;
            if b & 0x80 == 0 {
                return Ok(n);
            }
        }
        Err(self.corrupt("integer overflow"))
    }

    fn usize(&mut self) -> Result<usize, StoreError> {
        let n = self.uint()?;
        usize::try_from(n).map_err(|_| self.corrupt("count out of range"))
    }

    fn int(&mut self) -> Result<i64, StoreError> {
        let z = self.uint()?;
        Ok(((z >> 1) as i64) ^ -((z & 1) as i64))
    }

    fn str(&mut self) -> Result<String, StoreError> {
        let len = self.usize()?;
        if len > self.bytes.len() {
            return Err(self.corrupt("truncated string"));
        }
        let (s, rest) = self.bytes.split_at(len);
        self.bytes = rest;
        String::from_utf8(s.to_vec()).map_err(|_| self.corrupt("string is not UTF-8"))
    }

    fn variant<T: Copy>(&mut self, all: &[T]) -> Result<T, StoreError> {
        let b = self.byte()?;
        all.get(usize::from(b))
            .copied()
            .ok_or_else(|| self.corrupt(&format!("unknown enum value {b}")))
    }

    fn end(&self) -> Result<(), StoreError> {
        if self.bytes.is_empty() {
            Ok(())
        } else {
            Err(self.corrupt("trailing bytes"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> JobRow {
        JobRow {
            id: "ab".repeat(16),
            caller: "alice ✓ \"q\" \0 \n".into(),
            class: CallerClass::Restricted,
            idem_key: "k".into(),
            status: JobStatus::Partial,
            error: String::new(),
            targets_total: 3,
            targets_done: 2,
            created_at: -5,
            lease: i64::MAX,
            n_bytes: u64::MAX,
        }
    }

    fn target() -> TargetRow {
        TargetRow {
            idx: 7,
            url: "https://ex.com/ü".into(),
            options: "{}".into(),
            status: TargetState::Done,
            result: Some(String::new()),
            error: "e".into(),
            hint: String::new(),
        }
    }

    #[test]
    fn rows_round_trip_exactly() {
        let j = job();
        assert_eq!(decode_job(&j.id, &encode_job(&j)).unwrap(), j);
        let mut j2 = j.clone();
        j2.created_at = i64::MIN;
        j2.lease = 0;
        assert_eq!(decode_job(&j2.id, &encode_job(&j2)).unwrap(), j2);
        let t = target();
        assert_eq!(decode_target(7, &encode_target(&t)).unwrap(), t);
        let mut t2 = t.clone();
        t2.result = None;
        assert_eq!(decode_target(7, &encode_target(&t2)).unwrap(), t2);
    }

    fn read_uint(bytes: &[u8]) -> Result<u64, StoreError> {
        Reader {
            bytes,
            what: "test",
        }
        .uint()
    }

    #[test]
    fn an_integer_of_more_than_64_bits_is_corrupt_not_cut_short() {
        // u64::MAX takes ten bytes of 7 bits; the tenth holds the one bit left: 1.
        let mut w = Writer(Vec::new());
        w.uint(u64::MAX);
        assert_eq!(w.0.len(), 10);
        assert_eq!(w.0[9], 1);
        assert_eq!(read_uint(&w.0).unwrap(), u64::MAX);
        // A tenth byte of 2 or more would need a 65th bit: shifting it in would drop it.
        for last in [2, 0x7f] {
            let mut wide = w.0.clone();
            wide[9] = last;
            assert!(
                matches!(read_uint(&wide), Err(StoreError::Corrupt(m)) if m.contains("overflow")),
                "tenth byte {last}"
            );
        }
        // An eleventh byte is never read.
        let mut long = w.0.clone();
        long[9] = 0x81;
        long.push(0);
        assert!(matches!(read_uint(&long), Err(StoreError::Corrupt(m)) if m.contains("overflow")));
    }

    #[test]
    fn every_truncation_and_bad_byte_is_corrupt_not_a_panic() {
        let jb = encode_job(&job());
        let tb = encode_target(&target());
        for n in 0..jb.len() {
            assert!(matches!(
                decode_job("x", &jb[..n]),
                Err(StoreError::Corrupt(_))
            ));
        }
        for n in 0..tb.len() {
            assert!(matches!(
                decode_target(0, &tb[..n]),
                Err(StoreError::Corrupt(_))
            ));
        }
        let mut long = jb.clone();
        long.push(0);
        assert!(matches!(
            decode_job("x", &long),
            Err(StoreError::Corrupt(_))
        ));
        for i in 0..tb.len() {
            for b in [0u8, 0x7f, 0x80, 0xff] {
                let mut bad = tb.clone();
                bad[i] = b;
                let _ = decode_target(0, &bad);
            }
        }
        assert!(matches!(
            decode_job("x", &[9]),
            Err(StoreError::Corrupt(m)) if m.contains("format")
        ));
    }
}
