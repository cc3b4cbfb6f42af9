//! The callers of the jobs the machine holds, kept in memory for the fetch (never stored).

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::Arc;

use rota_core::Caller;
use rota_core::machine::{JobKey, KeyHasher};

/// Each held job's caller, with one shared [`Arc`] per distinct caller: a dispatch clones the
/// pointer that every job of that caller shares, whose count stays in the cache, rather than
/// one of its own per job (at 10 000 live jobs, a cache miss per target).
#[derive(Debug, Default)]
pub(crate) struct Callers {
    by_job: HashMap<JobKey, Arc<Caller>, BuildHasherDefault<KeyHasher>>,
    /// Each distinct caller of `by_job`, with the number of its jobs there (never 0).
    shared: HashMap<Arc<Caller>, usize>,
}

impl Callers {
    /// Holds `caller` for job `key` (replacing any caller held for it).
    pub(crate) fn insert(&mut self, key: JobKey, caller: Caller) {
        let arc = match self.shared.get_key_value(&caller) {
            Some((arc, _)) => arc.clone(),
            None => Arc::new(caller),
        };
        *self.shared.entry(arc.clone()).or_insert(0) += 1;
        if let Some(old) = self.by_job.insert(key, arc) {
            self.release(&old);
        }
    }

    /// The caller held for job `key`.
    pub(crate) fn get(&self, key: JobKey) -> Option<Arc<Caller>> {
        self.by_job.get(&key).cloned()
    }

    /// Lets job `key`'s caller go (the shared one too, with its last job).
    pub(crate) fn remove(&mut self, key: JobKey) {
        if let Some(arc) = self.by_job.remove(&key) {
            self.release(&arc);
        }
    }

    /// Lets every caller go.
    pub(crate) fn clear(&mut self) {
        self.by_job.clear();
        self.shared.clear();
    }

    fn release(&mut self, caller: &Caller) {
        if let Some(n) = self.shared.get_mut(caller) {
            *n -= 1;
            if *n == 0 {
                self.shared.remove(caller);
            }
        }
    }

    #[cfg(test)]
    fn distinct(&self) -> usize {
        self.shared.len()
    }

    /// How many jobs have a caller held.
    #[cfg(test)]
    pub(crate) fn jobs(&self) -> usize {
        self.by_job.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(name: &str, key: &str) -> Caller {
        Caller {
            name: name.into(),
            workspace: "w".into(),
            key_sha256: key.into(),
        }
    }

    #[test]
    fn jobs_of_one_caller_share_its_arc_until_the_last_leaves() {
        let mut c = Callers::default();
        c.insert(1, caller("ann", "k1"));
        c.insert(2, caller("ann", "k1"));
        c.insert(3, caller("bob", "k2"));
        let (a1, a2, b) = (c.get(1).unwrap(), c.get(2).unwrap(), c.get(3).unwrap());
        assert!(Arc::ptr_eq(&a1, &a2));
        assert!(!Arc::ptr_eq(&a1, &b));
        assert_eq!(*b, caller("bob", "k2"));
        assert_eq!(c.distinct(), 2);

        c.remove(1);
        assert!(c.get(1).is_none());
        assert!(Arc::ptr_eq(&c.get(2).unwrap(), &a1));
        assert_eq!(c.distinct(), 2);
        c.remove(2);
        c.remove(2);
        assert_eq!(c.distinct(), 1);
        // A new job of a caller that left gets a fresh Arc.
        c.insert(4, caller("ann", "k1"));
        assert!(!Arc::ptr_eq(&c.get(4).unwrap(), &a1));
        c.clear();
        assert_eq!(c.distinct(), 0);
        assert!(c.get(3).is_none());
    }

    #[test]
    fn callers_differing_in_any_field_are_kept_apart() {
        let mut c = Callers::default();
        c.insert(1, caller("ann", "k1"));
        c.insert(2, caller("ann", "k2"));
        let mut other_ws = caller("ann", "k1");
        other_ws.workspace = "v".into();
        c.insert(3, other_ws.clone());
        assert_eq!(c.distinct(), 3);
        assert_eq!(c.get(2).unwrap().key_sha256, "k2");
        assert_eq!(*c.get(3).unwrap(), other_ws);
    }

    #[test]
    fn replacing_a_jobs_caller_releases_the_old_one() {
        let mut c = Callers::default();
        c.insert(1, caller("ann", "k1"));
        c.insert(1, caller("bob", "k2"));
        assert_eq!(c.distinct(), 1);
        assert_eq!(c.get(1).unwrap().name, "bob");
    }
}
