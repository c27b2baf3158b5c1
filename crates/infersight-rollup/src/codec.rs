//! The on-disk form of a rollup: a versioned binary encoding (magic, version, dimensions,
//! combinations, then cells sorted by key, sketches as varints), which the store writes next to
//! each `requests` segment as a zstd-compressed sidecar.

use std::hash::Hash;

use crate::sketch::{DdSketch, put_varint, take_varint};
use crate::{Cell, Rollup, RollupError};

const ENCODING_MAGIC: &[u8; 4] = b"ISRU";
const ENCODING_VERSION: u8 = 2;

impl Rollup {
    /// Binary form: magic, version, dimensions, combinations, then cells sorted by key.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.cells.len() * 64);
        out.extend_from_slice(ENCODING_MAGIC);
        out.push(ENCODING_VERSION);
        put_varint(&mut out, self.max_combinations as u64);
        put_varint(&mut out, self.folded_rows);
        put_varint(&mut out, self.dimensions.len() as u64);
        for d in &self.dimensions {
            put_str(&mut out, d);
        }
        put_varint(&mut out, self.combos.len() as u64);
        for combo in &self.combos {
            for v in combo.iter() {
                put_str(&mut out, v);
            }
        }
        put_varint(&mut out, self.cells.len() as u64);
        for (key, cell) in &self.cells {
            out.extend_from_slice(&key.0.to_le_bytes());
            put_varint(&mut out, u64::from(key.1));
            for n in [
                cell.requests,
                cell.errors,
                cell.truncated,
                cell.input_tokens,
                cell.output_tokens,
                cell.cached_tokens,
            ] {
                put_varint(&mut out, n);
            }
            for sketch in &cell.sketches {
                sketch.encode(&mut out);
            }
        }
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Rollup, RollupError> {
        let mut input = bytes;
        let magic = input
            .get(..4)
            .ok_or_else(|| RollupError::Decode("truncated header".into()))?;
        if magic != ENCODING_MAGIC {
            return Err(RollupError::Decode("not a rollup file".into()));
        }
        input = &input[4..];
        let version = *input
            .first()
            .ok_or_else(|| RollupError::Decode("truncated header".into()))?;
        if version != ENCODING_VERSION {
            return Err(RollupError::Decode(format!(
                "unsupported version {version}"
            )));
        }
        input = &input[1..];
        let max_combinations = take_varint(&mut input)? as usize;
        let folded_rows = take_varint(&mut input)?;
        let dim_count = take_len(&mut input)?;
        let mut dimensions = Vec::with_capacity(dim_count);
        for _ in 0..dim_count {
            dimensions.push(take_str(&mut input)?);
        }
        let combo_count = take_len(&mut input)?;
        let mut rollup = Rollup {
            dimensions,
            max_combinations,
            folded_rows,
            ..Rollup::default()
        };
        for _ in 0..combo_count {
            let mut values = Vec::with_capacity(dim_count);
            for _ in 0..dim_count {
                values.push(take_str(&mut input)?);
            }
            let hash = rollup.combo_index.hash(|h| {
                for v in &values {
                    v.as_str().hash(h);
                }
            });
            let combos = &rollup.combos;
            if rollup
                .combo_index
                .find(hash, |id| *combos[id as usize] == *values)
                .is_some()
            {
                return Err(RollupError::Decode("duplicate combination".into()));
            }
            rollup.push_combo(hash, values.into_boxed_slice());
        }
        let cell_count = take_len(&mut input)?;
        for _ in 0..cell_count {
            if input.len() < 8 {
                return Err(RollupError::Decode("truncated cell".into()));
            }
            let (ts, rest) = input.split_at(8);
            input = rest;
            let minute = i64::from_le_bytes(
                ts.try_into()
                    .map_err(|_| RollupError::Decode("truncated cell".into()))?,
            );
            let combo = take_varint(&mut input)?;
            if combo >= combo_count as u64 {
                return Err(RollupError::Decode(
                    "cell names an unknown combination".into(),
                ));
            }
            let mut cell = Cell {
                requests: take_varint(&mut input)?,
                errors: take_varint(&mut input)?,
                truncated: take_varint(&mut input)?,
                input_tokens: take_varint(&mut input)?,
                output_tokens: take_varint(&mut input)?,
                cached_tokens: take_varint(&mut input)?,
                ..Cell::default()
            };
            for sketch in &mut cell.sketches {
                *sketch = DdSketch::decode(&mut input)?;
            }
            rollup.cells.insert((minute, combo as u32), cell);
        }
        if !input.is_empty() {
            return Err(RollupError::Decode("trailing bytes".into()));
        }
        rollup.rebuild_hour_cells();
        Ok(rollup)
    }
}

pub(crate) fn put_str(out: &mut Vec<u8>, s: &str) {
    put_varint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

pub(crate) fn take_len(input: &mut &[u8]) -> Result<usize, RollupError> {
    let n = take_varint(input)?;
    // every element takes at least one byte, so a larger count is damage, not a big file
    if n > input.len() as u64 {
        return Err(RollupError::Decode(
            "count exceeds the remaining bytes".into(),
        ));
    }
    Ok(n as usize)
}

pub(crate) fn take_str(input: &mut &[u8]) -> Result<String, RollupError> {
    let len = take_len(input)?;
    let (bytes, rest) = input.split_at(len);
    *input = rest;
    String::from_utf8(bytes.to_vec()).map_err(|_| RollupError::Decode("invalid utf-8".into()))
}

/// zstd level of sidecars: sketch bins compress well (small varints); level 3 is cheap at flush
/// time.
const SIDECAR_ZSTD_LEVEL: i32 = 3;

impl Rollup {
    /// The sidecar form the store writes next to a `requests` segment: [`Rollup::encode`],
    /// zstd-compressed.
    pub fn encode_sidecar(&self) -> std::io::Result<Vec<u8>> {
        zstd::bulk::compress(&self.encode(), SIDECAR_ZSTD_LEVEL)
    }

    /// Reads what [`Rollup::encode_sidecar`] wrote.
    pub fn decode_sidecar(compressed: &[u8]) -> Result<Rollup, RollupError> {
        let mut bytes = Vec::new();
        zstd::stream::copy_decode(compressed, &mut bytes)
            .map_err(|e| RollupError::Compression(e.to_string()))?;
        Rollup::decode(&bytes)
    }
}
