//! Checks io_uring before any executor starts, so an unusable kernel or
//! sandbox ends with one clear message naming the cause and the fix.

/// Raises the soft RLIMIT_MEMLOCK to the hard limit: io_uring's registered
/// buffers are locked memory.
pub fn raise_memlock() {
    // SAFETY: getrlimit/setrlimit only read and write the struct given.
    unsafe {
        let mut lim: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim);
        }
    }
}

fn memlock_kib() -> String {
    // SAFETY: getrlimit only writes the struct given.
    unsafe {
        let mut lim: libc::rlimit = std::mem::zeroed();
        libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim);
        if lim.rlim_cur == libc::RLIM_INFINITY {
            "unlimited".into()
        } else {
            format!("{} KiB", lim.rlim_cur / 1024)
        }
    }
}

/// Why io_uring cannot be used, with the fix, from the errno of
/// io_uring_setup.
pub fn explain(err: &std::io::Error) -> String {
    let disabled = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled").ok();
    let disabled = disabled.as_deref().map(str::trim);
    match err.raw_os_error() {
        Some(libc::ENOSYS) => "io_uring is not available: io_uring_setup returned ENOSYS. The kernel is older than 5.8 or was built without io_uring, or a seccomp filter (container runtime) hides it. Fix: run on Linux 5.11 or newer, or allow io_uring_setup/io_uring_enter/io_uring_register in the container's seccomp profile (e.g. docker run --security-opt seccomp=unconfined).".into(),
        Some(libc::EPERM) if disabled == Some("2") => "io_uring is disabled on this host (kernel.io_uring_disabled = 2). Fix: sysctl -w kernel.io_uring_disabled=0 (see deploy/sysctl.d/60-corekv.conf).".into(),
        Some(libc::EPERM) if disabled == Some("1") => "io_uring is restricted to the group in kernel.io_uring_group (kernel.io_uring_disabled = 1). Fix: sysctl -w kernel.io_uring_disabled=0, or run corekv as a member of that group.".into(),
        Some(libc::EPERM) => "io_uring is not permitted: io_uring_setup returned EPERM, so a seccomp filter or security module (container runtime, SELinux, AppArmor) blocks it. Fix: allow io_uring_setup/io_uring_enter/io_uring_register for corekv (e.g. docker run --security-opt seccomp=unconfined).".into(),
        Some(libc::ENOMEM) => format!("io_uring could not lock its memory: io_uring_setup returned ENOMEM with RLIMIT_MEMLOCK at {}. Fix: raise the limit (ulimit -l unlimited; LimitMEMLOCK=infinity in the systemd unit; deploy/limits.d/corekv.conf).", memlock_kib()),
        _ => format!("io_uring could not be set up: {err}. corekv needs io_uring (Linux 5.11 or newer, not blocked by seccomp, RLIMIT_MEMLOCK large enough: currently {}).", memlock_kib()),
    }
}

/// Sets up and tears down a small ring.
pub fn probe() -> Result<(), String> {
    raise_memlock();
    io_uring::IoUring::new(8).map(drop).map_err(|e| explain(&e))
}

/// Explains a failure to start an executor (glommio also registers buffers,
/// which needs locked memory beyond the probe's ring).
pub fn explain_executor_error(err: &dyn std::fmt::Display) -> String {
    let text = err.to_string();
    if text.contains("Cannot allocate memory") || text.contains("ENOMEM") {
        explain(&std::io::Error::from_raw_os_error(libc::ENOMEM))
    } else if text.contains("Operation not permitted") {
        explain(&std::io::Error::from_raw_os_error(libc::EPERM))
    } else if text.contains("Function not implemented") {
        explain(&std::io::Error::from_raw_os_error(libc::ENOSYS))
    } else {
        format!("could not start a shard executor: {text}")
    }
}
