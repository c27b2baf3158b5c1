//! The online template miner: masked tokens are interned to small integers, routed through a
//! Drain-style prefix tree (token count → leading tokens → leaf of clusters), matched by position
//! similarity, and the winning cluster's template generalizes where the line differs.
//!
//! Method: Drain (He et al., ICWS'17) with three changes from the literature and from measuring on
//! the corrected Loghub-2k: typed masking before the tree (see `mask`), sub-token generalization
//! (`user=root` + `user=guest` → `user=<*>`, keeping the key constant as the corrected ground truth
//! does), and a compaction pass that merges clusters whose templates became equal or where one
//! template covers the other (Drain's tree cannot merge across leaves). Cluster ids are fixed at
//! creation (a hash of the first template text), so a template keeps its id while it generalizes.
//!
//! Compaction also splits over-general templates, the opposite mistake of the similarity
//! threshold: a position that turned from a constant into `<*>` keeps a bounded sample of the
//! words seen there ([`ValueSample`]); when it only ever held a few constant words, each frequent
//! (`Connection <*>` over `opened`/`closed`), one child template per word is split out. The
//! over-general template keeps its id (stored rows carry it) and stays as the parent for other
//! values; the children get ids of their own, accept only lines with their word, and are never
//! merged back into a template that has `<*>` at their word.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::config::MinerConfig;
use super::fold::{PhraseTokens, is_apart_unit, phrase_end};
use super::mask::{
    BYTE_CLASS, ParamType, WILDCARD, class, is_clock, is_delimiter, is_month, is_unit_word,
    is_weekday, mask_token_shaped, needs_mask_shaped, param_type,
};

/// An interned token.
pub(crate) type Sym = u32;
/// The symbol of a whole-token `<*>`.
pub(crate) const WILD: Sym = 0;

/// FxHash (rustc's hasher): a multiply-rotate hash, several times faster than SipHash on short
/// tokens; the interner is not exposed to untrusted keys that could choose collisions cheaply
/// enough to matter (a collision costs a string compare, not correctness).
#[derive(Default, Clone, Copy)]
pub(crate) struct FxHasher {
    hash: u64,
}

const FX_SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let word = u64::from_le_bytes([
                chunk[0], chunk[1], chunk[2], chunk[3], chunk[4], chunk[5], chunk[6], chunk[7],
            ]);
            self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(FX_SEED);
        }
        for &byte in chunks.remainder() {
            self.hash = (self.hash.rotate_left(5) ^ u64::from(byte)).wrapping_mul(FX_SEED);
        }
    }
    #[inline]
    fn write_u8(&mut self, value: u8) {
        self.hash = (self.hash.rotate_left(5) ^ u64::from(value)).wrapping_mul(FX_SEED);
    }
    #[inline]
    fn write_u32(&mut self, value: u32) {
        self.hash = (self.hash.rotate_left(5) ^ u64::from(value)).wrapping_mul(FX_SEED);
    }
    #[inline]
    fn write_u64(&mut self, value: u64) {
        self.hash = (self.hash.rotate_left(5) ^ value).wrapping_mul(FX_SEED);
    }
    #[inline]
    fn write_usize(&mut self, value: usize) {
        self.write_u64(value as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.hash
    }
}

pub(crate) type FxBuild = BuildHasherDefault<FxHasher>;
pub(crate) type FxHashMap<K, V> = HashMap<K, V, FxBuild>;

/// FNV-1a 64 of a template's text: the stable template id, printed as 16 hex digits.
pub fn template_hash(text: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in text.as_bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// Hash of a token's bytes for the interner: foldhash/wyhash-style folded multiplies over 8-byte
/// words, so a typical token (under 16 bytes) costs two loads and one 64×64→128 multiply instead of
/// one dependent multiply per byte. Not keyed: the interner only needs spread, and a collision
/// costs a byte compare, never a wrong symbol.
#[inline]
fn token_hash(bytes: &[u8]) -> u64 {
    const K0: u64 = 0x243f_6a88_85a3_08d3;
    const K1: u64 = 0x1319_8a2e_0370_7344;
    const K2: u64 = 0xa409_3822_299f_31d0;
    #[inline]
    fn fold(a: u64, b: u64) -> u64 {
        let full = u128::from(a) * u128::from(b);
        (full as u64) ^ ((full >> 64) as u64)
    }
    #[inline]
    fn word(bytes: &[u8], at: usize) -> u64 {
        u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap_or([0; 8]))
    }
    let length = bytes.len();
    let (a, b) = if length >= 8 {
        // Whole words, then the last 8 bytes (overlapping the previous word when the length is
        // not a multiple of 8): every byte is read, and no byte beyond the slice.
        let mut state = K2 ^ length as u64;
        let mut at = 0;
        while at + 16 < length {
            state = fold(word(bytes, at) ^ K0, word(bytes, at + 8) ^ state);
            at += 16;
        }
        if at + 8 < length {
            state = fold(word(bytes, at) ^ K0, state ^ K1);
        }
        (word(bytes, length - 8) ^ K1, state)
    } else if length >= 4 {
        let low = u32::from_le_bytes(bytes[..4].try_into().unwrap_or([0; 4]));
        let high = u32::from_le_bytes(bytes[length - 4..].try_into().unwrap_or([0; 4]));
        (
            u64::from(low) ^ K0,
            (u64::from(high) << 32 | length as u64) ^ K1,
        )
    } else if length > 0 {
        let packed = u64::from(bytes[0]) << 16
            | u64::from(bytes[length / 2]) << 8
            | u64::from(bytes[length - 1]);
        (packed ^ K0, length as u64 ^ K1)
    } else {
        (K0, K1)
    };
    fold(a, b)
}

/// `a == b` for short slices without a call into libc's `memcmp` (whose call and dispatch cost
/// more than the compare for a typical 4-16 byte token): word loads, the last one overlapping.
#[inline]
pub(super) fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    #[inline]
    fn word(bytes: &[u8], at: usize) -> u64 {
        u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap_or([0; 8]))
    }
    #[inline]
    fn half(bytes: &[u8], at: usize) -> u32 {
        u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap_or([0; 4]))
    }
    let length = a.len();
    if length != b.len() {
        return false;
    }
    if length >= 8 {
        let mut at = 0;
        while at + 8 < length {
            if word(a, at) != word(b, at) {
                return false;
            }
            at += 8;
        }
        word(a, length - 8) == word(b, length - 8)
    } else if length >= 4 {
        half(a, 0) == half(b, 0) && half(a, length - 4) == half(b, length - 4)
    } else {
        a.iter().zip(b).all(|(x, y)| x == y)
    }
}

/// Interned token texts. Symbol 0 is `<*>`; symbols are numbered in order of first sight, so the
/// numbering (and everything derived from it) does not depend on the hash function.
///
/// Layout, chosen because interning is the per-token hot path: the texts live back to back in one
/// arena, and the lookup table is an open-addressing array of packed `(hash tag, symbol)` words,
/// so a lookup touches one 8-byte slot and, on a tag match, the candidate's bytes in the arena.
#[derive(Debug)]
pub(crate) struct Symbols {
    /// All symbol texts, concatenated.
    arena: String,
    /// Byte range of each symbol's text in `arena`.
    spans: Vec<(u32, u32)>,
    /// Power-of-two table, at most half full. A slot is 0 (empty) or `tag << 32 | (sym + 1)`,
    /// the tag being the high 32 bits of the token's hash.
    slots: Vec<u64>,
    /// For tokens with exactly one `<*>` inside literal text: (prefix, suffix) byte lengths.
    partial: Vec<Option<(u32, u32)>>,
    /// What the text is, per symbol: [`SymbolFlags`] bits, one byte (read per token per line).
    flags: Vec<u8>,
}

/// Bits of [`Symbols::flags`], each a pure function of the symbol's text, computed once when the
/// symbol is created.
struct SymbolFlags;

impl SymbolFlags {
    /// Contains `<*>` (whole or partial): routed to the `<*>` child of the tree.
    const VARIABLE: u8 = 1;
    /// Contains `<*>` or a digit: never a key of the tree (Drain's rule: `eth0`, `dn228` are as
    /// likely parameters as words, and a parameter as a key splits one event over leaves).
    const KEYLESS: u8 = 2;
    /// A folded variable phrase: a variable token with a space in it (see `fold`).
    const PHRASE: u8 = 4;
    /// Ends in `<*>`: a variable phrase may start here (see `fold`).
    const ENDS_IN_VALUE: u8 = 8;
    /// A unit written apart from its number (see `fold`); for a symbol that is no variable, the
    /// text is the raw token's, so this answers for the raw token too.
    const APART_UNIT: u8 = 16;

    fn of(text: &str) -> u8 {
        let variable = text.contains(WILDCARD);
        let mut flags = 0;
        if variable {
            flags |= Self::VARIABLE;
        }
        if variable || text.bytes().any(|byte| byte.is_ascii_digit()) {
            flags |= Self::KEYLESS;
        }
        if variable && text.contains(' ') {
            flags |= Self::PHRASE;
        }
        if text.ends_with(WILDCARD) {
            flags |= Self::ENDS_IN_VALUE;
        }
        if is_apart_unit(text) {
            flags |= Self::APART_UNIT;
        }
        flags
    }
}

impl Default for Symbols {
    fn default() -> Self {
        Self {
            arena: String::new(),
            spans: Vec::new(),
            slots: vec![0; 1024],
            partial: Vec::new(),
            flags: Vec::new(),
        }
    }
}

impl Symbols {
    fn new() -> Self {
        let mut symbols = Symbols::default();
        symbols.intern(WILDCARD);
        symbols
    }

    /// The symbol of `text`, created when new.
    #[inline]
    pub(crate) fn intern(&mut self, text: &str) -> Sym {
        let hash = token_hash(text.as_bytes());
        let tag = hash >> 32;
        let mask = self.slots.len() - 1;
        let mut slot = hash as usize & mask;
        loop {
            let entry = self.slots[slot];
            if entry == 0 {
                break;
            }
            if entry >> 32 == tag {
                let sym = (entry as u32).wrapping_sub(1);
                if same_bytes(self.bytes(sym), text.as_bytes()) {
                    return sym;
                }
            }
            slot = (slot + 1) & mask;
        }
        // New symbol: `slot` is the empty slot that ends its probe sequence.
        // Symbols and arena offsets are u32: 4 Gi distinct tokens or 4 GiB of token text are far
        // beyond any sensible template set (the store would be unusable long before), and
        // failing loudly beats wrapping into another symbol's text.
        let sym = Sym::try_from(self.spans.len()).expect("more than 4 Gi token symbols");
        let start = self.arena.len();
        self.arena.push_str(text);
        let end = u32::try_from(self.arena.len()).expect("more than 4 GiB of token text");
        self.spans.push((start as u32, end));
        let wild_count = text.matches(WILDCARD).count();
        let partial = (wild_count == 1 && text != WILDCARD).then(|| {
            let at = text.find(WILDCARD).unwrap_or(0);
            (at as u32, (text.len() - at - WILDCARD.len()) as u32)
        });
        self.partial.push(partial);
        self.flags.push(SymbolFlags::of(text));
        self.slots[slot] = tag << 32 | u64::from(sym + 1);
        if self.spans.len() * 2 > self.slots.len() {
            self.grow();
        }
        sym
    }

    /// Doubles the table and re-places every symbol (rehashing from the arena).
    fn grow(&mut self) {
        let mut slots = vec![0u64; self.slots.len() * 2];
        let mask = slots.len() - 1;
        for sym in 0..self.spans.len() as Sym {
            let hash = token_hash(self.bytes(sym));
            let mut slot = hash as usize & mask;
            while slots[slot] != 0 {
                slot = (slot + 1) & mask;
            }
            slots[slot] = (hash >> 32) << 32 | u64::from(sym + 1);
        }
        self.slots = slots;
    }

    #[inline]
    pub(crate) fn text(&self, sym: Sym) -> &str {
        let (start, end) = self.spans[sym as usize];
        &self.arena[start as usize..end as usize]
    }

    /// The text's bytes (no char-boundary checks, for comparing).
    #[inline]
    fn bytes(&self, sym: Sym) -> &[u8] {
        let (start, end) = self.spans[sym as usize];
        &self.arena.as_bytes()[start as usize..end as usize]
    }

    #[inline]
    fn has(&self, sym: Sym, flag: u8) -> bool {
        self.flags[sym as usize] & flag != 0
    }

    #[inline]
    fn is_variable(&self, sym: Sym) -> bool {
        self.has(sym, SymbolFlags::VARIABLE)
    }

    #[inline]
    fn is_keyless(&self, sym: Sym) -> bool {
        self.has(sym, SymbolFlags::KEYLESS)
    }

    /// Does the (masked) line token `token` fit the template token `pattern`? Inlined for the
    /// common outcomes (same symbol, whole `<*>`); partial patterns take the out-of-line path.
    #[inline(always)]
    fn fits(&self, pattern: Sym, token: Sym) -> bool {
        if pattern == token {
            return true;
        }
        if pattern == WILD {
            return false;
        }
        self.fits_partial(pattern, token)
    }

    /// [`Symbols::fits`] for distinct symbols: only a partial pattern (`uid=<*>`) can still fit.
    fn fits_partial(&self, pattern: Sym, token: Sym) -> bool {
        match self.partial[pattern as usize] {
            Some((prefix, suffix)) => {
                let pattern_text = self.bytes(pattern);
                let text = self.bytes(token);
                let (prefix, suffix) = (prefix as usize, suffix as usize);
                text.len() > prefix + suffix
                    && text[..prefix] == pattern_text[..prefix]
                    && text[text.len() - suffix..] == pattern_text[pattern_text.len() - suffix..]
            }
            None => false,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.spans.len()
    }

    /// A pattern whose variable is the value of a key (`name=<*>`, `state:<*>`): such a value is a
    /// named parameter, never a split candidate.
    fn is_keyed(&self, pattern: Sym) -> bool {
        match self.partial[pattern as usize] {
            Some((prefix, _)) => {
                prefix > 0 && matches!(self.bytes(pattern)[prefix as usize - 1], b'=' | b':')
            }
            None => false,
        }
    }

    /// Two forms of one parameter: a folded phrase (see `fold`: `<*> bytes`, `<<*> sec`,
    /// `<*> <*> <*>`) against a value or another phrase. Counts as a match when a line is compared
    /// with a template: a parameter's form must not decide which event a line is. (Other variable
    /// tokens, `<*>|<*>` or `uid=<*>`, are structure, compared as text.)
    #[inline]
    fn same_parameter(&self, pattern: Sym, token: Sym) -> bool {
        let phrase = |sym: Sym| self.has(sym, SymbolFlags::PHRASE);
        (phrase(pattern) && (token == WILD || phrase(token))) || (pattern == WILD && phrase(token))
    }

    /// The most specific pattern covering both tokens: a shared key or bracket stays literal
    /// (`user=root`, `user=guest` → `user=<*>`); otherwise `<*>`.
    fn generalize(&mut self, pattern: Sym, token: Sym) -> Sym {
        if pattern == WILD || token == WILD {
            return WILD;
        }
        let a = self.text(pattern).as_bytes();
        let b = self.text(token).as_bytes();
        let limit_a = find_wild(a).unwrap_or(a.len());
        let limit_b = find_wild(b).unwrap_or(b.len());
        let mut prefix = a
            .iter()
            .zip(b)
            .take(limit_a.min(limit_b))
            .take_while(|(x, y)| x == y)
            .count();
        // Cut the shared prefix back so that it ends with a delimiter.
        while prefix > 0 && !is_delimiter(a[prefix - 1]) {
            prefix -= 1;
        }
        let tail_a = rfind_wild(a).map_or(0, |at| at + WILDCARD.len());
        let tail_b = rfind_wild(b).map_or(0, |at| at + WILDCARD.len());
        let max_suffix = (a.len() - tail_a.max(prefix)).min(b.len() - tail_b.max(prefix));
        let mut suffix = a
            .iter()
            .rev()
            .zip(b.iter().rev())
            .take(max_suffix)
            .take_while(|(x, y)| x == y)
            .count();
        while suffix > 0 && !is_delimiter(a[a.len() - suffix]) {
            suffix -= 1;
        }
        if prefix == 0 && suffix == 0 {
            return WILD;
        }
        let mut text = String::with_capacity(prefix + suffix + 3);
        text.push_str(&self.text(pattern)[..prefix]);
        text.push_str(WILDCARD);
        let a_text = self.text(pattern);
        text.push_str(&a_text[a_text.len() - suffix..]);
        self.intern(&text)
    }
}

/// A token of at most 16 bytes packed into two words and its length: its first and last 8 bytes
/// (4 bytes, or first, middle and last byte, for shorter tokens), overlapping when shorter than 16.
/// The words and the length determine every byte, so equal keys are equal tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ShortKey {
    head: u64,
    tail: u64,
    length: u32,
}

impl ShortKey {
    /// `None` for tokens longer than 16 bytes.
    #[inline]
    pub(super) fn of(bytes: &[u8]) -> Option<ShortKey> {
        let length = bytes.len();
        let (head, tail) = match length {
            17.. => return None,
            8.. => (
                u64::from_le_bytes(bytes[..8].try_into().unwrap_or([0; 8])),
                u64::from_le_bytes(bytes[length - 8..].try_into().unwrap_or([0; 8])),
            ),
            4.. => (
                u64::from(u32::from_le_bytes(bytes[..4].try_into().unwrap_or([0; 4]))),
                u64::from(u32::from_le_bytes(
                    bytes[length - 4..].try_into().unwrap_or([0; 4]),
                )),
            ),
            1.. => (
                u64::from(bytes[0])
                    | u64::from(bytes[length / 2]) << 8
                    | u64::from(bytes[length - 1]) << 16,
                0,
            ),
            0 => (0, 0),
        };
        Some(ShortKey {
            head,
            tail,
            length: length as u32,
        })
    }
}

/// Direct-mapped cache from short raw tokens to what tokenizing made of them (symbol, type of the
/// first masked variable). Exact, not approximate: masking is a pure function of the token, and
/// symbols are append-only (a text keeps its symbol forever), so a remembered outcome is the
/// outcome. It saves the mask pre-check, the hash and the probe of the symbol table for the words
/// that make up most of every line.
struct WordCache {
    entries: Vec<(ShortKey, Sym, Option<ParamType>)>,
}

impl std::fmt::Debug for WordCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WordCache")
            .field("slots", &self.entries.len())
            .finish_non_exhaustive()
    }
}

impl WordCache {
    const SLOTS: usize = 4096;
    /// A key no token has (tokens are at most 16 bytes long here).
    const EMPTY: ShortKey = ShortKey {
        head: 0,
        tail: 0,
        length: u32::MAX,
    };

    fn new() -> Self {
        Self {
            entries: vec![(Self::EMPTY, WILD, None); Self::SLOTS],
        }
    }

    #[inline]
    fn slot(key: ShortKey) -> usize {
        let mixed = (key.head ^ key.tail.rotate_left(29) ^ u64::from(key.length))
            .wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (mixed >> 52) as usize & (Self::SLOTS - 1)
    }

    #[inline]
    fn get(&self, key: ShortKey) -> Option<(Sym, Option<ParamType>)> {
        let (known, sym, kind) = self.entries[Self::slot(key)];
        (known == key).then_some((sym, kind))
    }

    #[inline]
    fn put(&mut self, key: ShortKey, outcome: (Sym, Option<ParamType>)) {
        self.entries[Self::slot(key)] = (key, outcome.0, outcome.1);
    }
}

/// The miner's tokenized line as [`PhraseTokens`].
struct LineTokens<'a> {
    content: &'a str,
    spans: &'a [TokenSpan],
    line: &'a [Sym],
    symbols: &'a Symbols,
}

impl PhraseTokens for LineTokens<'_> {
    fn count(&self) -> usize {
        self.line.len()
    }
    fn raw(&self, index: usize) -> &str {
        let span = self.spans[index];
        &self.content[span.start as usize..span.end as usize]
    }
    fn is_whole_value(&self, index: usize) -> bool {
        self.line[index] == WILD
    }
    fn ends_in_value(&self, index: usize) -> bool {
        self.symbols
            .has(self.line[index], SymbolFlags::ENDS_IN_VALUE)
    }
    fn is_apart_unit(&self, index: usize) -> bool {
        let sym = self.line[index];
        if self.symbols.is_variable(sym) {
            is_apart_unit(self.raw(index))
        } else {
            self.symbols.has(sym, SymbolFlags::APART_UNIT)
        }
    }
}

/// The masked tokens of a line whose parameters are read, as [`PhraseTokens`]: the same folding
/// decisions as when the line was mined, without interning.
struct MaskedTokens<'a> {
    content: &'a str,
    spans: &'a [TokenSpan],
    /// Per token: masked to exactly `<*>`, masked text ends in `<*>`.
    roles: Vec<(bool, bool)>,
}

impl PhraseTokens for MaskedTokens<'_> {
    fn count(&self) -> usize {
        self.spans.len()
    }
    fn raw(&self, index: usize) -> &str {
        let span = self.spans[index];
        &self.content[span.start as usize..span.end as usize]
    }
    fn is_whole_value(&self, index: usize) -> bool {
        self.roles[index].0
    }
    fn ends_in_value(&self, index: usize) -> bool {
        self.roles[index].1
    }
}

/// The spans of `content` as the miner folds them (see `fold`).
fn folded_spans(content: &str, max_tokens: usize) -> Vec<TokenSpan> {
    let mut spans = Vec::new();
    split_tokens(content, max_tokens, &mut spans);
    let mut buffer = String::new();
    let roles = spans
        .iter()
        .map(|span| {
            if span.date {
                return (true, true);
            }
            let token = &content[span.start as usize..span.end as usize];
            if !needs_mask_shaped(token.as_bytes(), span.shape) {
                return (false, false);
            }
            mask_token_shaped(token, span.shape, &mut buffer);
            (buffer == WILDCARD, buffer.ends_with(WILDCARD))
        })
        .collect();
    let tokens = MaskedTokens {
        content,
        spans: &spans,
        roles,
    };
    let mut folded = Vec::with_capacity(spans.len());
    let mut index = 0;
    while index < spans.len() {
        let end = phrase_end(&tokens, index);
        folded.push(TokenSpan {
            start: spans[index].start,
            end: spans[end - 1].end,
            shape: spans[index..end]
                .iter()
                .fold(0, |shape, span| shape | span.shape),
            date: end == index + 1 && spans[index].date,
        });
        index = end;
    }
    folded
}

/// A template as read back from the store.
pub(crate) struct RestoredCluster<'a> {
    pub(crate) id: &'a str,
    pub(crate) template: &'a str,
    /// The template's tokens when one of them is a folded phrase (else the template's words).
    pub(crate) tokens: Option<&'a [String]>,
    pub(crate) count: u64,
    pub(crate) first_seen: Option<i64>,
    pub(crate) last_seen: Option<i64>,
    pub(crate) param_types: Vec<Option<ParamType>>,
    pub(crate) merged_into: Option<u32>,
    pub(crate) split_from: Option<SplitFrom>,
    pub(crate) samples: Vec<ValueSample>,
}

/// Where a split-out template came from: its parent cluster and the position it pins to a word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SplitFrom {
    pub(crate) parent: u32,
    pub(crate) position: u32,
}

/// The constant words seen at one variable position of a template, with their line counts: the
/// evidence for splitting. At most [`MinerConfig::MAX_SPLIT_VALUES`] distinct words, inline (no
/// allocation per sample); a position whose words overflow that, or that sees a masked variable
/// (number, hex, id, path, …), is no split candidate and its sample is dropped for good (tracking
/// starts only when a constant position generalizes, which happens once per position).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ValueSample {
    pub(crate) position: u32,
    len: u8,
    values: [(Sym, u32); MinerConfig::MAX_SPLIT_VALUES],
}

impl ValueSample {
    pub(crate) fn new(position: u32) -> Self {
        Self {
            position,
            len: 0,
            values: [(WILD, 0); MinerConfig::MAX_SPLIT_VALUES],
        }
    }

    /// The distinct words and their line counts, in order of first sight.
    pub(crate) fn values(&self) -> &[(Sym, u32)] {
        &self.values[..self.len as usize]
    }

    /// Counts `lines` more lines with `value`; `false` when that makes more than `max_values`
    /// distinct words (the caller drops the sample).
    #[inline]
    pub(crate) fn add(&mut self, value: Sym, lines: u32, max_values: usize) -> bool {
        let len = self.len as usize;
        for slot in &mut self.values[..len] {
            if slot.0 == value {
                slot.1 = slot.1.saturating_add(lines);
                return true;
            }
        }
        if len >= max_values.min(MinerConfig::MAX_SPLIT_VALUES) {
            return false;
        }
        self.values[len] = (value, lines);
        self.len += 1;
        true
    }

    fn total(&self) -> u64 {
        self.values()
            .iter()
            .map(|&(_, count)| u64::from(count))
            .sum()
    }
}

/// At most this many positions of one template are tracked at a time (with the per-position
/// value cap, the memory bound of the split evidence: under 1 KiB per template). A template whose
/// positions keep generalizing is no split candidate anyway.
pub(crate) const MAX_TRACKED_POSITIONS: usize = 8;

/// Outcome of [`Miner::compact`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Compaction {
    /// Clusters merged into a template that covers them.
    pub merged: usize,
    /// Templates split out of an over-general one: (parent, child), the child new or revived.
    pub split: Vec<(ClusterRef, ClusterRef)>,
}

/// One mined template and its statistics.
#[derive(Debug, Clone)]
pub(crate) struct Cluster {
    pub(crate) id: String,
    pub(crate) tokens: Vec<Sym>,
    pub(crate) count: u64,
    pub(crate) first_seen: Option<i64>,
    pub(crate) last_seen: Option<i64>,
    /// Type of the parameter at each position (None where the template is constant).
    pub(crate) param_types: Vec<Option<ParamType>>,
    /// Set when this cluster was merged into another; its id lives on as an alias.
    pub(crate) merged_into: Option<u32>,
    /// Set on a template split out of an over-general one.
    pub(crate) split_from: Option<SplitFrom>,
    /// Split evidence for positions that generalized from a constant (at most
    /// [`MAX_TRACKED_POSITIONS`]).
    pub(crate) samples: Vec<ValueSample>,
}

#[derive(Debug, Default)]
struct Node {
    children: FxHashMap<Sym, Node>,
    clusters: Vec<u32>,
}

/// The result of mining one line: the cluster it joined and where its parameters are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClusterRef(pub(crate) u32);

/// The Drain-family miner. Not thread-safe by design: the stage owns one and runs on a blocking
/// thread; `mine_lines` builds its own.
#[derive(Debug)]
pub struct Miner {
    config: MinerConfig,
    pub(crate) symbols: Symbols,
    pub(crate) clusters: Vec<Cluster>,
    roots: FxHashMap<usize, Node>,
    /// Ids in use (live and merged), to keep ids unique on hash collision.
    ids: FxHashMap<String, u32>,
    /// Split-out children of each parent cluster, in order of creation.
    split_children: FxHashMap<u32, Vec<u32>>,
    // Scratch buffers reused across lines: no allocation per token on the hot path.
    line: Vec<Sym>,
    line_kinds: Vec<Option<ParamType>>,
    mask_buffer: String,
    /// Scratch for the text of a folded phrase.
    phrase_buffer: String,
    word_cache: WordCache,
    spans: Vec<TokenSpan>,
    lines_since_compact: u64,
}

impl Miner {
    pub fn new(config: MinerConfig) -> Self {
        Self {
            config,
            symbols: Symbols::new(),
            clusters: Vec::new(),
            roots: FxHashMap::default(),
            ids: FxHashMap::default(),
            split_children: FxHashMap::default(),
            line: Vec::new(),
            line_kinds: Vec::new(),
            mask_buffer: String::new(),
            phrase_buffer: String::new(),
            word_cache: WordCache::new(),
            spans: Vec::new(),
            lines_since_compact: 0,
        }
    }

    pub fn config(&self) -> &MinerConfig {
        &self.config
    }

    /// Masks and interns the tokens of `content` into `self.line`.
    fn tokenize(&mut self, content: &str) {
        self.line.clear();
        self.line_kinds.clear();
        let mut spans = std::mem::take(&mut self.spans);
        split_tokens(content, self.config.max_tokens, &mut spans);
        // A phrase can start only at a token that ends in a value and is not the line's last.
        let mut may_fold = false;
        for span in &spans {
            let (sym, kind) = if span.date {
                (WILD, Some(ParamType::Time))
            } else {
                let token = &content[span.start as usize..span.end as usize];
                // Short digit-free tokens (words, keys, `[preauth]`) recur line after line: the
                // cache remembers what each became. Tokens with digits are mostly unique values,
                // which would only evict the words.
                let key = if span.shape & class::DIGIT == 0 {
                    ShortKey::of(token.as_bytes())
                } else {
                    None
                };
                match key.and_then(|key| self.word_cache.get(key)) {
                    Some(known) => known,
                    None => {
                        let outcome = self.mask_and_intern(token, span.shape);
                        if let Some(key) = key {
                            self.word_cache.put(key, outcome);
                        }
                        outcome
                    }
                }
            };
            may_fold |= self.line.len() + 1 < spans.len()
                && self.symbols.has(sym, SymbolFlags::ENDS_IN_VALUE);
            self.line.push(sym);
            self.line_kinds.push(kind);
        }
        self.spans = spans;
        if may_fold {
            self.fold_phrases(content);
        }
    }

    /// Folds the variable phrases of the tokenized line (see `fold`) into one token each: the
    /// masked texts joined by one space, the type of the first variable, one span.
    fn fold_phrases(&mut self, content: &str) {
        let count = self.line.len();
        let phrase_end_at = |miner: &Self, index: usize| {
            phrase_end(
                &LineTokens {
                    content,
                    spans: &miner.spans,
                    line: &miner.line,
                    symbols: &miner.symbols,
                },
                index,
            )
        };
        // Tokens before the first phrase stay where they are; most lines hold no phrase at all.
        let Some(first) = (0..count).find(|&index| phrase_end_at(self, index) > index + 1) else {
            return;
        };
        let mut written = first;
        let mut index = first;
        let mut text = std::mem::take(&mut self.phrase_buffer);
        while index < count {
            let end = phrase_end_at(self, index);
            if end > index + 1 {
                text.clear();
                for (position, &sym) in self.line[index..end].iter().enumerate() {
                    if position > 0 {
                        text.push(' ');
                    }
                    text.push_str(self.symbols.text(sym));
                }
                let kind = self.line_kinds[index..end].iter().find_map(|&kind| kind);
                let span = TokenSpan {
                    start: self.spans[index].start,
                    end: self.spans[end - 1].end,
                    shape: self.spans[index..end]
                        .iter()
                        .fold(0, |shape, span| shape | span.shape),
                    date: false,
                };
                self.line[written] = self.symbols.intern(&text);
                self.line_kinds[written] = kind;
                self.spans[written] = span;
            } else {
                self.line[written] = self.line[index];
                self.line_kinds[written] = self.line_kinds[index];
                self.spans[written] = self.spans[index];
            }
            written += 1;
            index = end;
        }
        self.phrase_buffer = text;
        self.line.truncate(written);
        self.line_kinds.truncate(written);
        self.spans.truncate(written);
    }

    /// The symbol of one whitespace token after masking, and the type of its first variable.
    fn mask_and_intern(&mut self, token: &str, shape: u8) -> (Sym, Option<ParamType>) {
        if !needs_mask_shaped(token.as_bytes(), shape) {
            return (self.symbols.intern(token), None);
        }
        let kind = mask_token_shaped(token, shape, &mut self.mask_buffer);
        let sym = if self.mask_buffer == WILDCARD {
            WILD
        } else {
            self.symbols.intern(&self.mask_buffer)
        };
        (sym, kind)
    }

    #[inline]
    fn tree_key(&self, sym: Sym) -> Sym {
        if self.symbols.is_keyless(sym) {
            WILD
        } else {
            sym
        }
    }

    /// Mines one message (the content part of a log line, headers already split off).
    pub fn add(&mut self, content: &str, ts: Option<i64>) -> ClusterRef {
        self.tokenize(content);
        let index = match self.search() {
            Some(index) => {
                self.update(index);
                index
            }
            None => self.create(),
        };
        let cluster = &mut self.clusters[index as usize];
        cluster.count += 1;
        if let Some(ts) = ts {
            cluster.first_seen = Some(cluster.first_seen.map_or(ts, |seen| seen.min(ts)));
            cluster.last_seen = Some(cluster.last_seen.map_or(ts, |seen| seen.max(ts)));
        }
        self.lines_since_compact += 1;
        ClusterRef(index)
    }

    /// The leaf whose clusters `self.line` may join, without creating nodes.
    fn leaf(&self) -> Option<&Node> {
        let mut node = self.roots.get(&self.line.len())?;
        for &sym in self.line.iter().take(self.config.tree_depth) {
            let key = self.tree_key(sym);
            node = match node.children.get(&key) {
                Some(child) => child,
                None => node.children.get(&WILD)?,
            };
        }
        Some(node)
    }

    /// Drain's fast match: the most similar cluster of the leaf, if similar enough.
    fn search(&self) -> Option<u32> {
        let leaf = self.leaf()?;
        let length = self.line.len();
        let mut best: Option<(u32, usize, usize)> = None; // (cluster, equal, params)
        for &index in &leaf.clusters {
            let cluster = &self.clusters[index as usize];
            debug_assert_eq!(cluster.tokens.len(), length);
            // A split-out template takes only lines with its word: generalizing that position
            // would undo the split.
            if let Some(split) = cluster.split_from
                && !self.pinned_fits(cluster, split)
            {
                continue;
            }
            let mut equal = 0;
            let mut params = 0;
            for (&pattern, &token) in cluster.tokens.iter().zip(&self.line) {
                if pattern == WILD {
                    params += 1;
                    if self.symbols.is_variable(token) {
                        equal += 1;
                    }
                } else if self.symbols.fits(pattern, token)
                    || self.symbols.same_parameter(pattern, token)
                {
                    equal += 1;
                }
            }
            if equal == length {
                return Some(index);
            }
            let better = match best {
                None => true,
                Some((_, best_equal, best_params)) => {
                    equal > best_equal || (equal == best_equal && params > best_params)
                }
            };
            if better {
                best = Some((index, equal, params));
            }
        }
        let (index, equal, _) = best?;
        let similarity = if length == 0 {
            1.0
        } else {
            equal as f64 / length as f64
        };
        (similarity >= self.config.similarity_threshold).then_some(index)
    }

    /// Does the current line hold the split-out template's word at its pinned position?
    #[inline]
    fn pinned_fits(&self, cluster: &Cluster, split: SplitFrom) -> bool {
        let position = split.position as usize;
        match (cluster.tokens.get(position), self.line.get(position)) {
            (Some(&pattern), Some(&token)) => self.symbols.fits(pattern, token),
            _ => false,
        }
    }

    /// Generalizes the cluster's template where the current line differs, and records the line's
    /// words at the tracked positions.
    fn update(&mut self, index: u32) {
        // Disjoint borrows of the fields: the template is edited in place while symbols may be
        // created for generalized tokens.
        let cluster = &mut self.clusters[index as usize];
        let symbols = &mut self.symbols;
        let max_values = self.config.split_max_values;
        let lines_before = u32::try_from(cluster.count).unwrap_or(u32::MAX);
        debug_assert_eq!(cluster.tokens.len(), self.line.len());
        debug_assert_eq!(cluster.param_types.len(), self.line.len());
        let positions = cluster
            .tokens
            .iter_mut()
            .zip(&mut cluster.param_types)
            .zip(self.line.iter().zip(&self.line_kinds));
        for (position, ((pattern, slot), (&token, &line_kind))) in positions.enumerate() {
            if !symbols.fits(*pattern, token) {
                let constant = *pattern;
                *pattern = symbols.generalize(constant, token);
                // A constant just became a variable: every earlier line had that constant, so the
                // position's sample starts exact. Masked variables never start one.
                if max_values >= 2
                    && !symbols.is_variable(constant)
                    && !symbols.is_keyed(*pattern)
                    && cluster.samples.len() < MAX_TRACKED_POSITIONS
                {
                    let mut sample = ValueSample::new(position as u32);
                    sample.add(constant, lines_before, max_values);
                    cluster.samples.push(sample);
                }
            }
            let kind = if *pattern == WILD || symbols.is_variable(*pattern) {
                Some(line_kind.unwrap_or(ParamType::Word))
            } else {
                None
            };
            *slot = match (*slot, kind) {
                (Some(a), Some(b)) => Some(a.widen(b)),
                (None, kind) => kind,
                (a, None) => a,
            };
        }
        if !cluster.samples.is_empty() {
            record_values(&mut cluster.samples, &self.line, symbols, max_values);
        }
    }

    fn create(&mut self) -> u32 {
        let index = self.clusters.len() as u32;
        let tokens = self.line.clone();
        let param_types = tokens
            .iter()
            .zip(&self.line_kinds)
            .map(|(&sym, kind)| {
                self.symbols
                    .is_variable(sym)
                    .then(|| kind.unwrap_or(ParamType::Id))
            })
            .collect();
        let text = self.render(&tokens);
        let id = self.unique_id(&text, index);
        self.clusters.push(Cluster {
            id,
            tokens,
            count: 0,
            first_seen: None,
            last_seen: None,
            param_types,
            merged_into: None,
            split_from: None,
            samples: Vec::new(),
        });
        self.insert_into_tree(index);
        index
    }

    /// A new id for `text`: its hash, rehashed with a counter in the (astronomically rare) case
    /// that another template already owns it.
    fn unique_id(&mut self, text: &str, index: u32) -> String {
        let mut salt = 0u32;
        loop {
            let hash = if salt == 0 {
                template_hash(text)
            } else {
                template_hash(&format!("{text}\u{0}{salt}"))
            };
            let id = format!("{hash:016x}");
            if !self.ids.contains_key(&id) {
                self.ids.insert(id.clone(), index);
                return id;
            }
            salt += 1;
        }
    }

    fn insert_into_tree(&mut self, index: u32) {
        let tokens = &self.clusters[index as usize].tokens;
        let max_children = self.config.max_children;
        let depth = self.config.tree_depth;
        let mut node = self.roots.entry(tokens.len()).or_default();
        for &sym in tokens.iter().take(depth) {
            let mut key = if self.symbols.is_keyless(sym) {
                WILD
            } else {
                sym
            };
            if !node.children.contains_key(&key) && node.children.len() >= max_children {
                key = WILD;
            }
            node = node.children.entry(key).or_default();
        }
        node.clusters.push(index);
    }

    /// The template that a line mined into `cluster` belongs to now: merges followed, and where
    /// the template was split after the line was mined, the split-out child whose word the line
    /// holds. `mine_lines` reports every line this way, after its final compaction.
    pub fn resolve_line(&mut self, cluster: ClusterRef, content: &str) -> ClusterRef {
        if self.split_children.is_empty() {
            return self.resolve(cluster);
        }
        let mut index = cluster.0;
        let mut tokenized = false;
        // Bounded (a corrupt store could hold a cycle): each step goes down a split level or
        // along a merge.
        for _ in 0..2 * self.clusters.len() + 1 {
            if self.split_children.contains_key(&index) {
                if !tokenized {
                    self.tokenize(content);
                    tokenized = true;
                }
                let child = self.split_children[&index].iter().copied().find(|&child| {
                    let cluster = &self.clusters[child as usize];
                    cluster.tokens.len() == self.line.len()
                        && cluster
                            .split_from
                            .is_some_and(|split| self.pinned_fits(cluster, split))
                });
                if let Some(child) = child {
                    index = child;
                    continue;
                }
            }
            match self.clusters[index as usize].merged_into {
                Some(next) => index = next,
                None => return ClusterRef(index),
            }
        }
        self.resolve(ClusterRef(index))
    }

    /// Follows merges to the live cluster.
    pub fn resolve(&self, cluster: ClusterRef) -> ClusterRef {
        let mut index = cluster.0;
        while let Some(next) = self.clusters[index as usize].merged_into {
            index = next;
        }
        ClusterRef(index)
    }

    pub fn template_text(&self, cluster: ClusterRef) -> String {
        let cluster = self.resolve(cluster);
        self.render(&self.clusters[cluster.0 as usize].tokens)
    }

    pub fn template_id(&self, cluster: ClusterRef) -> &str {
        let cluster = self.resolve(cluster);
        &self.clusters[cluster.0 as usize].id
    }

    /// The template text. Variables glued together are written as one `<*>` (`<*>.<*>`,
    /// `<*><*>`), as in the corrected Loghub ground truth (Khan et al., ICSE'22, rules CV and DV).
    pub(crate) fn render(&self, tokens: &[Sym]) -> String {
        let mut text = String::new();
        for (position, &sym) in tokens.iter().enumerate() {
            if position > 0 {
                text.push(' ');
            }
            text.push_str(self.symbols.text(sym));
        }
        if text.contains("<*>.<*>") || text.contains("<*><*>") {
            loop {
                let collapsed = text
                    .replace("<*>.<*>", WILDCARD)
                    .replace("<*><*>", WILDCARD);
                if collapsed == text {
                    break;
                }
                text = collapsed;
            }
        }
        text
    }

    /// Parameters of `content` under the template of `cluster`: the original text at every
    /// template position that holds `<*>` (the whole token, or its variable middle for a partial
    /// pattern such as `uid=<*>`), with its type.
    pub fn params(&self, cluster: ClusterRef, content: &str) -> Vec<(String, ParamType)> {
        let cluster = &self.clusters[self.resolve(cluster).0 as usize];
        let mut params = Vec::new();
        let spans = folded_spans(content, self.config.max_tokens);
        let mut tokens = spans
            .iter()
            .map(|span| &content[span.start as usize..span.end as usize]);
        for (position, &sym) in cluster.tokens.iter().enumerate() {
            let Some(token) = tokens.next() else { break };
            // A folded phrase (`1024 bytes (1.0 KB)`) holds spaces: its type is the template's.
            let folded = token.contains(char::is_whitespace);
            if sym == WILD {
                let kind = match cluster.param_types[position] {
                    Some(kind) if folded => kind,
                    _ => param_type(token),
                };
                params.push((token.to_string(), kind));
            } else if self.symbols.is_variable(sym) {
                let value = match self.symbols.partial[sym as usize] {
                    Some((prefix, suffix))
                        if token.len() >= (prefix + suffix) as usize
                            && token.is_char_boundary(prefix as usize)
                            && token.is_char_boundary(token.len() - suffix as usize) =>
                    {
                        &token[prefix as usize..token.len() - suffix as usize]
                    }
                    _ => token,
                };
                let value = value.trim();
                let kind = cluster.param_types[position].unwrap_or_else(|| param_type(value));
                params.push((value.to_string(), kind));
            }
        }
        params
    }

    /// Merges clusters whose templates became identical, or where one template covers the other,
    /// then splits over-general templates (see the module documentation). Both keep every id
    /// valid: a merged id resolves to its absorber, a split parent keeps its id.
    pub fn compact(&mut self) -> Compaction {
        self.lines_since_compact = 0;
        let merged = self.merge_covered();
        let split = self.split_over_general();
        if merged > 0 || !split.is_empty() {
            self.rebuild_tree();
        }
        Compaction { merged, split }
    }

    /// Merges clusters where one template covers the other (same length, equal constants, the
    /// other's tokens fitting its `<*>` positions): Drain's tree never compares clusters of
    /// different leaves, so lines whose leading token was an unmasked variable would otherwise
    /// stay apart forever. A split-out template is never absorbed (that would undo its split);
    /// a cluster covered by a split parent goes to the parent's child that covers it, if any.
    /// Returns how many clusters were merged.
    fn merge_covered(&mut self) -> usize {
        let mut by_length: FxHashMap<usize, Vec<u32>> = FxHashMap::default();
        for (index, cluster) in self.clusters.iter().enumerate() {
            if cluster.merged_into.is_none() {
                by_length
                    .entry(cluster.tokens.len())
                    .or_default()
                    .push(index as u32);
            }
        }
        let mut merged = 0;
        let mut lengths: Vec<usize> = by_length.keys().copied().collect();
        lengths.sort_unstable();
        for length in lengths {
            let members = &by_length[&length];
            // Most general first: a cluster can only absorb clusters it covers.
            let mut order = members.clone();
            order.sort_by_key(|&index| {
                let cluster = &self.clusters[index as usize];
                let wild = cluster
                    .tokens
                    .iter()
                    .filter(|&&sym| self.symbols.is_variable(sym))
                    .count();
                (std::cmp::Reverse(wild), index)
            });
            for (position, &general) in order.iter().enumerate() {
                if self.clusters[general as usize].merged_into.is_some() {
                    continue;
                }
                for &specific in &order[position + 1..] {
                    let candidate = &self.clusters[specific as usize];
                    if candidate.merged_into.is_some() || candidate.split_from.is_some() {
                        continue;
                    }
                    if self.covers(general, specific) {
                        let into = self.absorber(general, specific);
                        self.absorb(into, specific);
                        merged += 1;
                    }
                }
            }
        }
        merged
    }

    /// Where `specific`, covered by `general`, should go: the most specific live split-out child
    /// of `general` that also covers it (its lines hold the child's word), else `general`.
    fn absorber(&self, general: u32, specific: u32) -> u32 {
        let mut into = general;
        // Bounded walk: each step goes one split level deeper.
        for _ in 0..self.clusters.len() {
            let next = self.split_children.get(&into).and_then(|children| {
                children.iter().copied().find(|&child| {
                    child != specific
                        && self.clusters[child as usize].merged_into.is_none()
                        && self.covers(child, specific)
                })
            });
            match next {
                Some(child) => into = child,
                None => break,
            }
        }
        into
    }

    /// Splits every live template that has a position whose sample qualifies (one position per
    /// template and compaction: the sample of a second position says nothing about each child's
    /// lines, so children start fresh samples and may split again at a later compaction).
    fn split_over_general(&mut self) -> Vec<(ClusterRef, ClusterRef)> {
        let mut split = Vec::new();
        if self.config.split_max_values < 2 {
            return split;
        }
        let existing = self.clusters.len() as u32;
        for parent in 0..existing {
            let cluster = &self.clusters[parent as usize];
            if cluster.merged_into.is_some() || cluster.samples.is_empty() {
                continue;
            }
            let Some(at) = self.split_candidate(parent) else {
                continue;
            };
            // The parent stays, with its id, for words not seen yet at this position. Its lines
            // moved to the children, so its evidence starts over at every tracked position.
            let samples = &mut self.clusters[parent as usize].samples;
            let sample = samples[at].clone();
            for sample in samples.iter_mut() {
                *sample = ValueSample::new(sample.position);
            }
            for &(value, count) in sample.values() {
                let child = self.split_out(parent, sample.position, value, count);
                split.push((ClusterRef(parent), ClusterRef(child)));
            }
        }
        split
    }

    /// The index of the sample of `parent` to split at, if any qualifies: at most
    /// `split_max_values` distinct words (two at least, or one at a position already split
    /// before), `split_min_lines` lines, every word with at least `split_min_share` of them, and
    /// not all of them units after a variable (`384.0 B`), nor any of them shaped like a parameter
    /// (a digit in it: `eth0`/`eth1`, `dn228`, `r2` are values of an open set that happens to be
    /// small here, never event words). The position with the fewest words wins (then the first).
    fn split_candidate(&self, parent: u32) -> Option<usize> {
        let config = &self.config;
        let children = self.split_children.get(&parent);
        let split_before = |position: u32| {
            children.is_some_and(|children| {
                children.iter().any(|&child| {
                    self.clusters[child as usize]
                        .split_from
                        .is_some_and(|split| split.position == position)
                })
            })
        };
        self.clusters[parent as usize]
            .samples
            .iter()
            .enumerate()
            .filter(|(_, sample)| {
                let values = sample.values();
                let tokens = &self.clusters[parent as usize].tokens;
                let position = sample.position as usize;
                let in_template = position < tokens.len();
                // Units written apart from their number belong to the quantity.
                let after_variable = position > 0
                    && tokens
                        .get(position - 1)
                        .is_some_and(|&sym| self.symbols.is_variable(sym));
                let units = after_variable
                    && values
                        .iter()
                        .all(|&(value, _)| is_unit_word(self.symbols.text(value)));
                let parameter_like = values
                    .iter()
                    .any(|&(value, _)| self.symbols.bytes(value).iter().any(u8::is_ascii_digit));
                let total = sample.total();
                let enough_values =
                    values.len() >= 2 || (values.len() == 1 && split_before(sample.position));
                in_template
                    && !units
                    && !parameter_like
                    && enough_values
                    && values.len() <= config.split_max_values
                    && total >= config.split_min_lines
                    && values
                        .iter()
                        .all(|&(_, count)| count as f64 >= config.split_min_share * total as f64)
            })
            .min_by_key(|(_, sample)| (sample.len, sample.position))
            .map(|(at, _)| at)
    }

    /// Moves the `lines` lines of `parent` with `value` at `position` to a child template with
    /// the word in place of `<*>`: an existing child for the word, else the merged cluster that
    /// owns the child's text (revived with its old id), else a new cluster. Merged clusters that
    /// resolve to `parent` and hold the word there now resolve to the child.
    fn split_out(&mut self, parent: u32, position: u32, value: Sym, lines: u32) -> u32 {
        let at = position as usize;
        let source = &self.clusters[parent as usize];
        debug_assert!(
            at < source.tokens.len(),
            "split_candidate checks the position"
        );
        let mut tokens = source.tokens.clone();
        tokens[at] = value;
        let mut param_types = source.param_types.clone();
        param_types[at] = None;
        let samples: Vec<ValueSample> = source
            .samples
            .iter()
            .filter(|sample| sample.position != position)
            .map(|sample| ValueSample::new(sample.position))
            .collect();
        let (first_seen, last_seen) = (source.first_seen, source.last_seen);
        let parent_cluster = &mut self.clusters[parent as usize];
        parent_cluster.count = parent_cluster.count.saturating_sub(u64::from(lines));
        let existing = self.split_children.get(&parent).and_then(|children| {
            children.iter().copied().find(|&child| {
                let cluster = &self.clusters[child as usize];
                cluster
                    .split_from
                    .is_some_and(|split| split.position == position)
                    && cluster.tokens.get(at) == Some(&value)
            })
        });
        if let Some(child) = existing {
            let child = self.resolve(ClusterRef(child)).0;
            self.clusters[child as usize].count += u64::from(lines);
            return child;
        }
        let text = self.render(&tokens);
        let owner = self
            .ids
            .get(&format!("{:016x}", template_hash(&text)))
            .copied()
            .filter(|&owner| {
                let cluster = &self.clusters[owner as usize];
                cluster.merged_into.is_some()
                    && cluster.tokens == tokens
                    && self.resolve(ClusterRef(owner)).0 == parent
            });
        let child = match owner {
            Some(owner) => owner,
            None => {
                let index = self.clusters.len() as u32;
                let id = self.unique_id(&text, index);
                self.clusters.push(Cluster {
                    id,
                    tokens: Vec::new(),
                    count: 0,
                    first_seen: None,
                    last_seen: None,
                    param_types: Vec::new(),
                    merged_into: None,
                    split_from: None,
                    samples: Vec::new(),
                });
                index
            }
        };
        // Per-word timestamps are not kept: the parent's span bounds the child's.
        let cluster = &mut self.clusters[child as usize];
        cluster.tokens = tokens;
        cluster.count = u64::from(lines);
        cluster.first_seen = first_seen;
        cluster.last_seen = last_seen;
        cluster.param_types = param_types;
        cluster.merged_into = None;
        cluster.split_from = Some(SplitFrom { parent, position });
        cluster.samples = samples;
        self.split_children.entry(parent).or_default().push(child);
        for index in 0..self.clusters.len() as u32 {
            let cluster = &self.clusters[index as usize];
            if index != child
                && cluster.merged_into.is_some()
                && cluster.tokens.get(at) == Some(&value)
                && self.resolve(ClusterRef(index)).0 == parent
            {
                self.clusters[index as usize].merged_into = Some(child);
            }
        }
        child
    }

    fn covers(&self, general: u32, specific: u32) -> bool {
        let general = &self.clusters[general as usize].tokens;
        let specific = &self.clusters[specific as usize].tokens;
        general
            .iter()
            .zip(specific)
            .all(|(&pattern, &token)| pattern == WILD || self.symbols.fits(pattern, token))
    }

    fn absorb(&mut self, into: u32, from: u32) {
        let source = self.clusters[from as usize].clone();
        let target = &mut self.clusters[into as usize];
        target.count += source.count;
        target.first_seen = match (target.first_seen, source.first_seen) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        target.last_seen = match (target.last_seen, source.last_seen) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        for (slot, other) in target.param_types.iter_mut().zip(&source.param_types) {
            *slot = match (*slot, *other) {
                (Some(a), Some(b)) => Some(a.widen(b)),
                (Some(a), None) => Some(a),
                (None, _) => None,
            };
        }
        // Split evidence: the absorbed lines' words at the positions the target tracks (a
        // constant there is one word for all of them; an untracked variable ends the sample).
        let max_values = self.config.split_max_values;
        let source_lines = u32::try_from(source.count).unwrap_or(u32::MAX);
        let symbols = &self.symbols;
        target.samples.retain_mut(|sample| {
            let Some(&token) = source.tokens.get(sample.position as usize) else {
                return false;
            };
            if !symbols.is_variable(token) {
                return sample.add(token, source_lines, max_values);
            }
            match source
                .samples
                .iter()
                .find(|theirs| theirs.position == sample.position)
            {
                Some(theirs) => theirs
                    .values()
                    .iter()
                    .all(|&(value, count)| sample.add(value, count, max_values)),
                None => false,
            }
        });
        // The general template survives with its id; the absorbed id stays known as an alias.
        self.clusters[from as usize].merged_into = Some(into);
    }

    fn rebuild_tree(&mut self) {
        self.roots.clear();
        for index in 0..self.clusters.len() as u32 {
            if self.clusters[index as usize].merged_into.is_none() {
                self.insert_into_tree(index);
            }
        }
    }

    /// Lines mined since the last [`Miner::compact`].
    pub fn lines_since_compact(&self) -> u64 {
        self.lines_since_compact
    }

    /// Restores a template from the store (ids, counts and texts exactly as saved).
    pub(crate) fn restore(&mut self, saved: RestoredCluster<'_>) -> u32 {
        let index = self.clusters.len() as u32;
        // A folded phrase is one token with spaces in it: the store lists such templates' tokens.
        let tokens: Vec<Sym> = match saved.tokens {
            Some(tokens) => tokens
                .iter()
                .map(|token| self.symbols.intern(token))
                .collect(),
            None => saved
                .template
                .split_ascii_whitespace()
                .map(|token| self.symbols.intern(token))
                .collect(),
        };
        let mut param_types = saved.param_types;
        param_types.resize(tokens.len(), None);
        self.ids.insert(saved.id.to_string(), index);
        self.clusters.push(Cluster {
            id: saved.id.to_string(),
            tokens,
            count: saved.count,
            first_seen: saved.first_seen,
            last_seen: saved.last_seen,
            param_types,
            merged_into: saved.merged_into,
            split_from: saved.split_from,
            samples: saved.samples,
        });
        if let Some(split) = saved.split_from {
            self.split_children
                .entry(split.parent)
                .or_default()
                .push(index);
        }
        if saved.merged_into.is_none() {
            self.insert_into_tree(index);
        }
        index
    }

    /// The tokens of a template when one of them is a folded phrase (holds a space), for the
    /// store: its text alone would split such a token into several.
    pub(crate) fn phrase_tokens(&self, cluster: &Cluster) -> Option<Vec<String>> {
        cluster
            .tokens
            .iter()
            .any(|&sym| self.symbols.text(sym).contains(' '))
            .then(|| {
                cluster
                    .tokens
                    .iter()
                    .map(|&sym| self.symbols.text(sym).to_string())
                    .collect()
            })
    }

    pub fn live_clusters(&self) -> usize {
        self.clusters
            .iter()
            .filter(|cluster| cluster.merged_into.is_none())
            .count()
    }

    pub fn symbol_count(&self) -> usize {
        self.symbols.len()
    }
}

/// Records the line's word at every tracked position of a template; a sample that sees a masked
/// variable or more than `max_values` distinct words is dropped.
#[inline]
fn record_values(
    samples: &mut Vec<ValueSample>,
    line: &[Sym],
    symbols: &Symbols,
    max_values: usize,
) {
    let mut at = 0;
    while at < samples.len() {
        let sample = &mut samples[at];
        let keep = match line.get(sample.position as usize) {
            Some(&token) => !symbols.is_variable(token) && sample.add(token, 1, max_values),
            None => false,
        };
        if keep {
            at += 1;
        } else {
            samples.swap_remove(at);
        }
    }
}

/// Part of a written-out date: weekday or month name, day or year number, `hh:mm:ss`.
fn date_part(token: &str) -> Option<DatePart> {
    let bytes = token.as_bytes();
    let day_or_year = (1..=4).contains(&bytes.len()) && bytes.iter().all(u8::is_ascii_digit);
    if is_month(bytes) {
        Some(DatePart::Month)
    } else if is_weekday(bytes) || day_or_year {
        Some(DatePart::Other)
    } else if is_clock(bytes) {
        Some(DatePart::Clock)
    } else {
        None
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum DatePart {
    Month,
    Clock,
    Other,
}

/// One token of a message: its byte range, its shape (the OR of its bytes' [`class`] bits, so
/// masking knows whether it holds a digit without another pass), and whether it is a folded
/// written-out date.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TokenSpan {
    pub(crate) start: u32,
    pub(crate) end: u32,
    pub(crate) shape: u8,
    pub(crate) date: bool,
}

/// Splits a message into whitespace tokens (byte spans), except that a written-out date such as
/// `Sun Jul 10 04:01:23 2005` becomes ONE span flagged `date`: its token count varies by format
/// and the corrected ground truth treats it as one variable.
pub(crate) fn split_tokens(content: &str, max_tokens: usize, spans: &mut Vec<TokenSpan>) {
    spans.clear();
    let bytes = content.as_bytes();
    let mut has_month = false;
    let mut offset = 0;
    while offset < bytes.len() && spans.len() < max_tokens {
        while offset < bytes.len() && BYTE_CLASS[bytes[offset] as usize] & class::SPACE != 0 {
            offset += 1;
        }
        if offset >= bytes.len() {
            break;
        }
        let start = offset;
        let mut shape = 0;
        while let Some(&byte) = bytes.get(offset) {
            let byte_class = BYTE_CLASS[byte as usize];
            if byte_class & class::SPACE != 0 {
                break;
            }
            shape |= byte_class;
            offset += 1;
        }
        if offset - start == 3 && bytes[start].is_ascii_uppercase() {
            has_month |= is_month(&bytes[start..offset]);
        }
        spans.push(TokenSpan {
            start: start as u32,
            end: offset as u32,
            shape,
            date: false,
        });
    }
    // Fold date runs (month name and clock within a run of date parts) into one span, in place:
    // the write position never passes the read position.
    if !has_month {
        return;
    }
    let mut written = 0;
    let mut index = 0;
    while index < spans.len() {
        let mut end = index;
        let (mut month, mut clock) = (false, false);
        while end < spans.len() {
            let span = spans[end];
            match date_part(&content[span.start as usize..span.end as usize]) {
                Some(DatePart::Month) => month = true,
                Some(DatePart::Clock) => clock = true,
                Some(DatePart::Other) => {}
                None => break,
            }
            end += 1;
        }
        if month && clock && end - index >= 3 {
            spans[written] = TokenSpan {
                start: spans[index].start,
                end: spans[end - 1].end,
                shape: 0,
                date: true,
            };
            index = end;
        } else {
            spans[written] = spans[index];
            index += 1;
        }
        written += 1;
    }
    spans.truncate(written);
}

fn find_wild(bytes: &[u8]) -> Option<usize> {
    bytes
        .windows(3)
        .position(|window| window == WILDCARD.as_bytes())
}

fn rfind_wild(bytes: &[u8]) -> Option<usize> {
    bytes
        .windows(3)
        .rposition(|window| window == WILDCARD.as_bytes())
}
