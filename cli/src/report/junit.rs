//! The sweep as a JUnit report (`faultline sweep --junit`), for CI systems that read one.

use faultline_sim::sweep::SweepSummary;

/// XML needs the same escaping as HTML attributes and text.
use super::markup::escape as xml_escape;

/// A JUnit report: one test case per run when the summary kept them, otherwise one per
/// scenario plus one per failing run.
pub fn junit(summary: &SweepSummary) -> String {
    let mut cases = String::new();
    let mut tests = 0usize;
    let mut case = |class: &str, name: &str, failure: Option<(String, String)>| {
        tests += 1;
        cases.push_str(&format!(
            "  <testcase classname=\"{}\" name=\"{}\" time=\"0\">",
            xml_escape(class),
            xml_escape(name)
        ));
        if let Some((message, replay)) = failure {
            cases.push_str(&format!(
                "<failure message=\"{}\">replay: {}</failure>",
                xml_escape(&message),
                xml_escape(&replay)
            ));
        }
        cases.push_str("</testcase>\n");
    };
    match &summary.cases {
        Some(runs) => {
            for (scenario, seed, failure) in runs {
                let replay = format!("faultline run {scenario} --seed {seed}");
                case(scenario, &format!("seed {seed}"), failure.clone().map(|m| (m, replay)));
            }
        }
        None => {
            for (name, s) in &summary.scenarios {
                case(name, &format!("{} runs", s.runs), None);
            }
            for f in &summary.failures {
                let message = f.violations.iter().map(|v| format!("{}: {}", v.invariant, v.detail)).collect::<Vec<_>>();
                case(&f.scenario, &format!("seed {}", f.seed), Some((message.join("; "), f.replay.clone())));
            }
        }
    }
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuite name=\"faultline sweep\" tests=\"{tests}\" failures=\"{}\">\n{cases}</testsuite>\n",
        summary.failures.len()
    )
}
