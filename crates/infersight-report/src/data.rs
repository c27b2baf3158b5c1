//! Chart data: the series the report's charts are drawn from, read from the store with SQL for
//! the incident's windows and implicated slices.

use serde::{Deserialize, Serialize};

/// The series behind every chart of the report.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ChartData {}
