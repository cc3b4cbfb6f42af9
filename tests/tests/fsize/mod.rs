//! A file size limit for the whole test process (`setrlimit`), under which a write past the
//! limit fails with EFBIG, as on a full disk. A test binary that uses it holds one test, so
//! that the limit, the process's, touches nothing else.

/// Ignores SIGXFSZ, which a write past the limit raises (rota's CLI ignores it too): the write
/// then fails with EFBIG.
pub fn ignore_sigxfsz() {
    // SAFETY: ignoring a signal; this process writes past a file limit on purpose.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
}

/// Sets the soft file size limit (bytes); the hard one is left as it is.
pub fn limit_files_to(bytes: u64) {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit write and read the struct given; no other effect.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_FSIZE, &mut r), 0);
        r.rlim_cur = bytes.min(r.rlim_max);
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &r), 0);
    }
}

/// The hard file size limit: what [`limit_files_to`] lifts the soft one back to.
pub fn unlimited() -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: as above.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_FSIZE, &mut r), 0);
    }
    r.rlim_max
}
