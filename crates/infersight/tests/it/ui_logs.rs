//! The logs page of the web UI in headless Chromium: search, label filters, template rates and
//! the lineage of a record.
