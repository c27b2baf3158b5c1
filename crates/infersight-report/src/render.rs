//! Renders a `Report` as Markdown or one self-contained HTML file with the SVG charts.
