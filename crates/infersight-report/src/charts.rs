//! SVG charts drawn from `ChartData`, self-contained (no scripts, no external fonts), for the HTML
//! report and the UI.
