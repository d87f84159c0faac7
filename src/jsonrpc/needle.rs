//! A fixed text looked for in many messages (a member's quoted name, an error code): whether a
//! message holds it decides whether the message is parsed at all. `str::contains` prepares its
//! search anew on each call; a needle prepares it once, on first use.

use std::sync::OnceLock;

use memchr::memmem::Finder;

/// A text to look for, its search prepared on first use.
pub struct Needle {
    text: &'static str,
    finder: OnceLock<Finder<'static>>,
}

impl Needle {
    pub const fn new(text: &'static str) -> Self {
        Self {
            text,
            finder: OnceLock::new(),
        }
    }

    /// Whether `haystack` holds the text.
    pub fn is_in(&self, haystack: &str) -> bool {
        let finder = self.finder.get_or_init(|| Finder::new(self.text));
        finder.find(haystack.as_bytes()).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::Needle;

    #[test]
    fn finds_the_text_anywhere_and_only_the_text() {
        static IS_ERROR: Needle = Needle::new(r#""isError""#);
        assert!(IS_ERROR.is_in(r#"{"content":[],"isError":true}"#));
        assert!(IS_ERROR.is_in(r#""isError""#));
        assert!(!IS_ERROR.is_in(r#"{"isErr":true}"#));
        assert!(!IS_ERROR.is_in(""));
    }
}
