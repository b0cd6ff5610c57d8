//! CPU lists ("0-3,8"), this process's affinity mask, and pinning.

use std::io;

/// Parses a Linux CPU list such as `0-3,8,10-11` into sorted, distinct CPUs.
pub fn parse_list(s: &str) -> Result<Vec<usize>, String> {
    let mut cpus = Vec::new();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let num = |t: &str| t.trim().parse::<usize>().map_err(|_| format!("bad CPU {t:?} in {s:?}"));
        match item.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    return Err(format!("bad CPU range {item:?}"));
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(num(item)?),
        }
    }
    if cpus.is_empty() {
        return Err(format!("empty CPU list {s:?}"));
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// The inverse of `parse_list`, with ranges folded: [0,1,2,5] -> "0-2,5".
pub fn format_list(cpus: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        out.push(if i == j { cpus[i].to_string() } else { format!("{}-{}", cpus[i], cpus[j]) });
        i = j + 1;
    }
    out.join(",")
}

/// Default split of the CPUs we may use: the first half (at least one) for
/// the servers, the rest for the load generator. One CPU is shared by both.
pub fn split(available: &[usize]) -> (Vec<usize>, Vec<usize>) {
    if available.len() < 2 {
        return (available.to_vec(), available.to_vec());
    }
    let n = available.len().div_ceil(2).min(available.len() - 1);
    (available[..n].to_vec(), available[n..].to_vec())
}

/// The CPUs this process may run on.
pub fn affinity() -> io::Result<Vec<usize>> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; the size passed is its own.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((0..libc::CPU_SETSIZE as usize).filter(|&c| libc::CPU_ISSET(c, &set)).collect())
    }
}

/// Pins the calling thread (and the threads and processes it creates
/// afterwards) to `cpus`. pid 0 is the calling thread.
pub fn pin(cpus: &[usize]) -> io::Result<()> {
    // SAFETY: as above; CPU_SET is only called with indices below CPU_SETSIZE.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus.iter().filter(|&&c| c < libc::CPU_SETSIZE as usize) {
            libc::CPU_SET(c, &mut set);
        }
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_and_format() {
        assert_eq!(parse_list("0-2,5, 4").unwrap(), vec![0, 1, 2, 4, 5]);
        assert_eq!(parse_list("3,3,1").unwrap(), vec![1, 3]);
        assert!(parse_list("2-1").is_err() && parse_list("").is_err() && parse_list("a").is_err());
        assert_eq!(format_list(&[0, 1, 2, 4, 5, 7]), "0-2,4-5,7");
        assert_eq!(format_list(&[3]), "3");
    }

    #[test]
    fn split_gives_servers_the_first_half() {
        assert_eq!(split(&[0, 1]), (vec![0], vec![1]));
        assert_eq!(split(&[0]), (vec![0], vec![0]));
        assert_eq!(split(&[0, 1, 2, 3]), (vec![0, 1], vec![2, 3]));
        assert_eq!(split(&[0, 1, 2]), (vec![0, 1], vec![2]));
        let (s, c) = split(&[0, 1, 2, 3, 4, 5, 6, 7]);
        assert_eq!((s.len(), c.len()), (4, 4));
    }

    #[test]
    fn own_affinity_is_readable() {
        assert!(!affinity().unwrap().is_empty());
    }
}
