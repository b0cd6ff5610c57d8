//! The process title, as Redis's setproctitle: the command line's memory
//! is overwritten with `corekv <bind>:<port>`, so `ps` never shows a
//! `--requirepass` or `--masterauth` given on the command line. Call after
//! the arguments were copied (`std::env::args` reads that memory).

/// The command line's bounds, fields 48 and 49 of /proc/self/stat.
fn argument_area() -> Option<(usize, usize)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, which may hold spaces: field 3 on.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    let start = fields.get(48 - 3)?.parse().ok()?;
    let end = fields.get(49 - 3)?.parse().ok()?;
    (end > start).then_some((start, end))
}

pub fn set(title: &str) {
    let Some((start, end)) = argument_area() else { return };
    let len = end - start;
    let shown = &title.as_bytes()[..title.len().min(len - 1)];
    // SAFETY: [start, end) is this process's own argument strings, mapped
    // and writable for its whole life; nothing reads them after startup.
    unsafe {
        let area = std::slice::from_raw_parts_mut(start as *mut u8, len);
        area.fill(0);
        area[..shown.len()].copy_from_slice(shown);
    }
}
