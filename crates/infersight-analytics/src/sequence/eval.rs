//! Evaluation helpers shared by the tests and the benchmark: parsing session text that the
//! caller has read, a deterministic seeded split, and precision / recall / F1.

use super::{EventId, SequenceError};

/// Seed of the 50/50 split of `robust_log_train.csv` used by the tests and `bench/sequence.sh`.
pub const HDFS_SPLIT_SEED: u64 = 42;

/// Parses one session of whitespace-separated integer ids (`"5 5 22 11 9"`). `line` (1-based)
/// only labels errors. An empty or blank text is an empty session.
pub fn parse_event_ids(text: &str, line: usize) -> Result<Vec<EventId>, SequenceError> {
    text.split_whitespace()
        .map(|token| {
            token
                .parse::<EventId>()
                .map_err(|_| SequenceError::BadEventId {
                    line,
                    token: token.to_owned(),
                })
        })
        .collect()
}

/// Parses `Sequence,label` csv text (header line first, as in logdeep's `robust_log_train.csv`):
/// each row is a space-separated id list, a comma, and `0` (normal) or `1` (anomalous). Returns
/// `(session, is_anomalous)` pairs in file order; blank lines are skipped.
pub fn parse_labelled_csv(text: &str) -> Result<Vec<(Vec<EventId>, bool)>, SequenceError> {
    let mut lines = text.lines().enumerate();
    match lines.next() {
        Some((_, header)) if !header.trim().is_empty() => {}
        _ => return Err(SequenceError::MissingHeader),
    }
    let mut rows = Vec::new();
    for (index, row) in lines {
        let line = index + 1;
        if row.trim().is_empty() {
            continue;
        }
        let (sequence, label) = row
            .rsplit_once(',')
            .ok_or(SequenceError::MalformedRow { line })?;
        let anomalous = match label.trim() {
            "0" => false,
            "1" => true,
            other => {
                return Err(SequenceError::BadLabel {
                    line,
                    value: other.to_owned(),
                });
            }
        };
        rows.push((
            parse_event_ids(sequence.trim_matches('"'), line)?,
            anomalous,
        ));
    }
    Ok(rows)
}

/// SplitMix64 (Steele et al.): a tiny, well-mixed generator, identical on every platform.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Shuffles the indices `0..len` with a seeded Fisher–Yates and cuts them in half: returns
/// `(first, second)` with `first.len() == len / 2`, each half in ascending order. Deterministic
/// for a given `(len, seed)`.
pub fn seeded_split(len: usize, seed: u64) -> (Vec<usize>, Vec<usize>) {
    let mut indices: Vec<usize> = (0..len).collect();
    let mut state = seed;
    for i in (1..len).rev() {
        // Modulo bias is < 2^-40 for any realistic length; irrelevant for a split.
        let j = (splitmix64(&mut state) % (i as u64 + 1)) as usize;
        indices.swap(i, j);
    }
    let mut second = indices.split_off(len / 2);
    indices.sort_unstable();
    second.sort_unstable();
    (indices, second)
}

/// Confusion counts with the anomalous class as positive.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BinaryConfusion {
    pub true_positives: usize,
    pub false_positives: usize,
    pub true_negatives: usize,
    pub false_negatives: usize,
}

impl BinaryConfusion {
    /// Counts one `(predicted, actual)` pair.
    pub fn add(&mut self, predicted_anomalous: bool, actually_anomalous: bool) {
        match (predicted_anomalous, actually_anomalous) {
            (true, true) => self.true_positives += 1,
            (true, false) => self.false_positives += 1,
            (false, false) => self.true_negatives += 1,
            (false, true) => self.false_negatives += 1,
        }
    }

    /// `tp / (tp + fp)`; `None` when nothing was predicted positive.
    pub fn precision(&self) -> Option<f64> {
        let predicted = self.true_positives + self.false_positives;
        (predicted > 0).then(|| self.true_positives as f64 / predicted as f64)
    }

    /// `tp / (tp + fn)`; `None` when there are no positives.
    pub fn recall(&self) -> Option<f64> {
        let actual = self.true_positives + self.false_negatives;
        (actual > 0).then(|| self.true_positives as f64 / actual as f64)
    }

    /// Harmonic mean of precision and recall; `0.0` when either is undefined or both are zero.
    pub fn f1(&self) -> f64 {
        match (self.precision(), self.recall()) {
            (Some(p), Some(r)) if p + r > 0.0 => 2.0 * p * r / (p + r),
            _ => 0.0,
        }
    }

    pub fn total(&self) -> usize {
        self.true_positives + self.false_positives + self.true_negatives + self.false_negatives
    }
}

/// Results of the HDFS evaluation protocol (module documentation, "Evaluation protocol").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HdfsEvaluation {
    /// Sessions used for training the headline model (`hdfs_train` + normal training-half rows).
    pub training_sessions: usize,
    /// Headline: the held-out half.
    pub held_out: BinaryConfusion,
    /// The held-out half restricted to unique sessions absent from the training set.
    pub held_out_novel_unique: BinaryConfusion,
    /// A model trained on `hdfs_train` only, scored on every labelled row.
    pub whole_file_hdfs_train_only: BinaryConfusion,
}

/// Runs the evaluation protocol: split `labelled` 50/50 with `seed`, train on `normal_train`
/// plus the normal rows of the first half, score the second half; also score the novel unique
/// sessions of the second half and, with a model trained on `normal_train` alone, the whole of
/// `labelled`. The held-out half is never used for training or for choosing `params`.
pub fn evaluate_split_protocol(
    normal_train: &[Vec<EventId>],
    labelled: &[(Vec<EventId>, bool)],
    params: &super::SequenceParams,
    seed: u64,
) -> Result<HdfsEvaluation, SequenceError> {
    use std::collections::HashSet;

    use super::NextEventModel;

    let (train_half, held_out_half) = seeded_split(labelled.len(), seed);
    let training: Vec<&[EventId]> = normal_train
        .iter()
        .map(Vec::as_slice)
        .chain(
            train_half
                .iter()
                .filter(|&&row| !labelled[row].1)
                .map(|&row| labelled[row].0.as_slice()),
        )
        .collect();
    let model = NextEventModel::train(training.iter().copied(), params.clone())?;
    let seen: HashSet<&[EventId]> = training.iter().copied().collect();
    let mut novel_seen: HashSet<&[EventId]> = HashSet::new();
    let mut held_out = BinaryConfusion::default();
    let mut held_out_novel_unique = BinaryConfusion::default();
    for &row in &held_out_half {
        let (session, anomalous) = (&labelled[row].0, labelled[row].1);
        let predicted = model.is_anomalous(session);
        held_out.add(predicted, anomalous);
        if !seen.contains(session.as_slice()) && novel_seen.insert(session.as_slice()) {
            held_out_novel_unique.add(predicted, anomalous);
        }
    }
    let baseline = NextEventModel::train(normal_train, params.clone())?;
    let mut whole_file_hdfs_train_only = BinaryConfusion::default();
    for (session, anomalous) in labelled {
        whole_file_hdfs_train_only.add(baseline.is_anomalous(session), *anomalous);
    }
    Ok(HdfsEvaluation {
        training_sessions: training.len(),
        held_out,
        held_out_novel_unique,
        whole_file_hdfs_train_only,
    })
}
