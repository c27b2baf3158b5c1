//! A `GROUP BY` key read as its dictionary, between the plan rewrite ([`crate::group_views`],
//! which marks the files of a scan) and the Parquet reader ([`crate::checked_reader`], which
//! tells arrow-rs to read the marked columns as dictionaries).
//!
//! The store writes its label columns (`model`, `worker`, `tenant`) dictionary-encoded: each
//! row is an index into a handful of values. Read as `Dictionary(Int32, Utf8)`, arrow-rs hands
//! out those indices and one values array per column chunk; the partial aggregate
//! ([`crate::view_aggregate`]) then finds a row's group with one lookup by index, where a view
//! costs a hashed probe per row. arrow-rs reads a column as a dictionary when the Arrow schema in
//! the file's footer (`ARROW:schema`) says so; the marked reader rewrites that entry in the
//! footer metadata it returns, for each marked column stored with a dictionary in every row group
//! of the file. A column of some other file (written plain, or by an older writer) keeps `Utf8`,
//! and DataFusion casts its batches to the table's type: slower, still right.

use std::collections::BTreeSet;
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::datasource::listing::PartitionedFile;
use datafusion::parquet::arrow::{
    ARROW_SCHEMA_META_KEY, encode_arrow_schema, parquet_to_arrow_schema,
};
use datafusion::parquet::basic::{Encoding, Type as PhysicalType};
use datafusion::parquet::errors::ParquetError;
use datafusion::parquet::file::metadata::{
    FileMetaData, KeyValue, ParquetMetaData, ParquetMetaDataBuilder,
};

/// The type a marked key is read as.
pub(crate) fn dictionary_type() -> DataType {
    DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8))
}

/// The mark a scan's file carries: the columns to read as dictionaries.
#[derive(Debug)]
struct DictionaryKeys(Arc<BTreeSet<String>>);

/// `file` marked to read `keys` as dictionaries.
pub(crate) fn mark(file: &mut PartitionedFile, keys: &Arc<BTreeSet<String>>) {
    file.extensions.insert(DictionaryKeys(Arc::clone(keys)));
}

/// The columns `file` is marked to read as dictionaries (none when unmarked).
pub(crate) fn marked(file: &PartitionedFile) -> Option<Arc<BTreeSet<String>>> {
    file.extensions
        .get::<DictionaryKeys>()
        .map(|keys| Arc::clone(&keys.0))
}

/// `metadata` with the `keys` it stores dictionary-encoded in every row group declared
/// [`dictionary_type`] in its footer's Arrow schema; `metadata` itself when no key qualifies.
pub(crate) fn hint(
    metadata: Arc<ParquetMetaData>,
    keys: &BTreeSet<String>,
) -> Result<Arc<ParquetMetaData>, ParquetError> {
    let file = metadata.file_metadata();
    let schema = parquet_to_arrow_schema(file.schema_descr(), file.key_value_metadata())?;
    let mut changed = false;
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|field| {
            let field = field.as_ref().clone();
            if keys.contains(field.name())
                && field.data_type() == &DataType::Utf8
                && dictionary_everywhere(&metadata, field.name())
            {
                changed = true;
                field.with_data_type(dictionary_type())
            } else {
                field
            }
        })
        .collect();
    if !changed {
        return Ok(metadata);
    }
    let schema = Schema::new_with_metadata(fields, schema.metadata().clone());
    let mut entries: Vec<KeyValue> = file
        .key_value_metadata()
        .map(|entries| {
            entries
                .iter()
                .filter(|entry| entry.key != ARROW_SCHEMA_META_KEY)
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    entries.push(KeyValue::new(
        ARROW_SCHEMA_META_KEY.to_string(),
        encode_arrow_schema(&schema),
    ));
    let file = FileMetaData::new(
        file.version(),
        file.num_rows(),
        file.created_by().map(str::to_string),
        Some(entries),
        file.schema_descr_ptr(),
        file.column_orders().cloned(),
    );
    // the reader's own metadata is not shared yet: its row groups move rather than copy
    let mut old = Arc::try_unwrap(metadata)
        .unwrap_or_else(|shared| shared.as_ref().clone())
        .into_builder();
    Ok(Arc::new(
        ParquetMetaDataBuilder::new(file)
            .set_row_groups(old.take_row_groups())
            .set_column_index(old.take_column_index())
            .set_offset_index(old.take_offset_index())
            .build(),
    ))
}

/// Whether the top-level byte-array column `name` has a dictionary in every row group.
fn dictionary_everywhere(metadata: &ParquetMetaData, name: &str) -> bool {
    let columns = metadata.file_metadata().schema_descr().columns();
    let Some(leaf) = columns
        .iter()
        .position(|column| column.path().parts() == [name])
    else {
        return false;
    };
    columns[leaf].physical_type() == PhysicalType::BYTE_ARRAY
        && metadata.row_groups().iter().all(|group| {
            group.column(leaf).encodings().any(|encoding| {
                matches!(
                    encoding,
                    Encoding::RLE_DICTIONARY | Encoding::PLAIN_DICTIONARY
                )
            })
        })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use bytes::Bytes;
    use datafusion::arrow::array::{Array, ArrayRef, Int64Array, RecordBatch, StringArray};
    use datafusion::parquet::arrow::ArrowWriter;
    use datafusion::parquet::arrow::arrow_reader::{
        ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
    };
    use datafusion::parquet::file::properties::WriterProperties;
    use datafusion::parquet::file::reader::{FileReader, SerializedFileReader};

    use super::*;

    /// A file of `label` (a dictionary unless `plain_label`), `id` (written plain) and `n`.
    fn file(plain_label: bool) -> Bytes {
        let schema = Arc::new(Schema::new(vec![
            Field::new("label", DataType::Utf8, true),
            Field::new("id", DataType::Utf8, false),
            Field::new("n", DataType::Int64, false),
        ]));
        let properties = WriterProperties::builder()
            .set_column_dictionary_enabled("id".into(), false)
            .set_column_dictionary_enabled("label".into(), !plain_label)
            .set_max_row_group_row_count(Some(40))
            .build();
        let mut bytes = Vec::new();
        let mut writer =
            ArrowWriter::try_new(&mut bytes, Arc::clone(&schema), Some(properties)).unwrap();
        let labels: Vec<Option<String>> = (0..100)
            .map(|i| (i % 9 != 0).then(|| format!("label-{}", i % 4)))
            .collect();
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(labels)),
            Arc::new(StringArray::from_iter_values(
                (0..100).map(|i| format!("id-{i}")),
            )),
            Arc::new(Int64Array::from_iter_values(0..100)),
        ];
        writer
            .write(&RecordBatch::try_new(schema, columns).unwrap())
            .unwrap();
        writer.close().unwrap();
        Bytes::from(bytes)
    }

    fn metadata(bytes: &Bytes) -> Arc<ParquetMetaData> {
        Arc::new(
            SerializedFileReader::new(bytes.clone())
                .unwrap()
                .metadata()
                .clone(),
        )
    }

    /// The columns of `bytes` read with `metadata`, as arrow-rs reads them.
    fn read(bytes: &Bytes, metadata: Arc<ParquetMetaData>) -> Vec<RecordBatch> {
        let metadata = ArrowReaderMetadata::try_new(metadata, ArrowReaderOptions::new()).unwrap();
        ParquetRecordBatchReaderBuilder::new_with_metadata(bytes.clone(), metadata)
            .build()
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    #[test]
    fn a_key_stored_with_a_dictionary_is_read_as_one_and_answers_the_same() {
        let bytes = file(false);
        let keys: BTreeSet<String> = ["label".to_string(), "id".to_string()].into();
        let plain = read(&bytes, metadata(&bytes));
        let hinted = hint(metadata(&bytes), &keys).unwrap();
        assert_eq!(
            hinted.row_groups().len(),
            3,
            "several row groups, each its dictionary"
        );
        let read_hinted = read(&bytes, Arc::clone(&hinted));
        let (before, after) = (&plain[0].schema(), &read_hinted[0].schema());
        assert_eq!(before.field(0).data_type(), &DataType::Utf8);
        assert_eq!(after.field(0).data_type(), &dictionary_type());
        // `id` is a key too, but written plain: it stays as it was, as does `n`
        assert_eq!(after.field(1).data_type(), &DataType::Utf8);
        assert_eq!(after.field(2).data_type(), &DataType::Int64);
        // the footer's other entries are kept
        let entries = |m: &ParquetMetaData| {
            m.file_metadata()
                .key_value_metadata()
                .map(|kv| kv.iter().filter(|e| e.key != ARROW_SCHEMA_META_KEY).count())
        };
        assert_eq!(entries(&hinted), entries(&metadata(&bytes)));
        // every row's value, nulls included, as the plain read gives it
        let values = |batches: &[RecordBatch]| -> Vec<Option<String>> {
            batches
                .iter()
                .flat_map(|batch| {
                    let column =
                        datafusion::arrow::compute::cast(batch.column(0), &DataType::Utf8).unwrap();
                    let strings = column
                        .as_any()
                        .downcast_ref::<StringArray>()
                        .unwrap()
                        .clone();
                    (0..strings.len())
                        .map(|row| (!strings.is_null(row)).then(|| strings.value(row).to_string()))
                        .collect::<Vec<_>>()
                })
                .collect()
        };
        assert_eq!(values(&read_hinted), values(&plain));
        assert_eq!(values(&plain).iter().filter(|v| v.is_none()).count(), 12);
    }

    #[test]
    fn a_key_written_plain_or_not_marked_is_left_as_it_was() {
        let bytes = file(true);
        let label: BTreeSet<String> = ["label".to_string()].into();
        let original = metadata(&bytes);
        assert!(Arc::ptr_eq(
            &hint(Arc::clone(&original), &label).unwrap(),
            &original
        ));
        let bytes = file(false);
        let original = metadata(&bytes);
        let other: BTreeSet<String> = ["n".to_string(), "absent".to_string()].into();
        assert!(Arc::ptr_eq(
            &hint(Arc::clone(&original), &other).unwrap(),
            &original
        ));
    }

    #[test]
    fn a_marked_file_names_its_keys() {
        let mut file = PartitionedFile::new("segment.parquet", 10);
        assert!(marked(&file).is_none());
        mark(&mut file, &Arc::new(["model".to_string()].into()));
        assert_eq!(
            marked(&file.clone()).unwrap().iter().collect::<Vec<_>>(),
            ["model"]
        );
    }
}
