//! Redis's glob matcher (`stringmatchlen`), used by KEYS, SCAN MATCH and
//! CONFIG GET: `*`, `?`, `[abc]`, `[^a-z]`, `\x` escapes.

pub fn glob_match(pattern: &[u8], string: &[u8], nocase: bool) -> bool {
    let mut skip_longer = false;
    match_impl(pattern, string, nocase, &mut skip_longer, 0)
}

fn eq(a: u8, b: u8, nocase: bool) -> bool {
    if nocase {
        a.eq_ignore_ascii_case(&b)
    } else {
        a == b
    }
}

fn match_impl(mut p: &[u8], mut s: &[u8], nocase: bool, skip_longer: &mut bool, nesting: u32) -> bool {
    // Same guard as Redis: pathological patterns must not recurse forever.
    if nesting > 1000 {
        return false;
    }
    while !p.is_empty() && !s.is_empty() {
        match p[0] {
            b'*' => {
                while p.len() > 1 && p[1] == b'*' {
                    p = &p[1..];
                }
                if p.len() == 1 {
                    return true;
                }
                while !s.is_empty() {
                    if match_impl(&p[1..], s, nocase, skip_longer, nesting + 1) {
                        return true;
                    }
                    if *skip_longer {
                        return false;
                    }
                    s = &s[1..];
                }
                // No match for the rest of the pattern against any suffix:
                // longer strings cannot match either.
                *skip_longer = true;
                return false;
            }
            b'?' => {
                s = &s[1..];
            }
            b'[' => {
                p = &p[1..];
                let not = !p.is_empty() && p[0] == b'^';
                if not {
                    p = &p[1..];
                }
                let mut matched = false;
                loop {
                    if p.is_empty() {
                        break;
                    }
                    if p[0] == b'\\' && p.len() >= 2 {
                        p = &p[1..];
                        if p[0] == s[0] {
                            matched = true;
                        }
                    } else if p[0] == b']' {
                        break;
                    } else if p.len() >= 3 && p[1] == b'-' {
                        let (mut start, mut end) = (p[0], p[2]);
                        let mut c = s[0];
                        if start > end {
                            std::mem::swap(&mut start, &mut end);
                        }
                        if nocase {
                            start = start.to_ascii_lowercase();
                            end = end.to_ascii_lowercase();
                            c = c.to_ascii_lowercase();
                        }
                        p = &p[2..];
                        if c >= start && c <= end {
                            matched = true;
                        }
                    } else if eq(p[0], s[0], nocase) {
                        matched = true;
                    }
                    p = &p[1..];
                }
                // `p` is on the closing ']', or empty for an unterminated class
                // (Redis then ends the match there too).
                let matched = if not { !matched } else { matched };
                if !matched {
                    return false;
                }
                s = &s[1..];
            }
            b'\\' if p.len() >= 2 => {
                p = &p[1..];
                if !eq(p[0], s[0], nocase) {
                    return false;
                }
                s = &s[1..];
            }
            c => {
                if !eq(c, s[0], nocase) {
                    return false;
                }
                s = &s[1..];
            }
        }
        if p.is_empty() {
            break;
        }
        p = &p[1..];
        if s.is_empty() {
            while !p.is_empty() && p[0] == b'*' {
                p = &p[1..];
            }
            break;
        }
    }
    p.is_empty() && s.is_empty()
}

#[cfg(test)]
mod tests {
    use super::glob_match as m;

    #[test]
    fn redis_examples() {
        assert!(m(b"*", b"anything", false));
        assert!(m(b"h?llo", b"hello", false));
        assert!(m(b"h*llo", b"heeeello", false));
        assert!(m(b"h[ae]llo", b"hallo", false));
        assert!(!m(b"h[ae]llo", b"hillo", false));
        assert!(m(b"h[^e]llo", b"hallo", false));
        assert!(!m(b"h[^e]llo", b"hello", false));
        assert!(m(b"h[a-b]llo", b"hbllo", false));
        assert!(m(b"h[b-a]llo", b"hallo", false));
        assert!(m(b"h\\*llo", b"h*llo", false));
        assert!(!m(b"h\\*llo", b"hello", false));
        assert!(m(b"a*", b"a", false));
        assert!(!m(b"a?", b"a", false));
        assert!(m(b"", b"", false));
        assert!(!m(b"", b"a", false));
        assert!(m(b"HELLO", b"hello", true));
        assert!(m(b"*a*a*a*a*a*a*a*a*b", b"aaaaaaaaaaaaaaaaaaaaaaaab", false));
        assert!(!m(b"*a*a*a*a*a*a*a*a*a*a*a*a*b", &[b'a'; 60], false));
    }
}
