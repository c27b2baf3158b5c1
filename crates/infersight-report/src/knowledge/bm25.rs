//! The knowledge base's in-memory index: runbooks and past incidents (tens to a few thousand
//! documents) analysed into words and scored with BM25 per field, for `knowledge::KnowledgeBase`.
//!
//! Analysis of text: split on every character that is not alphanumeric, drop tokens of
//! [`MAX_TOKEN_BYTES`] bytes or more, lowercase, drop English stop words, stem with the Snowball
//! English stemmer. Signal kinds are not analysed: each is one exact token.
//!
//! Scoring: a query is a sum of clauses. A signal clause adds a constant to every document that
//! covers the kind. A word clause adds `boost × idf × tf × (k1 + 1) / (tf + k1 × (1 − b + b × len /
//! avg_len))` for a document whose field holds the word `tf` times (`len` words in that field,
//! `avg_len` over all documents), with `idf = ln(1 + (N − df + 0.5) / (df + 0.5))`, `N` the number
//! of documents and `df` those whose field holds the word; `k1 = 1.2`, `b = 0.75`.

use std::collections::HashMap;

/// BM25 term-frequency saturation.
const K1: f32 = 1.2;
/// BM25 length normalisation.
const B: f32 = 0.75;
/// Tokens this long or longer (hashes, base64, run-together identifiers) are not words.
const MAX_TOKEN_BYTES: usize = 40;

/// Function words that say nothing about a cause (articles, auxiliaries, prepositions,
/// conjunctions, pronouns).
const STOP_WORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it",
    "no", "not", "of", "on", "or", "such", "that", "the", "their", "then", "there", "these",
    "they", "this", "to", "was", "will", "with",
];

/// The text fields a word can be searched in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TextField {
    Title = 0,
    Keywords = 1,
    Text = 2,
}

const FIELDS: usize = 3;

/// Words, lowercased, stop words out, stemmed, in order (repeats kept).
pub(super) struct Analyzer {
    stemmer: frostem::Stemmer,
}

impl Analyzer {
    pub(super) fn new() -> Analyzer {
        Analyzer {
            stemmer: frostem::Stemmer::new(frostem::Algorithm::English),
        }
    }

    pub(super) fn words(&self, text: &str) -> Vec<String> {
        text.split(|c: char| !c.is_alphanumeric())
            .filter(|token| !token.is_empty() && token.len() < MAX_TOKEN_BYTES)
            .map(str::to_lowercase)
            .filter(|word| !STOP_WORDS.contains(&word.as_str()))
            .map(|word| self.stemmer.stem(&word).into_owned())
            .collect()
    }
}

/// One document as indexed: its signal kinds and, per field, each word's count and the length.
#[derive(Default)]
struct Document {
    signals: Vec<String>,
    terms: [HashMap<String, u32>; FIELDS],
    lengths: [u32; FIELDS],
}

/// Documents in insertion order; a document's number is its position.
#[derive(Default)]
pub(super) struct Index {
    documents: Vec<Document>,
    /// Per field: how many documents hold each word.
    document_frequency: [HashMap<String, u32>; FIELDS],
    total_lengths: [u64; FIELDS],
}

/// A document being added: signal kinds and text values (a field may get several values).
#[derive(Default)]
pub(super) struct NewDocument {
    signals: Vec<String>,
    texts: Vec<(TextField, String)>,
}

impl NewDocument {
    pub(super) fn signal(&mut self, kind: &str) {
        self.signals.push(kind.to_owned());
    }

    pub(super) fn text(&mut self, field: TextField, text: impl Into<String>) {
        self.texts.push((field, text.into()));
    }
}

/// One clause of a query.
pub(super) enum Clause {
    /// Documents covering the kind get `score`, however many kinds they cover.
    Signal { kind: String, score: f32 },
    /// BM25 of an analysed word in one field, times `boost`.
    Word {
        word: String,
        field: TextField,
        boost: f32,
    },
}

impl Index {
    /// Adds a document; returns its number.
    pub(super) fn add(&mut self, analyzer: &Analyzer, new: NewDocument) -> usize {
        let mut document = Document {
            signals: new.signals,
            ..Document::default()
        };
        for (field, text) in &new.texts {
            let f = *field as usize;
            for word in analyzer.words(text) {
                *document.terms[f].entry(word).or_default() += 1;
                document.lengths[f] += 1;
            }
        }
        for f in 0..FIELDS {
            self.total_lengths[f] += u64::from(document.lengths[f]);
            for word in document.terms[f].keys() {
                *self.document_frequency[f].entry(word.clone()).or_default() += 1;
            }
        }
        self.documents.push(document);
        self.documents.len() - 1
    }

    /// Every document at least one clause matches, with its score, best first (ties by number).
    pub(super) fn search(&self, clauses: &[Clause]) -> Vec<(usize, f32)> {
        let mut scores: HashMap<usize, f32> = HashMap::new();
        let n = self.documents.len() as f32;
        for clause in clauses {
            match clause {
                Clause::Signal { kind, score } => {
                    for (number, document) in self.documents.iter().enumerate() {
                        if document.signals.iter().any(|k| k == kind) {
                            *scores.entry(number).or_default() += score;
                        }
                    }
                }
                Clause::Word { word, field, boost } => {
                    let f = *field as usize;
                    let Some(&df) = self.document_frequency[f].get(word) else {
                        continue;
                    };
                    let idf = (1.0 + (n - df as f32 + 0.5) / (df as f32 + 0.5)).ln();
                    let average = self.total_lengths[f] as f32 / n;
                    for (number, document) in self.documents.iter().enumerate() {
                        let Some(&tf) = document.terms[f].get(word) else {
                            continue;
                        };
                        let tf = tf as f32;
                        let norm = K1 * (1.0 - B + B * document.lengths[f] as f32 / average);
                        *scores.entry(number).or_default() +=
                            boost * idf * tf * (K1 + 1.0) / (tf + norm);
                    }
                }
            }
        }
        let mut hits: Vec<(usize, f32)> = scores.into_iter().collect();
        hits.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        hits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(texts: &[&str]) -> (Analyzer, Index) {
        let analyzer = Analyzer::new();
        let mut index = Index::default();
        for text in texts {
            let mut document = NewDocument::default();
            document.text(TextField::Text, *text);
            index.add(&analyzer, document);
        }
        (analyzer, index)
    }

    fn word(analyzer: &Analyzer, word: &str) -> Clause {
        Clause::Word {
            word: analyzer.words(word).remove(0),
            field: TextField::Text,
            boost: 1.0,
        }
    }

    #[test]
    fn analysis_lowercases_stems_and_drops_stop_words_and_long_tokens() {
        let analyzer = Analyzer::new();
        let long = "x".repeat(MAX_TOKEN_BYTES);
        assert_eq!(
            analyzer.words(&format!("The KV-cache is Preempting requests {long} ok")),
            ["kv", "cach", "preempt", "request", "ok"]
        );
    }

    #[test]
    fn rarer_words_and_shorter_documents_score_higher() {
        let (analyzer, index) = index(&[
            "preemption storm preemption",
            "preemption of requests under memory pressure with many other words here",
            "lora adapter swapping",
            "memory leak in the logits processor",
        ]);
        let hits = index.search(&[word(&analyzer, "preemption")]);
        assert_eq!(hits.len(), 2);
        assert_eq!(
            hits[0].0, 0,
            "two occurrences in a short text lead: {hits:?}"
        );
        assert!(hits[0].1 > hits[1].1);
        // "memory" is in two documents, "lora" in one: the rarer word weighs more.
        let memory = index.search(&[word(&analyzer, "memory")]);
        let lora = index.search(&[word(&analyzer, "lora")]);
        assert!(lora[0].1 > memory.iter().map(|h| h.1).fold(0.0, f32::max));
        // The textbook value for one occurrence in a document of average length.
        let n = 4.0f32;
        let idf = (1.0 + (n - 1.0 + 0.5) / 1.5f32).ln();
        let lengths = [3.0f32, 9.0, 3.0, 4.0];
        let average = lengths.iter().sum::<f32>() / n;
        let expected = idf * (K1 + 1.0) / (1.0 + K1 * (1.0 - B + B * 3.0 / average));
        assert!(
            (lora[0].1 - expected).abs() < 1e-5,
            "{} vs {expected}",
            lora[0].1
        );
    }

    #[test]
    fn signal_clauses_are_constant_and_add_to_words() {
        let analyzer = Analyzer::new();
        let mut index = Index::default();
        for (kinds, text) in [
            (&["gpu_memory_leak", "kv_cache_pressure"][..], "leak"),
            (&["kv_cache_pressure"][..], "pressure"),
            (&[][..], "unrelated"),
        ] {
            let mut document = NewDocument::default();
            for kind in kinds {
                document.signal(kind);
            }
            document.text(TextField::Text, text);
            index.add(&analyzer, document);
        }
        let kv = Clause::Signal {
            kind: "kv_cache_pressure".into(),
            score: 50.0,
        };
        let hits = index.search(std::slice::from_ref(&kv));
        assert_eq!(hits, [(0, 50.0), (1, 50.0)], "ties keep document order");
        let hits = index.search(&[kv, word(&analyzer, "pressure")]);
        assert_eq!(hits[0].0, 1);
        assert!(hits[0].1 > 50.0);
        assert_eq!(hits.len(), 2, "a document no clause matches is not a hit");
    }
}
