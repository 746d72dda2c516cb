//! Client-supplied text in error messages and log lines: control characters
//! escaped, length bounded.
//!
//! Invariants: the output of [`quote`] never contains a control character
//! (so a value cannot forge a log line or inject NULs), and is at most
//! about `4 * max_chars + 32` bytes whatever the input's size (so an
//! oversized value cannot blow up a response or a log line).

use std::fmt;

/// How many characters of a client value an error message or log line shows.
pub const QUOTE_PREFIX_CHARS: usize = 64;

/// A client value for a message: `'abc'`, or `'abc…' (65536 bytes)` when
/// longer than the prefix. Control characters are escaped (`\n`, `\u{0}`).
pub fn quote(value: &str) -> Quoted<'_> {
    Quoted { value, max_chars: QUOTE_PREFIX_CHARS, total_bytes: value.len() }
}

/// [`quote`] with a prefix of `max_chars` characters.
pub fn quote_prefix(value: &str, max_chars: usize) -> Quoted<'_> {
    Quoted { value, max_chars, total_bytes: value.len() }
}

/// Bytes that may not be UTF-8: quoted as [`quote`] does, invalid sequences
/// shown as U+FFFD. Only the prefix is converted.
pub fn quote_bytes(value: &[u8]) -> String {
    // Four bytes per character is the most a UTF-8 prefix can need.
    let prefix = &value[..value.len().min(4 * QUOTE_PREFIX_CHARS)];
    let text = String::from_utf8_lossy(prefix);
    Quoted { value: &text, max_chars: QUOTE_PREFIX_CHARS, total_bytes: value.len() }.to_string()
}

pub struct Quoted<'a> {
    value: &'a str,
    max_chars: usize,
    /// Length of the whole value (`value` may be a prefix of it).
    total_bytes: usize,
}

impl fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("'")?;
        let mut chars = self.value.chars();
        for c in chars.by_ref().take(self.max_chars) {
            write_escaped(f, c)?;
        }
        if chars.next().is_some() || self.total_bytes > self.value.len() {
            write!(f, "…' ({} bytes)", self.total_bytes)
        } else {
            f.write_str("'")
        }
    }
}

impl fmt::Debug for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// A whole value (a request path, a message that already quotes client
/// values) for a log line: control characters escaped, quotes and
/// backslashes left alone, at most `max_chars` characters shown.
pub fn escape_for_log(value: &str, max_chars: usize) -> Escaped<'_> {
    Escaped { value, max_chars }
}

pub struct Escaped<'a> {
    value: &'a str,
    max_chars: usize,
}

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut chars = self.value.chars();
        for c in chars.by_ref().take(self.max_chars) {
            write_control_escaped(f, c)?;
        }
        if chars.next().is_some() {
            write!(f, "… ({} bytes)", self.value.len())?;
        }
        Ok(())
    }
}

/// Inside a quoted value: the quote and the escape character are escaped too.
fn write_escaped(f: &mut fmt::Formatter<'_>, c: char) -> fmt::Result {
    match c {
        '\'' => f.write_str("\\'"),
        '\\' => f.write_str("\\\\"),
        c => write_control_escaped(f, c),
    }
}

/// Control characters (and line separators) as escapes, the rest as is.
fn write_control_escaped(f: &mut fmt::Formatter<'_>, c: char) -> fmt::Result {
    match c {
        c if c.is_control() => write!(f, "{}", c.escape_default()),
        // Line and paragraph separators end a line in some log viewers.
        '\u{2028}' | '\u{2029}' => write!(f, "{}", c.escape_unicode()),
        c => write!(f, "{c}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_values_are_quoted_whole() {
        assert_eq!(quote("abc").to_string(), "'abc'");
        assert_eq!(quote("").to_string(), "''");
        assert_eq!(quote("it's").to_string(), "'it\\'s'");
    }

    #[test]
    fn control_characters_are_escaped() {
        let forged = "abc\n2026-01-01T00:00:00Z  INFO fake line\u{0}\r\t\u{1b}[31m";
        let shown = quote_prefix(forged, 1000).to_string();
        assert!(!shown.chars().any(char::is_control), "{shown}");
        assert!(shown.contains("\\n2026") && shown.contains("\\u{0}"), "{shown}");
        let logged = escape_for_log("/v1/tenant/abc\nx\u{2028}", 100).to_string();
        assert_eq!(logged, "/v1/tenant/abc\\nx\\u{2028}");
        assert_eq!(escape_for_log("id 'a\\b'", 100).to_string(), "id 'a\\b'");
    }

    #[test]
    fn long_values_are_cut_with_their_length() {
        let big = "x".repeat(60 << 20);
        let shown = quote(&big).to_string();
        assert!(shown.len() < 120, "{}", shown.len());
        assert!(shown.ends_with(&format!("…' ({} bytes)", 60 << 20)), "{shown}");
        let shown = escape_for_log(&big, 10).to_string();
        assert_eq!(shown, format!("xxxxxxxxxx… ({} bytes)", 60 << 20));
    }

    #[test]
    fn bytes_are_quoted_lossily_and_bounded() {
        assert_eq!(quote_bytes(b"ab\xffc"), "'ab\u{fffd}c'");
        let big = vec![b'\n'; 1 << 20];
        let shown = quote_bytes(&big);
        assert!(shown.len() < 300 && shown.ends_with("(1048576 bytes)"), "{shown}");
        assert!(!shown.chars().any(char::is_control));
    }
}
