//! A copy-on-write view of a file, for looking inside a file without changing it.
//!
//! Opening a redb file read-write changes it even when nothing is committed: the open marks the
//! header, and a file a crash left is repaired in place. A read-only open refuses a file that needs
//! a repair, and so cannot inspect a crashed store. So [`RedbStore::open`](crate::RedbStore::open)
//! first opens the file through this backend: reads come from the file, writes land in memory and
//! are thrown away, and the locks are the file's own. The file is left byte for byte as it was,
//! whatever the inspection finds.

use std::collections::HashMap;
use std::io;
use std::ops::Bound;
use std::sync::{Mutex, MutexGuard};

use redb::backends::FileBackend;
use redb::{BackendError, StorageBackend};

const BLOCK: u64 = 4096;

/// Reads through to a file, keeps writes in memory, and takes the file's locks.
#[derive(Debug)]
pub(crate) struct Overlay {
    file: FileBackend,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// The length redb sees.
    len: u64,
    /// How much of the file still shows through: a shrink hides the rest, and growing again
    /// must read zeros there.
    visible: u64,
    /// Written blocks, by block number.
    blocks: HashMap<u64, Vec<u8>>,
}

impl Overlay {
    /// A view of `file`, whose length is `len`.
    pub(crate) fn new(file: FileBackend, len: u64) -> Self {
        Overlay {
            file,
            state: Mutex::new(State {
                len,
                visible: len,
                blocks: HashMap::new(),
            }),
        }
    }

    fn state(&self) -> io::Result<MutexGuard<'_, State>> {
        self.state
            .lock()
            .map_err(|_| io::Error::other("overlay lock poisoned"))
    }

    /// Block `b` as redb would see it now.
    fn block(&self, st: &State, b: u64) -> io::Result<Vec<u8>> {
        if let Some(data) = st.blocks.get(&b) {
            return Ok(data.clone());
        }
        let mut data = vec![0u8; BLOCK as usize];
        let start = b * BLOCK;
        let end = ((b + 1) * BLOCK).min(st.visible);
        if start < end {
            let n = (end - start) as usize;
            let buf = data
                .get_mut(..n)
                .ok_or_else(|| io::Error::other("overlay block bounds"))?;
            self.file.read(start, buf)?;
        }
        Ok(data)
    }
}

impl StorageBackend for Overlay {
    fn len(&self) -> Result<u64, io::Error> {
        Ok(self.state()?.len)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), io::Error> {
        let st = self.state()?;
        let end = offset
            .checked_add(out.len() as u64)
            .filter(|&e| e <= st.len)
            .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "read past the end"))?;
        let mut pos = offset;
        while pos < end {
            let b = pos / BLOCK;
            let in_block = (pos % BLOCK) as usize;
            let n = ((BLOCK - pos % BLOCK).min(end - pos)) as usize;
            let data = self.block(&st, b)?;
            let from = (pos - offset) as usize;
            let (Some(dst), Some(src)) = (
                out.get_mut(from..from + n),
                data.get(in_block..in_block + n),
            ) else {
                return Err(io::Error::other("overlay read bounds"));
            };
            dst.copy_from_slice(src);
            pos += n as u64;
        }
        Ok(())
    }

    fn set_len(&self, len: u64) -> Result<(), io::Error> {
        let mut st = self.state()?;
        if len < st.len {
            st.visible = st.visible.min(len);
            st.blocks.retain(|&b, _| b * BLOCK < len);
            let last = len / BLOCK;
            let cut = (len % BLOCK) as usize;
            if let Some(data) = st.blocks.get_mut(&last)
                && let Some(tail) = data.get_mut(cut..)
            {
                tail.fill(0);
            }
        }
        st.len = len;
        Ok(())
    }

    fn sync_data(&self) -> Result<(), io::Error> {
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), io::Error> {
        let mut st = self.state()?;
        let end = offset
            .checked_add(data.len() as u64)
            .ok_or_else(|| io::Error::other("write past u64"))?;
        let mut pos = offset;
        while pos < end {
            let b = pos / BLOCK;
            let in_block = (pos % BLOCK) as usize;
            let n = ((BLOCK - pos % BLOCK).min(end - pos)) as usize;
            let mut block = self.block(&st, b)?;
            let from = (pos - offset) as usize;
            let (Some(dst), Some(src)) = (
                block.get_mut(in_block..in_block + n),
                data.get(from..from + n),
            ) else {
                return Err(io::Error::other("overlay write bounds"));
            };
            dst.copy_from_slice(src);
            st.blocks.insert(b, block);
            pos += n as u64;
        }
        st.len = st.len.max(end);
        Ok(())
    }

    fn close(&self) -> Result<(), io::Error> {
        self.file.close()
    }

    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.file.try_lock_range(start, end)
    }

    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> Result<bool, BackendError> {
        self.file.try_lock_shared_range(start, end)
    }

    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.file.lock_range(start, end)
    }

    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.file.lock_shared_range(start, end)
    }

    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.file.unlock_range(start, end)
    }

    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.file.query_lock_range(start, end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn overlay(content: &[u8]) -> (tempfile::NamedTempFile, Overlay) {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(content).unwrap();
        f.flush().unwrap();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(f.path())
            .unwrap();
        let o = Overlay::new(FileBackend::new(file).unwrap(), content.len() as u64);
        (f, o)
    }

    #[test]
    fn writes_are_seen_but_never_reach_the_file() {
        let content: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let (f, o) = overlay(&content);
        o.write(4000, &[7u8; 200]).unwrap();
        o.write(12_000, &[9u8; 10]).unwrap();
        assert_eq!(o.len().unwrap(), 12_010);
        let mut buf = vec![0u8; 12_010];
        o.read(0, &mut buf).unwrap();
        let mut expected = content.clone();
        expected.resize(12_010, 0);
        expected[4000..4200].fill(7);
        expected[12_000..].fill(9);
        assert_eq!(buf, expected);
        // A shrink to the middle of a written block keeps what lies before the cut, in that
        // block and the ones before it, and growing again shows zeros after it.
        o.set_len(5000).unwrap();
        o.set_len(9000).unwrap();
        let mut head = vec![0u8; 5000];
        o.read(0, &mut head).unwrap();
        assert_eq!(head, expected[..5000]);
        let mut tail = vec![1u8; 4000];
        o.read(5000, &mut tail).unwrap();
        assert!(tail.iter().all(|&b| b == 0));
        assert!(o.read(8999, &mut [0u8; 2]).is_err());
        assert_eq!(std::fs::read(f.path()).unwrap(), content);
    }
}
