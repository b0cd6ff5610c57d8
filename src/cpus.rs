//! CPU selection: the kernel's list syntax ("0-3,8") and the process's
//! affinity mask.

/// Parses "0-3,8,10-11". Rejects empty items and reversed ranges.
pub fn parse_list(text: &str) -> Result<Vec<usize>, String> {
    let mut cpus = Vec::new();
    for item in text.split(',') {
        let item = item.trim();
        let bad = || format!("invalid CPU list '{text}' (expected e.g. 0-3,8)");
        let (lo, hi) = match item.split_once('-') {
            Some((a, b)) => (a.parse::<usize>().map_err(|_| bad())?, b.parse::<usize>().map_err(|_| bad())?),
            None => {
                let n = item.parse::<usize>().map_err(|_| bad())?;
                (n, n)
            }
        };
        if lo > hi || hi >= 8192 {
            return Err(bad());
        }
        cpus.extend(lo..=hi);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// CPUs this process may run on.
pub fn affinity() -> Vec<usize> {
    // SAFETY: sched_getaffinity fills the zeroed set it is given.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect();
        }
        (0..libc::CPU_SETSIZE as usize).filter(|&c| libc::CPU_ISSET(c, &set)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists() {
        assert_eq!(parse_list("0-3,8").unwrap(), vec![0, 1, 2, 3, 8]);
        assert_eq!(parse_list("2").unwrap(), vec![2]);
        assert!(parse_list("3-1").is_err());
        assert!(parse_list("1,,2").is_err());
        assert!(parse_list("").is_err());
        assert!(!affinity().is_empty());
    }
}
