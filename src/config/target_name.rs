//! The one check of a target's name (the `target` label), for configured targets
//! (`[[targets]] name`), the names `[[discover]]` rules give what they find, and the names read
//! back from the state directory's lost targets: not empty, no surrounding whitespace, at most
//! [`MAX_NAME_BYTES`] bytes of UTF-8, and no control characters (newlines, tabs, NUL, escapes)
//! nor Unicode line or paragraph separators, which label values, log lines and the status page
//! cannot carry as they are. Any other character is allowed (names follow models and serials,
//! which have spaces).

/// The longest name accepted, in bytes of UTF-8.
pub(crate) const MAX_NAME_BYTES: usize = 256;

/// Why a name is not accepted; the message completes "name: ".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// It is empty (or only whitespace).
    #[error("expected a non-empty name")]
    Empty,
    /// It starts or ends with whitespace.
    #[error("expected no whitespace at the start or end of the name")]
    Whitespace,
    /// It is too long.
    #[error("expected at most {MAX_NAME_BYTES} bytes, found {0}")]
    TooLong(usize),
    /// It has a character that is not printable.
    #[error("expected printable characters only, found U+{code:04X} at character {at}")]
    NotPrintable {
        /// The character's code point.
        code: u32,
        /// Its 1-based position, in characters.
        at: usize,
    },
}

/// Whether `c` may not appear in a name.
fn unprintable(c: char) -> bool {
    c.is_control() || c == '\u{2028}' || c == '\u{2029}'
}

/// Checks a target's name.
pub fn check(name: &str) -> Result<(), NameError> {
    if let Some((at, c)) = name.chars().enumerate().find(|(_, c)| unprintable(*c)) {
        return Err(NameError::NotPrintable {
            code: u32::from(c),
            at: at + 1,
        });
    }
    if name.trim().is_empty() {
        return Err(NameError::Empty);
    }
    if name.trim() != name {
        return Err(NameError::Whitespace);
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(NameError::TooLong(name.len()));
    }
    Ok(())
}

/// `name` quoted for a log line or a message, cut to [`MAX_NAME_BYTES`] characters.
pub(crate) fn quoted(name: &str) -> String {
    let cut: String = name.chars().take(MAX_NAME_BYTES).collect();
    if cut.len() < name.len() {
        format!("{cut:?}… ({} bytes)", name.len())
    } else {
        format!("{cut:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_printable_trimmed_and_bounded() {
        for ok in [
            "data",
            "disk-WDC WD40EFRX-1",
            "pv-é",
            &"x".repeat(MAX_NAME_BYTES),
        ] {
            assert_eq!(check(ok), Ok(()), "{ok:?}");
        }
        assert_eq!(check(""), Err(NameError::Empty));
        assert_eq!(check("  "), Err(NameError::Empty));
        assert_eq!(check(" a"), Err(NameError::Whitespace));
        assert_eq!(
            check(&"x".repeat(MAX_NAME_BYTES + 1)),
            Err(NameError::TooLong(MAX_NAME_BYTES + 1))
        );
        assert_eq!(
            check("pv-a\nb"),
            Err(NameError::NotPrintable { code: 10, at: 5 })
        );
        assert_eq!(
            check("a\u{2028}"),
            Err(NameError::NotPrintable {
                code: 0x2028,
                at: 2
            })
        );
        assert_eq!(
            check("a\0").unwrap_err().to_string(),
            "expected printable characters only, found U+0000 at character 2"
        );
        assert_eq!(quoted("a\nb"), "\"a\\nb\"");
        assert!(quoted(&"y".repeat(300)).ends_with("… (300 bytes)"));
    }
}
