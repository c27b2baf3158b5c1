//! Variable phrases, the step between masking and the prefix tree: a parameter written as several
//! whitespace tokens becomes ONE token, so that lines of one event have the same token count
//! whatever the parameter's form. Drain's tree keys on the token count, so without this
//! `0 bytes sent` and `1024 bytes (1.0 KB) sent`, or `lifetime <1 sec` and `lifetime 00:01`, or a
//! list of three and of four fan speeds, could never share a template.
//!
//! A phrase starts at a token whose masked form ends in a variable (`42` → `<*>`, `<1` →
//! `<<*>`, `len=<*>`) and takes, in this order: further tokens that are values as a whole (a run
//! of values, `3552 3534 3375`), a unit written apart (`bytes`, `sec`, `KB)`), and after such a
//! unit a parenthesized conversion (`(1.0 KB)`). The folded token's text is the masked texts joined
//! by one space, so a template whose lines all share the phrase's form renders exactly as before
//! (`<*> bytes`), and lines whose forms differ generalize it to one `<*>`.

use super::mask::is_unit_word;

/// What folding needs to know about the tokens of one line (the miner's interned line, or the
/// masked tokens of a line whose parameters are read).
pub(crate) trait PhraseTokens {
    fn count(&self) -> usize;
    /// The raw text of token `index`.
    fn raw(&self, index: usize) -> &str;
    /// Token `index` masked to exactly `<*>` (a value as a whole, no punctuation around it).
    fn is_whole_value(&self, index: usize) -> bool;
    /// Token `index` masked to text that ends in `<*>` (`<*>`, `<<*>`, `(<*>`, `len=<*>`).
    fn ends_in_value(&self, index: usize) -> bool;
    /// Raw token `index` is a unit written apart (the miner answers from its symbol's flags).
    fn is_apart_unit(&self, index: usize) -> bool {
        is_apart_unit(self.raw(index))
    }
}

/// The end (exclusive) of the phrase starting at token `start`: `start + 1` when the token stands
/// alone.
pub(crate) fn phrase_end(tokens: &impl PhraseTokens, start: usize) -> usize {
    let count = tokens.count();
    if start >= count || !tokens.ends_in_value(start) {
        return start + 1;
    }
    let mut end = start + 1;
    if tokens.is_whole_value(start) {
        while end < count && tokens.is_whole_value(end) {
            end += 1;
        }
    }
    if end < count && tokens.is_apart_unit(end) {
        let unit = tokens.raw(end);
        end += 1;
        // `B,` ends the phrase; a bare unit may be followed by its conversion: `(1.0 KB)`.
        let bare = unit
            .as_bytes()
            .last()
            .is_some_and(|&byte| byte.is_ascii_alphanumeric() || byte == b'%');
        if bare
            && end + 1 < count
            && is_open_number(tokens.raw(end))
            && tokens.is_apart_unit(end + 1)
            && tokens
                .raw(end + 1)
                .trim_end_matches([',', ';', '.', ':'])
                .ends_with(')')
        {
            end += 2;
        }
    }
    end
}

/// A unit word written apart from its number (see [`is_unit_word`]), except one-letter units
/// other than `B` and `%`: a lone `m`, `s` or `k` after a number is too often something else.
pub(crate) fn is_apart_unit(word: &str) -> bool {
    let core = word.trim_end_matches([',', ';', '.', ')', ']', '}', ':']);
    is_unit_word(word) && (core.len() > 1 || core == "B" || core == "%")
}

/// `(1.0`, `(1,024`: an opening parenthesis and a number.
fn is_open_number(word: &str) -> bool {
    let Some(number) = word.strip_prefix('(') else {
        return false;
    };
    let mut digits = 0;
    for byte in number.bytes() {
        match byte {
            b'0'..=b'9' => digits += 1,
            b'.' | b',' => {}
            _ => return false,
        }
    }
    digits > 0 && number.as_bytes()[0].is_ascii_digit()
}
