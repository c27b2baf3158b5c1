//! The org (infersight's tenant, Loki's `X-Scope-OrgID`) that owns a row: stamped on every row
//! of every table at ingest (the `org` column, the last of each schema) and the only thing the
//! query layer's table providers filter reads by.
//!
//! Why a stamped column and not one store per org: every engine (SQL, rollups, RCA, the watcher)
//! already reads one store, so a column isolates with one filter at one seam (the table provider)
//! instead of multiplying WAL, memtable, compaction and rollups per org. The column is appended
//! at the end of every schema, nullable: data written before it exists reads as null, which is
//! the [`DEFAULT_ORG`] (the zero-config single tenant). It is not the `tenant` column of
//! `requests`, which is a data dimension (the LLM service's own customer) the RCA localizes on.
//!
//! Stamping overwrites whatever a batch carried in the column, so no attribute, header or
//! crafted row can choose its org: only the writer's org counts (`stamp_org`).

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, StringArray};

use crate::error::ModelError;
use crate::tables::TableBatch;

/// The column every canonical table ends with.
pub const ORG_COLUMN: &str = "org";

/// The org of rows written without authentication, and of rows stored before orgs existed.
pub const DEFAULT_ORG: &str = "default";

/// Longest org name accepted.
pub const MAX_ORG_LEN: usize = 64;

/// Checks an org name: 1 to [`MAX_ORG_LEN`] characters of `A-Z a-z 0-9 . _ -`, not starting with
/// a dot (Loki's rule, without the characters a path or a header list would need escaped).
pub fn check_org_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_ORG_LEN {
        return Err(format!(
            "an org name has 1 to {MAX_ORG_LEN} characters (got {})",
            name.len()
        ));
    }
    if name.starts_with('.') {
        return Err(format!("org `{name}`: must not start with a dot"));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "org `{}`: the character {bad:?} is not allowed (letters, digits, `.`, `_`, `-`)",
            name.escape_debug()
        ));
    }
    Ok(())
}

/// `batch` with its `org` column set to `org` on every row, whatever it held.
pub fn stamp_org(batch: &TableBatch, org: &str) -> Result<TableBatch, ModelError> {
    let schema = batch.batch.schema();
    let (index, _) = schema
        .column_with_name(ORG_COLUMN)
        .ok_or_else(|| ModelError::Column {
            table: batch.table.name(),
            column: ORG_COLUMN.to_string(),
            reason: "missing".into(),
        })?;
    let mut columns = batch.batch.columns().to_vec();
    let rows = batch.batch.num_rows();
    columns[index] = Arc::new(StringArray::from_iter_values(std::iter::repeat_n(
        org, rows,
    ))) as ArrayRef;
    Ok(TableBatch {
        table: batch.table,
        batch: RecordBatch::try_new(schema, columns)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tables::{RequestRecord, Table};

    #[test]
    fn stamping_overwrites_whatever_the_rows_claimed() {
        let rows = [
            RequestRecord {
                org: Some("intruder".into()),
                ..Default::default()
            },
            RequestRecord::default(),
        ];
        let batch = TableBatch {
            table: Table::Requests,
            batch: RequestRecord::to_batch(&rows),
        };
        let stamped = stamp_org(&batch, "team-a").unwrap();
        let back = RequestRecord::from_batch(&stamped.batch).unwrap();
        assert!(
            back.iter().all(|r| r.org.as_deref() == Some("team-a")),
            "{back:?}"
        );
    }

    #[test]
    fn every_table_ends_with_the_org_column() {
        for table in Table::ALL {
            let schema = table.schema();
            let last = schema.fields().last().unwrap();
            assert_eq!(last.name(), ORG_COLUMN, "{table}");
            assert!(last.is_nullable(), "{table}: old data reads as null");
        }
    }

    #[test]
    fn org_names() {
        for good in ["default", "team-a", "A.b_c-9", &"x".repeat(MAX_ORG_LEN)] {
            assert_eq!(check_org_name(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            ".hidden",
            "a b",
            "a|b",
            "a/b",
            "é",
            &"x".repeat(MAX_ORG_LEN + 1),
        ] {
            assert!(check_org_name(bad).is_err(), "{bad}");
        }
    }
}
