//! Script flags: the `#!lua flags=...` shebang of EVAL scripts and the
//! flags of functions (eval.c's evalExtractShebangFlags, script.c).

pub const NO_WRITES: u32 = 1;
pub const ALLOW_OOM: u32 = 1 << 1;
pub const ALLOW_STALE: u32 = 1 << 2;
pub const NO_CLUSTER: u32 = 1 << 3;
/// A script without a shebang: Redis's pre-7.0 rules.
pub const EVAL_COMPAT_MODE: u32 = 1 << 4;
pub const ALLOW_CROSS_SLOT: u32 = 1 << 5;

/// Flag names, in Redis's order (FUNCTION LIST reports them so).
pub const NAMES: &[(u32, &str)] = &[
    (NO_WRITES, "no-writes"),
    (ALLOW_OOM, "allow-oom"),
    (ALLOW_STALE, "allow-stale"),
    (NO_CLUSTER, "no-cluster"),
    (ALLOW_CROSS_SLOT, "allow-cross-slot-keys"),
];

pub fn by_name(name: &[u8], ignore_case: bool) -> Option<u32> {
    NAMES
        .iter()
        .find(|(_, n)| if ignore_case { n.as_bytes().eq_ignore_ascii_case(name) } else { n.as_bytes() == name })
        .map(|(f, _)| *f)
}

/// The flags of a script body and the length of its shebang line (kept out
/// of the compiled code, its line feed kept so line numbers stay). Errors
/// are the reply texts.
pub fn parse_shebang(body: &[u8]) -> Result<(u32, usize), String> {
    if !body.starts_with(b"#!") {
        return Ok((EVAL_COMPAT_MODE, 0));
    }
    let Some(end) = body.iter().position(|&b| b == b'\n') else {
        return Err("ERR Invalid script shebang".into());
    };
    let parts = match shard::config::split_args(&body[..end]) {
        Some(parts) if !parts.is_empty() => parts,
        _ => return Err("ERR Invalid engine in script shebang".into()),
    };
    if parts[0] != b"#!lua" {
        return Err(format!("ERR Unexpected engine in script shebang: {}", String::from_utf8_lossy(&parts[0])));
    }
    let mut flags = 0;
    for part in &parts[1..] {
        let Some(list) = part.strip_prefix(b"flags=") else {
            return Err(format!("ERR Unknown lua shebang option: {}", String::from_utf8_lossy(part)));
        };
        if list.is_empty() {
            continue;
        }
        for name in list.split(|&b| b == b',') {
            match by_name(name, false) {
                Some(f) => flags |= f,
                None => {
                    return Err(format!("ERR Unexpected flag in script shebang: {}", String::from_utf8_lossy(name)))
                }
            }
        }
    }
    Ok((flags, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shebangs() {
        assert_eq!(parse_shebang(b"return 1"), Ok((EVAL_COMPAT_MODE, 0)));
        assert_eq!(parse_shebang(b"#!lua\nreturn 1"), Ok((0, 5)));
        assert_eq!(parse_shebang(b"#!lua flags=no-writes,allow-oom\nx"), Ok((NO_WRITES | ALLOW_OOM, 31)));
        assert_eq!(parse_shebang(b"#!lua flags=\nx"), Ok((0, 12)));
        assert_eq!(parse_shebang(b"#!lua"), Err("ERR Invalid script shebang".into()));
        assert_eq!(parse_shebang(b"#!py\n"), Err("ERR Unexpected engine in script shebang: #!py".into()));
        assert_eq!(parse_shebang(b"#!lua x=1\n"), Err("ERR Unknown lua shebang option: x=1".into()));
        assert_eq!(parse_shebang(b"#!lua flags=bad\n"), Err("ERR Unexpected flag in script shebang: bad".into()));
    }
}
