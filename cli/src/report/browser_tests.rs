//! The HTML timeline, rendered by a real browser: headless Chromium loads the page and dumps
//! the DOM after its script ran. `.ci/run` installs Chromium and sets
//! `FAULTLINE_REQUIRE_BROWSER=1`; elsewhere a missing browser skips with a printed reason.

use std::path::Path;
use std::process::Command;

use faultline_sim::run;
use faultline_sim::Scenario;

use super::html::run_page;

/// Longest a page may take to render, in seconds.
const BROWSER_TIMEOUT_S: u32 = 90;

fn browser() -> Option<&'static str> {
    let found = ["chromium", "chromium-browser", "google-chrome"].into_iter().find(|name| {
        Command::new("sh").args(["-c", &format!("command -v {name}")]).output().is_ok_and(|o| o.status.success())
    });
    if found.is_none() {
        assert!(
            std::env::var_os("FAULTLINE_REQUIRE_BROWSER").is_none(),
            "FAULTLINE_REQUIRE_BROWSER is set but no chromium is installed"
        );
        eprintln!("skipped: no chromium on PATH (`apt-get install chromium`)");
    }
    found
}

/// The DOM of `html` after Chromium loaded it and ran its script.
fn rendered_dom(html: &str) -> Option<String> {
    let browser = browser()?;
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("page.html");
    std::fs::write(&page, html).unwrap();
    Some(dump_dom(browser, &page, dir.path()))
}

fn dump_dom(browser: &str, page: &Path, profile: &Path) -> String {
    let output = Command::new("timeout")
        .arg(BROWSER_TIMEOUT_S.to_string())
        .arg(browser)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"])
        .arg(format!("--user-data-dir={}", profile.join("profile").display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("run the browser");
    assert!(output.status.success(), "the browser failed: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).expect("a UTF-8 DOM")
}

fn assert_has(dom: &str, what: &str) {
    assert!(dom.contains(what), "the rendered page lacks {what:?}");
}

#[test]
fn the_timeline_of_a_sigkill_shows_the_crash_the_restart_the_repair_and_the_unknown_closer() {
    let result = run(&Scenario::built_in("sigkill-after-side-effect").unwrap(), 0);
    let Some(dom) = rendered_dom(&run_page(&result)) else { return };
    assert_has(&dom, r#"data-ready="yes""#); // the script ran to its end
    for lane in ["agent#1", "agent#2", "model", "gateway", "disk", "faults"] {
        assert_has(&dom, &format!(r#"data-lane="{lane}""#));
    }
    assert_has(&dom, r#"class="mark crash""#);
    assert_has(&dom, "crash at after-side-effect (SIGKILL)");
    assert_has(&dom, r#"class="mark start""#);
    assert_has(&dom, "crash repair wrote seq");
    assert_has(&dom, r#"class="mark receipt""#);
    assert_has(&dom, r#"class="mark exchange""#);
    let closer = dom.lines().flat_map(|l| l.split("<tr ")).find(|row| row.contains("TOOL_OUTCOME_UNKNOWN"));
    assert!(closer.is_some_and(|row| row.starts_with(r#"class="repair"#)), "the unknown closer is marked as repair");
    assert_has(&dom, r#"data-verdict="PASS""#);
}

/// A planted bug's failing run shows the violated invariant on the page and on the timeline.
#[cfg(feature = "planted-bugs")]
#[test]
fn planted_bug_timeline_shows_the_violated_invariant() {
    let info = faultline_sim::REGRESSION_SCENARIOS.iter().find(|s| s.name == "at-most-once-unknown-claimable").unwrap();
    let scenario = Scenario::parse(info.text).unwrap();
    let regression = scenario.regression.clone().unwrap();
    faultline_runtime::testing::bugs::plant(&[regression.bug.as_str()]);
    let result = run(&scenario, regression.seed);
    faultline_runtime::testing::bugs::plant(&[]);
    assert!(!result.passed());
    let Some(dom) = rendered_dom(&run_page(&result)) else { return };
    assert_has(&dom, r#"data-ready="yes""#);
    assert_has(&dom, r#"data-verdict="FAIL""#);
    assert_has(&dom, r#"data-invariant="at-most-once""#);
    assert_has(&dom, r#"class="mark violation""#);
    assert_has(&dom, "VIOLATED at-most-once");
}
