//! Errors of the query layer. DataFusion and store errors are classified once, here, so the HTTP
//! API and the CLI answer a bad query with 400 / exit 2 and a broken store with 5xx / exit 1.

use datafusion::error::DataFusionError;
use infersight_model::ErrorKind;
use infersight_store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// The query is wrong (syntax, unknown column, not read-only, bad argument).
    #[error("{0}")]
    BadRequest(String),
    /// The store cannot serve the query right now (closed, locked); retry later.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// A bug or an environment failure (i/o, corrupt segment).
    #[error("internal query error: {0}")]
    Internal(String),
}

impl QueryError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            QueryError::BadRequest(_) => ErrorKind::BadRequest,
            QueryError::Unavailable(_) => ErrorKind::Unavailable,
            QueryError::Internal(_) => ErrorKind::Internal,
        }
    }
}

/// Message of a DataFusion error without the backtrace and with a lowercase first word, matching
/// the message style of the other crates.
fn clean_message(error: &DataFusionError) -> String {
    match error.find_root() {
        // "sql parser error: Expected: ..., found: ... at Line: 1, Column: 8"
        DataFusionError::SQL(parser_error, _) => parser_error.to_string(),
        root => lowercase_first_word(root.strip_backtrace().trim()),
    }
}

/// "Error during planning" -> "error during planning"; acronyms ("SQL", "IO") stay as they are.
fn lowercase_first_word(text: &str) -> String {
    let mut chars = text.chars();
    match (chars.next(), chars.next()) {
        (Some(first), second) if second.is_none_or(|c| !c.is_uppercase()) => {
            first.to_lowercase().chain(text.chars().skip(1)).collect()
        }
        _ => text.to_string(),
    }
}

impl From<StoreError> for QueryError {
    fn from(error: StoreError) -> Self {
        let message = error.to_string();
        match error.kind() {
            ErrorKind::Unavailable => QueryError::Unavailable(message),
            // the store refuses the request itself (e.g. rollups are off): the caller's to fix
            ErrorKind::BadRequest => QueryError::BadRequest(message),
            ErrorKind::TooLarge | ErrorKind::NotFound => QueryError::Internal(message),
            ErrorKind::Internal => QueryError::Internal(message),
        }
    }
}

impl From<DataFusionError> for QueryError {
    fn from(error: DataFusionError) -> Self {
        // A store error raised inside a table scan travels as `External`, possibly wrapped in
        // context; it decides the kind, whatever DataFusion wrapped around it.
        if let Some(store_error) = find_store_error(&error) {
            let message = store_error.to_string();
            return match store_error.kind() {
                ErrorKind::Unavailable => QueryError::Unavailable(message),
                _ => QueryError::Internal(message),
            };
        }
        let message = clean_message(&error);
        match error.find_root() {
            DataFusionError::SQL(..)
            | DataFusionError::Plan(_)
            | DataFusionError::SchemaError(..)
            | DataFusionError::NotImplemented(_)
            | DataFusionError::Configuration(_)
            | DataFusionError::Execution(_)
            | DataFusionError::ArrowError(..) => QueryError::BadRequest(message),
            DataFusionError::ResourcesExhausted(_) => QueryError::Unavailable(message),
            _ => QueryError::Internal(message),
        }
    }
}

fn find_store_error(error: &DataFusionError) -> Option<&StoreError> {
    let mut current = error;
    loop {
        match current {
            DataFusionError::External(inner) => return inner.downcast_ref::<StoreError>(),
            DataFusionError::Context(_, inner) | DataFusionError::Diagnostic(_, inner) => {
                current = inner
            }
            DataFusionError::Shared(inner) => current = inner,
            DataFusionError::Collection(errors) => return errors.iter().find_map(find_store_error),
            _ => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_errors_keep_their_kind_through_datafusion() {
        let wrapped = DataFusionError::Context(
            "scan".into(),
            Box::new(DataFusionError::External(Box::new(StoreError::Closed))),
        );
        let error = QueryError::from(wrapped);
        assert_eq!(error.kind(), ErrorKind::Unavailable, "{error}");
    }

    #[test]
    fn plan_errors_are_bad_requests_with_lowercase_messages() {
        let error = QueryError::from(DataFusionError::Plan("Unknown column x".into()));
        assert_eq!(error.kind(), ErrorKind::BadRequest);
        assert_eq!(error.to_string(), "error during planning: Unknown column x");
    }
}
