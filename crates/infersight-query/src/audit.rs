//! The access audit: one JSON line per read of stored data by a person or a tool, appended to
//! `<data_dir>/audit/access.jsonl`, so "who looked at which fields, when, from where" can be
//! answered (GDPR art. 30 / 32 style accountability). It sits beside [`QueryEngine`]: the HTTP
//! API (`POST /api/v1/query`), `infersight query` and `infersight report` record what they read
//! through [`QueryEngine::sql_audited`] and [`QueryEngine::record_access`].
//!
//! What a line holds, and why:
//! - `tables` / `columns` come from the DataFusion logical plan after optimization
//!   ([`accessed_data`]): every `TableScan` contributes its table and its projected columns
//!   (projection push-down has put there every column the query needs anywhere: select list,
//!   `WHERE`, `JOIN ... ON`, `GROUP BY`, `ORDER BY`, `json_get(attrs, …)` arguments), plus the
//!   columns of filters pushed into the scan. Columns are named `table.column`, so a join of two
//!   tables stays unambiguous.
//! - `personal_fields` is the subset that can hold personal data ([`PERSONAL_COLUMNS`]).
//! - `query_hash` is the SHA-256 of the SQL text; the SQL itself, its literals and its results are
//!   never written (a literal may be an e-mail address or a user id).
//! - `client` (HTTP only) is never a raw address: a keyed hash when the redact stage has a secret,
//!   else the `<IP>` placeholder.
//!
//! Writing: every line is one `write(2)` on a file opened with `O_APPEND`, so concurrent writers
//! (threads, or a CLI run next to the server) never interleave inside a line. The file rotates to
//! `access.jsonl.1` … `.N` at a size limit, so the audit cannot fill the disk. A failed write is
//! reported to the caller (which warns and counts it) and never costs the query its answer.
//!
//! [`QueryEngine`]: crate::QueryEngine
//! [`QueryEngine::sql_audited`]: crate::QueryEngine::sql_audited
//! [`QueryEngine::record_access`]: crate::QueryEngine::record_access

use std::collections::BTreeSet;
use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use datafusion::common::TableReference;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::logical_expr::{LogicalPlan, TableScan};
use infersight_model::ErrorKind;
use serde::{Deserialize, Serialize};

/// Folder of the audit under the store's data directory.
pub const AUDIT_DIR: &str = "audit";
/// The access audit's file name inside [`AUDIT_DIR`].
pub const ACCESS_FILE: &str = "access.jsonl";
/// Size at which `access.jsonl` rotates to `access.jsonl.1`.
pub const DEFAULT_MAX_BYTES: u64 = 64 * 1024 * 1024;
/// Rotated files kept (`access.jsonl.1` … `.3`); the oldest is deleted at the next rotation.
pub const DEFAULT_KEEP: usize = 3;

/// Request headers naming the person behind an HTTP request, first present wins: what a reverse
/// proxy that authenticates sets (`X-Forwarded-User`; `X-Auth-Request-User` from oauth2-proxy),
/// then our own header for scripts. Only trustworthy behind a proxy that overwrites them.
pub const ACTOR_HEADERS: [&str; 3] = [
    "x-forwarded-user",
    "x-auth-request-user",
    "x-infersight-user",
];
/// The actor of a request without an identity header.
pub const ANONYMOUS_ACTOR: &str = "anonymous";
/// Longest actor kept; longer header values are cut (a header is not a place for a document).
const MAX_ACTOR_CHARS: usize = 128;

/// Columns of the canonical tables that can hold personal data, by column name (the same name
/// means the same thing in every table):
/// - free text and open attribute maps, which may carry prompts, e-mail addresses, user ids even
///   after redaction misses: `attrs`, `body`, `params`, `status_message`, `labels`;
/// - identifiers that single out one person's request, session or customer, or link records of
///   the same person: `request_id`, `session_id`, `tenant`, `trace_id`, `span_id`,
///   `parent_span_id`, and `prompt_hash` (equal prompts hash alike, so it links a person's
///   requests and can confirm a guessed prompt).
///
/// Measures, model/worker/device names, template ids and the `redactions` counts are not listed.
pub const PERSONAL_COLUMNS: [&str; 12] = [
    "attrs",
    "body",
    "params",
    "status_message",
    "labels",
    "request_id",
    "session_id",
    "tenant",
    "trace_id",
    "span_id",
    "parent_span_id",
    "prompt_hash",
];

/// Where an access came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Surface {
    /// `POST /api/v1/query` (the web UI and `infersight query --server` use it too).
    ApiQuery,
    /// `infersight query "SQL"` on the store directly.
    CliQuery,
    /// `infersight report`.
    CliReport,
    /// Another command that reads the store (`rca`, `sli`, `dimensions`), named in `what`.
    Cli,
    /// Any other HTTP API call that reads or changes data (SLIs, dimensions, RCA, incidents,
    /// reports, confirmations): who called which route and how it ended, written by the
    /// server's authorization gate.
    Api,
    /// The store deleting data by itself: compaction (files merged, rows kept), retention (rows
    /// removed) or garbage collection in a bucket, named with its counts in `what`; `rows` are
    /// the rows the removed segments held, `actor` the OS user the process runs as.
    Maintenance,
    /// A configuration change, described in `what`: the running server reloading (or refusing)
    /// its redaction rules, tokens file, TLS certificate or OIDC key set; `infersight tokens
    /// create|revoke`.
    Config,
}

/// Who reads, from where and through what; one per request or command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessContext {
    pub actor: String,
    /// The peer, already pseudonymized ([`AccessAudit::client_label`]); `None` off HTTP.
    pub client: Option<String>,
    pub surface: Surface,
    /// What was produced when it is not one query (e.g. `report:<incident id>`).
    pub what: Option<String>,
}

impl AccessContext {
    /// A command-line access by the OS user ([`cli_actor`]).
    pub fn cli(surface: Surface) -> AccessContext {
        AccessContext {
            actor: cli_actor(),
            client: None,
            surface,
            what: None,
        }
    }
}

/// `cli:` and the OS user from `$USER`, else `$LOGNAME`, else `unknown`.
pub fn cli_actor() -> String {
    cli_actor_from(|name| std::env::var(name).ok())
}

/// [`cli_actor`] over any environment lookup (tests).
pub fn cli_actor_from(env: impl Fn(&str) -> Option<String>) -> String {
    let user = ["USER", "LOGNAME"]
        .into_iter()
        .find_map(|name| env(name).as_deref().and_then(clean_actor));
    format!("cli:{}", user.as_deref().unwrap_or("unknown"))
}

/// The actor of an HTTP request from its headers ([`ACTOR_HEADERS`], first present and
/// non-empty wins), else [`ANONYMOUS_ACTOR`]. `header` answers a header's value by its
/// lowercase name.
pub fn actor_from_headers(header: impl Fn(&str) -> Option<String>) -> String {
    ACTOR_HEADERS
        .into_iter()
        .find_map(|name| header(name).as_deref().and_then(clean_actor))
        .unwrap_or_else(|| ANONYMOUS_ACTOR.to_string())
}

/// Trimmed, control characters replaced, at most [`MAX_ACTOR_CHARS`]; `None` when empty.
fn clean_actor(raw: &str) -> Option<String> {
    let trimmed = raw.trim();
    (!trimmed.is_empty()).then(|| {
        trimmed
            .chars()
            .take(MAX_ACTOR_CHARS)
            .map(|c| if c.is_control() { '?' } else { c })
            .collect()
    })
}

/// Tables and `table.column`s one or more statements read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccessedData {
    pub tables: BTreeSet<String>,
    /// `table.column`; `table.*` for "every column" where no plan tells which.
    pub columns: BTreeSet<String>,
}

impl AccessedData {
    /// Adds `table` and `table.<column>` for each of `columns`.
    pub fn add_columns<'a>(&mut self, table: &str, columns: impl IntoIterator<Item = &'a str>) {
        self.tables.insert(table.to_string());
        for column in columns {
            self.columns.insert(format!("{table}.{column}"));
        }
    }

    pub fn merge(&mut self, other: &AccessedData) {
        self.tables.extend(other.tables.iter().cloned());
        self.columns.extend(other.columns.iter().cloned());
    }

    /// The columns that can hold personal data ([`is_personal_column`]), in order.
    pub fn personal_fields(&self) -> Vec<String> {
        self.columns
            .iter()
            .filter(|column| is_personal_column(column))
            .cloned()
            .collect()
    }

    fn add_scan(&mut self, scan: &TableScan) {
        let table = table_name(&scan.table_name);
        let schema = scan.source.schema();
        let mut columns: BTreeSet<&str> = match &scan.projection {
            Some(indices) => indices
                .iter()
                .filter_map(|&index| schema.fields().get(index))
                .map(|field| field.name().as_str())
                .collect(),
            None => schema
                .fields()
                .iter()
                .map(|field| field.name().as_str())
                .collect(),
        };
        // A filter the provider applies exactly may leave the projection; it still reads.
        for filter in &scan.filters {
            columns.extend(filter.column_refs().into_iter().map(|c| c.name.as_str()));
        }
        self.add_columns(&table, columns);
    }
}

/// True for `table.column` (or a bare column) named in [`PERSONAL_COLUMNS`], and for `table.*`.
pub fn is_personal_column(column: &str) -> bool {
    let name = column.rsplit('.').next().unwrap_or(column);
    name == "*" || PERSONAL_COLUMNS.contains(&name)
}

/// The tables and columns `plan` reads: each `TableScan` (subquery plans included) with its
/// projected columns (all of them when it has no projection) and the columns of its pushed-down
/// filters. Give it the OPTIMIZED plan: before projection push-down every scan reads every
/// column, which over-reports (never under-reports).
pub fn accessed_data(plan: &LogicalPlan) -> AccessedData {
    let mut accessed = AccessedData::default();
    // the visitor never fails, so neither does the walk
    let _ = plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node {
            accessed.add_scan(scan);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    accessed
}

/// `requests` for the canonical tables however they were spelled (`datafusion.public.requests`),
/// `schema.table` for the others (`information_schema.columns`).
fn table_name(reference: &TableReference) -> String {
    match reference.schema() {
        Some(schema) if schema != "public" => format!("{schema}.{}", reference.table()),
        _ => reference.table().to_string(),
    }
}

/// Statements an engine ran while tracking was on ([`QueryEngine::with_access_tracking`]).
///
/// [`QueryEngine::with_access_tracking`]: crate::QueryEngine::with_access_tracking
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrackedAccess {
    pub accessed: AccessedData,
    /// Rows the successful statements returned.
    pub rows: u64,
    /// Statements planned.
    pub statements: u64,
}

/// One line of `access.jsonl`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccessRecord {
    /// RFC 3339, UTC, milliseconds.
    pub ts: String,
    pub actor: String,
    pub client: Option<String>,
    pub surface: Surface,
    pub what: Option<String>,
    pub tables: Vec<String>,
    pub columns: Vec<String>,
    pub personal_fields: Vec<String>,
    pub rows: u64,
    /// `ok`, or the error kind (`bad_request`, `unavailable`, `internal`, …).
    pub outcome: String,
    /// SHA-256 of the SQL text (hex); `None` when the access is not one statement.
    pub query_hash: Option<String>,
}

impl AccessRecord {
    pub fn new(
        context: &AccessContext,
        accessed: &AccessedData,
        rows: u64,
        outcome: Result<(), ErrorKind>,
        query_hash: Option<String>,
    ) -> AccessRecord {
        AccessRecord {
            ts: infersight_model::time::format_rfc3339(infersight_model::time::now_ns()),
            actor: context.actor.clone(),
            client: context.client.clone(),
            surface: context.surface,
            what: context.what.clone(),
            tables: accessed.tables.iter().cloned().collect(),
            columns: accessed.columns.iter().cloned().collect(),
            personal_fields: accessed.personal_fields(),
            rows,
            outcome: match outcome {
                Ok(()) => "ok".to_string(),
                Err(kind) => error_kind_name(kind).to_string(),
            },
            query_hash,
        }
    }
}

/// The audit's (and the HTTP API's) name of an error kind.
pub fn error_kind_name(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::BadRequest => "bad_request",
        ErrorKind::TooLarge => "too_large",
        ErrorKind::NotFound => "not_found",
        ErrorKind::Unavailable => "unavailable",
        ErrorKind::Internal => "internal",
    }
}

/// A keyed hash (HMAC) of a value as hex, `None` when no key is configured; the binary builds it
/// from the redact stage's secret so the audit shares the stored data's pseudonyms.
pub type KeyedHasher = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// Whether an access made it into the audit.
#[derive(Debug)]
pub enum AuditStatus {
    /// No audit is attached.
    NotRecorded,
    Recorded,
    /// The line could not be written; the caller warns and counts it.
    Failed(AuditError),
}

/// The answer of [`QueryEngine::sql_audited`]: the query's result, whatever became of the audit.
///
/// [`QueryEngine::sql_audited`]: crate::QueryEngine::sql_audited
#[derive(Debug)]
pub struct AuditedQuery {
    pub result: Result<crate::QueryOutput, crate::QueryError>,
    pub audit: AuditStatus,
}

/// The audit could not be written (the query still answers).
#[derive(Debug, thiserror::Error)]
#[error("writing the access audit {}: {source}", path.display())]
pub struct AuditError {
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

/// The append-only writer of `access.jsonl`, with rotation. Cheap to share (`Arc`).
pub struct AccessAudit {
    path: PathBuf,
    max_bytes: u64,
    keep: usize,
    client_hasher: Option<KeyedHasher>,
    /// Serializes this process's rotation checks and writes; other processes rely on `O_APPEND`.
    write_lock: Mutex<()>,
    written: AtomicU64,
    failed: AtomicU64,
}

impl std::fmt::Debug for AccessAudit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessAudit")
            .field("path", &self.path)
            .field("max_bytes", &self.max_bytes)
            .field("keep", &self.keep)
            .field("keyed_client_hash", &self.client_hasher.is_some())
            .finish_non_exhaustive()
    }
}

impl AccessAudit {
    /// The audit of the store in `data_dir`: `<data_dir>/audit/access.jsonl`, rotating at
    /// [`DEFAULT_MAX_BYTES`] and keeping [`DEFAULT_KEEP`] old files. Touches no file yet.
    pub fn for_data_dir(data_dir: &Path) -> AccessAudit {
        AccessAudit::at(data_dir.join(AUDIT_DIR).join(ACCESS_FILE))
    }

    /// An audit written to `path` (its folder is created at the first write).
    pub fn at(path: PathBuf) -> AccessAudit {
        AccessAudit {
            path,
            max_bytes: DEFAULT_MAX_BYTES,
            keep: DEFAULT_KEEP,
            client_hasher: None,
            write_lock: Mutex::new(()),
            written: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        }
    }

    /// Rotates once the file would grow past `max_bytes` (0: never), keeping `keep` old files
    /// (0: the full file is deleted instead).
    pub fn with_rotation(mut self, max_bytes: u64, keep: usize) -> AccessAudit {
        self.max_bytes = max_bytes;
        self.keep = keep;
        self
    }

    /// Pseudonymizes clients with `hasher` instead of masking them.
    pub fn with_client_hasher(mut self, hasher: KeyedHasher) -> AccessAudit {
        self.client_hasher = Some(hasher);
        self
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How a peer address is written: `<IP:h:…>` (the redact stage's keyed hash of the address,
    /// port dropped) when a secret is configured, else `<IP>`. Never the address.
    pub fn client_label(&self, ip: IpAddr) -> String {
        let text = ip.to_canonical().to_string();
        match self.client_hasher.as_ref().and_then(|hash| hash(&text)) {
            Some(hex) => format!("<IP:h:{hex}>"),
            None => "<IP>".to_string(),
        }
    }

    /// Lines written since start.
    pub fn writes_ok(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    /// Lines that could not be written since start.
    pub fn writes_failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }

    /// A change to the configuration of a running server or to its tokens (`surface: config`),
    /// by the OS user this process runs as, described in `what`: one line, or a warning in
    /// the log when it cannot be written (the change itself stands).
    pub fn record_change(&self, what: String, outcome: Result<(), ErrorKind>) {
        let context = AccessContext {
            what: Some(what),
            ..AccessContext::cli(Surface::Config)
        };
        let record = AccessRecord::new(&context, &AccessedData::default(), 0, outcome, None);
        if let Err(err) = self.append(&record) {
            tracing::warn!(%err, "a configuration change is missing from the access audit");
        }
    }

    /// Appends `record` as one line (one `write` call), rotating first when the file is full.
    pub fn append(&self, record: &AccessRecord) -> Result<(), AuditError> {
        let result = serde_json::to_vec(record)
            .map_err(std::io::Error::other)
            .and_then(|mut line| {
                line.push(b'\n');
                let _serialized = self
                    .write_lock
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                self.rotate_if_full(line.len() as u64)?;
                self.write_line(&line)
            });
        match result {
            Ok(()) => {
                self.written.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err(source) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                Err(AuditError {
                    path: self.path.clone(),
                    source,
                })
            }
        }
    }

    fn open(&self) -> std::io::Result<std::fs::File> {
        let mut options = std::fs::OpenOptions::new();
        options.append(true).create(true);
        // the audit names people: readable by the service's user only
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        match options.open(&self.path) {
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                if let Some(dir) = self.path.parent() {
                    let mut builder = std::fs::DirBuilder::new();
                    builder.recursive(true);
                    #[cfg(unix)]
                    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
                    builder.create(dir)?;
                }
                options.open(&self.path)
            }
            other => other,
        }
    }

    fn write_line(&self, line: &[u8]) -> std::io::Result<()> {
        let mut file = self.open()?;
        // One write(2) of the whole line: with O_APPEND the kernel places it at the end
        // atomically, so lines of concurrent writers never interleave. A short write (disk full)
        // is an error, never a retried tail that could land after another writer's line.
        let written = file.write(line)?;
        if written != line.len() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::WriteZero,
                format!("short write: {written} of {} bytes", line.len()),
            ));
        }
        Ok(())
    }

    /// `access.jsonl` → `.1` → `.2` … when adding `incoming` bytes would pass `max_bytes`; the
    /// file past `keep` is overwritten (deleted). An empty file never rotates, so one oversized
    /// line still gets written.
    fn rotate_if_full(&self, incoming: u64) -> std::io::Result<()> {
        if self.max_bytes == 0 {
            return Ok(());
        }
        let size = match std::fs::metadata(&self.path) {
            Ok(metadata) => metadata.len(),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(error) => return Err(error),
        };
        if size == 0 || size.saturating_add(incoming) <= self.max_bytes {
            return Ok(());
        }
        if self.keep == 0 {
            return ignore_missing(std::fs::remove_file(&self.path));
        }
        for index in (1..self.keep).rev() {
            // another process may have rotated already: a missing file is fine
            ignore_missing(std::fs::rename(
                self.rotated(index),
                self.rotated(index + 1),
            ))?;
        }
        ignore_missing(std::fs::rename(&self.path, self.rotated(1)))
    }

    /// `access.jsonl.<index>`.
    pub fn rotated(&self, index: usize) -> PathBuf {
        let mut name = self.path.clone().into_os_string();
        name.push(format!(".{index}"));
        PathBuf::from(name)
    }
}

fn ignore_missing(result: std::io::Result<()>) -> std::io::Result<()> {
    match result {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Reads the records of one audit file; lines that do not parse are skipped and counted.
pub fn read_records(path: &Path) -> std::io::Result<(Vec<AccessRecord>, usize)> {
    let text = std::fs::read_to_string(path)?;
    let mut records = Vec::new();
    let mut unreadable = 0;
    for line in text.lines().filter(|line| !line.trim().is_empty()) {
        match serde_json::from_str(line) {
            Ok(record) => records.push(record),
            Err(_) => unreadable += 1,
        }
    }
    Ok((records, unreadable))
}

/// Lowercase hex SHA-256 of `bytes` (the audit's `query_hash`).
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::QueryEngine;
    use infersight_store::{StorageBackend, Store, StoreOptions};

    fn engine() -> (tempfile::TempDir, QueryEngine) {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn StorageBackend> =
            Arc::new(Store::open(StoreOptions::new(dir.path().join("data"))).unwrap());
        (dir, QueryEngine::new(store))
    }

    async fn accessed(engine: &QueryEngine, sql: &str) -> (Vec<String>, Vec<String>) {
        let accessed = engine.accessed_data(sql).await.unwrap();
        (
            accessed.tables.into_iter().collect(),
            accessed.columns.into_iter().collect(),
        )
    }

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[tokio::test]
    async fn select_star_reads_every_column() {
        let (_dir, engine) = engine();
        let (tables, columns) = accessed(&engine, "SELECT * FROM tokens").await;
        assert_eq!(tables, strings(&["tokens"]));
        assert_eq!(
            columns,
            strings(&[
                "tokens.kv_hit",
                "tokens.latency_ms",
                "tokens.org",
                "tokens.request_id",
                "tokens.stage",
                "tokens.step",
                "tokens.ts",
            ])
        );
    }

    #[tokio::test]
    async fn a_projection_reads_only_its_columns() {
        let (_dir, engine) = engine();
        let (tables, columns) =
            accessed(&engine, "SELECT model, e2e_ms FROM requests LIMIT 5").await;
        assert_eq!(tables, strings(&["requests"]));
        assert_eq!(columns, strings(&["requests.e2e_ms", "requests.model"]));
    }

    #[tokio::test]
    async fn a_column_used_only_in_a_filter_is_read() {
        let (_dir, engine) = engine();
        let (_, columns) = accessed(
            &engine,
            "SELECT count(*) AS n FROM requests WHERE tenant = 'acme' AND e2e_ms > 100",
        )
        .await;
        assert_eq!(columns, strings(&["requests.e2e_ms", "requests.tenant"]));
        let accessed = engine
            .accessed_data("SELECT model FROM requests WHERE session_id = 's-1'")
            .await
            .unwrap();
        assert_eq!(
            accessed.personal_fields(),
            strings(&["requests.session_id"])
        );
    }

    #[tokio::test]
    async fn a_join_reads_columns_of_both_tables() {
        let (_dir, engine) = engine();
        let (tables, columns) = accessed(
            &engine,
            "SELECT r.model, l.body FROM requests r JOIN logs l ON r.request_id = l.request_id \
             WHERE l.severity = 'ERROR'",
        )
        .await;
        assert_eq!(tables, strings(&["logs", "requests"]));
        assert_eq!(
            columns,
            strings(&[
                "logs.body",
                "logs.request_id",
                "logs.severity",
                "requests.model",
                "requests.request_id",
            ])
        );
    }

    #[tokio::test]
    async fn json_get_reads_attrs() {
        let (_dir, engine) = engine();
        let accessed = engine
            .accessed_data("SELECT json_get(attrs, 'user.email') AS who FROM spans")
            .await
            .unwrap();
        assert_eq!(
            accessed.columns.into_iter().collect::<Vec<_>>(),
            strings(&["spans.attrs"])
        );
    }

    #[tokio::test]
    async fn subqueries_and_ctes_are_walked() {
        let (_dir, engine) = engine();
        let (tables, columns) = accessed(
            &engine,
            "WITH slow AS (SELECT request_id FROM requests WHERE e2e_ms > 1000) \
             SELECT count(*) FROM logs WHERE request_id IN (SELECT request_id FROM slow)",
        )
        .await;
        assert_eq!(tables, strings(&["logs", "requests"]));
        assert_eq!(
            columns,
            strings(&["logs.request_id", "requests.e2e_ms", "requests.request_id"])
        );
        let (tables, columns) = accessed(
            &engine,
            "SELECT model FROM requests WHERE e2e_ms > (SELECT avg(latency_ms) FROM tokens)",
        )
        .await;
        assert_eq!(tables, strings(&["requests", "tokens"]));
        assert_eq!(
            columns,
            strings(&["requests.e2e_ms", "requests.model", "tokens.latency_ms"])
        );
    }

    #[tokio::test]
    async fn audited_queries_write_one_line_without_literals() {
        let (dir, engine) = engine();
        let audit = Arc::new(AccessAudit::for_data_dir(&dir.path().join("data")));
        let engine = engine.with_access_audit(Arc::clone(&audit));
        let context = AccessContext {
            actor: "alice".into(),
            client: Some(audit.client_label("10.1.2.3".parse().unwrap())),
            surface: Surface::ApiQuery,
            what: None,
        };
        let sql = "SELECT count(*) AS n FROM requests WHERE tenant = 'secret-tenant-42'";
        let audited = engine.sql_audited(sql, Some(10), &context).await;
        assert_eq!(audited.result.unwrap().row_count(), 1);
        assert!(
            matches!(audited.audit, AuditStatus::Recorded),
            "{:?}",
            audited.audit
        );
        // a planned query that fails is recorded with its error kind
        let failing = engine
            .sql_audited(
                "SELECT count(*) AS n, max(attrs) AS a FROM requests",
                Some(0),
                &context,
            )
            .await;
        assert!(failing.result.is_err());
        assert!(matches!(failing.audit, AuditStatus::Recorded));
        // a statement that does not parse read nothing: a line without tables, so refused
        // attempts show in the audit too
        let unparsed = engine.sql_audited("SELEC nonsense", None, &context).await;
        assert!(matches!(unparsed.audit, AuditStatus::Recorded));

        let text = std::fs::read_to_string(audit.path()).unwrap();
        assert!(!text.contains("secret-tenant-42"), "{text}");
        assert!(!text.contains("10.1.2.3"), "{text}");
        let (records, unreadable) = read_records(audit.path()).unwrap();
        assert_eq!((records.len(), unreadable), (3, 0), "{text}");
        let first = &records[0];
        assert_eq!(first.actor, "alice");
        assert_eq!(first.client.as_deref(), Some("<IP>"));
        assert_eq!(first.surface, Surface::ApiQuery);
        assert_eq!(first.tables, strings(&["requests"]));
        assert_eq!(first.columns, strings(&["requests.tenant"]));
        assert_eq!(first.personal_fields, strings(&["requests.tenant"]));
        assert_eq!((first.rows, first.outcome.as_str()), (1, "ok"));
        assert_eq!(
            first.query_hash.as_deref(),
            Some(sha256_hex(sql.as_bytes()).as_str())
        );
        assert!(chrono::DateTime::parse_from_rfc3339(&first.ts).is_ok());
        assert_eq!(records[1].outcome, "bad_request");
        assert_eq!(records[1].rows, 0);
        assert!(
            records[1]
                .personal_fields
                .contains(&"requests.attrs".to_string())
        );
        assert!(records[2].tables.is_empty() && records[2].columns.is_empty());
        assert_eq!(records[2].outcome, "bad_request");
        assert_eq!(audit.writes_ok(), 3);
    }

    #[tokio::test]
    async fn tracking_collects_every_statement() {
        let (_dir, engine) = engine();
        let engine = engine.with_access_tracking();
        engine.sql("SELECT body FROM logs").await.unwrap();
        engine
            .sql("SELECT count(*) FROM requests WHERE model = 'm'")
            .await
            .unwrap();
        let tracked = engine.tracked_access();
        assert_eq!(tracked.statements, 2);
        assert_eq!(tracked.rows, 1);
        assert_eq!(
            tracked.accessed.columns.into_iter().collect::<Vec<_>>(),
            strings(&["logs.body", "requests.model"])
        );
    }

    fn record(actor: &str, rows: u64) -> AccessRecord {
        AccessRecord::new(
            &AccessContext {
                actor: actor.to_string(),
                client: None,
                surface: Surface::CliQuery,
                what: None,
            },
            &AccessedData::default(),
            rows,
            Ok(()),
            Some(sha256_hex(b"SELECT 1")),
        )
    }

    #[test]
    fn rotation_keeps_the_newest_lines_within_the_limits() {
        let dir = tempfile::tempdir().unwrap();
        let max_bytes = 1_000;
        let audit =
            AccessAudit::at(dir.path().join("audit").join(ACCESS_FILE)).with_rotation(max_bytes, 2);
        for sequence in 0..100 {
            audit.append(&record("bob", sequence)).unwrap();
        }
        assert!(audit.rotated(1).exists() && audit.rotated(2).exists());
        assert!(!audit.rotated(3).exists(), "only `keep` old files stay");
        let mut kept = Vec::new();
        for path in [
            audit.rotated(2),
            audit.rotated(1),
            audit.path().to_path_buf(),
        ] {
            let bytes = std::fs::metadata(&path).unwrap().len();
            assert!(bytes <= max_bytes, "{} has {bytes} bytes", path.display());
            let (records, unreadable) = read_records(&path).unwrap();
            assert_eq!(unreadable, 0);
            kept.extend(records.into_iter().map(|r| r.rows));
        }
        // oldest file first: the kept lines are exactly the newest ones, in order
        let first = *kept.first().unwrap();
        assert_eq!(kept, (first..100).collect::<Vec<_>>());
        assert!(kept.len() >= 6, "{kept:?}");
        assert_eq!(audit.writes_ok(), 100);
    }

    #[test]
    fn concurrent_writers_append_whole_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit").join(ACCESS_FILE);
        let (threads, per_thread) = (8, 200);
        std::thread::scope(|scope| {
            for thread in 0..threads {
                let path = path.clone();
                scope.spawn(move || {
                    // one writer per thread, as separate processes would have: only O_APPEND
                    // and the single write keep the lines apart
                    let audit = AccessAudit::at(path).with_rotation(0, 0);
                    let actor = format!("{thread}-{}", "x".repeat(100));
                    for sequence in 0..per_thread {
                        audit.append(&record(&actor, sequence)).unwrap();
                    }
                });
            }
        });
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.ends_with('\n'));
        let mut per_actor = std::collections::BTreeMap::<String, Vec<u64>>::new();
        for line in text.lines() {
            let record: AccessRecord =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("torn line ({e}): {line}"));
            per_actor.entry(record.actor).or_default().push(record.rows);
        }
        assert_eq!(per_actor.len(), threads);
        for sequences in per_actor.values() {
            assert_eq!(sequences, &(0..per_thread).collect::<Vec<_>>());
        }
    }

    #[test]
    fn a_failed_write_is_an_error_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        // the audit's folder is a file: nothing can be created under it
        let blocker = dir.path().join("audit");
        std::fs::write(&blocker, b"not a folder").unwrap();
        let audit = AccessAudit::at(blocker.join(ACCESS_FILE));
        assert!(audit.append(&record("carol", 1)).is_err());
        assert_eq!((audit.writes_ok(), audit.writes_failed()), (0, 1));
    }

    #[test]
    fn clients_are_masked_or_keyed_hashed_never_raw() {
        let dir = tempfile::tempdir().unwrap();
        let masked = AccessAudit::for_data_dir(dir.path());
        assert_eq!(masked.client_label("192.0.2.7".parse().unwrap()), "<IP>");
        let hashed = AccessAudit::for_data_dir(dir.path())
            .with_client_hasher(Arc::new(|value: &str| Some(format!("{:x}", value.len()))));
        // IPv4-mapped IPv6 is the same client as the IPv4 address
        assert_eq!(
            hashed.client_label("192.0.2.7".parse().unwrap()),
            "<IP:h:9>"
        );
        assert_eq!(
            hashed.client_label("::ffff:192.0.2.7".parse().unwrap()),
            "<IP:h:9>"
        );
    }

    #[test]
    fn actors_come_from_headers_or_the_os_user() {
        let headers = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(key, _)| *key == name)
                    .map(|(_, value)| value.to_string())
            }
        };
        assert_eq!(
            actor_from_headers(headers(&[
                ("x-infersight-user", "script"),
                ("x-auth-request-user", "bob"),
                ("x-forwarded-user", " alice "),
            ])),
            "alice"
        );
        assert_eq!(
            actor_from_headers(headers(&[
                ("x-forwarded-user", ""),
                ("x-auth-request-user", "bob")
            ])),
            "bob"
        );
        assert_eq!(actor_from_headers(headers(&[])), "anonymous");
        assert_eq!(
            actor_from_headers(headers(&[("x-infersight-user", "a\nb")])),
            "a?b"
        );
        let env = |user: Option<&'static str>, logname: Option<&'static str>| {
            move |name: &str| match name {
                "USER" => user.map(String::from),
                "LOGNAME" => logname.map(String::from),
                _ => None,
            }
        };
        assert_eq!(cli_actor_from(env(Some("dana"), Some("x"))), "cli:dana");
        assert_eq!(cli_actor_from(env(None, Some("erin"))), "cli:erin");
        assert_eq!(cli_actor_from(env(None, None)), "cli:unknown");
    }

    #[test]
    fn sha256_matches_the_fips_vectors() {
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            sha256_hex(b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
        );
        assert_eq!(
            sha256_hex(&vec![b'a'; 1_000_000]),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"
        );
    }
}
