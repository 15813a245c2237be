//! The reports a run or a sweep writes for people and CI: the self-contained HTML page (a
//! run's timeline, a sweep's coverage grid) and JUnit XML.

pub(crate) mod html;
pub(crate) mod junit;
mod markup;
// The HTML page rendered by a real browser (headless Chromium).
#[cfg(test)]
#[allow(clippy::disallowed_methods, clippy::disallowed_types, clippy::print_stderr)] // a real browser and real files
mod browser_tests;
