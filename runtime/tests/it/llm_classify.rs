//! FAILURE-DEEPSEEK-HTTP's Retry-After rules at their edges: a value that advises no wait
//! (zero, negative, not finite, a date not after now) is ignored, never obeyed as "retry now".

use faultline_runtime::llm::retry_after_ms;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};

/// 2026-01-01T00:00:07Z, in ms since the Unix epoch.
const SEVEN_S_AFTER_2026_MS: u64 = 1_767_225_607_000;

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    pairs
        .iter()
        .map(|(k, v)| (HeaderName::from_bytes(k.as_bytes()).unwrap(), HeaderValue::from_str(v).unwrap()))
        .collect()
}

#[test]
fn retry_after_ms_that_advises_no_wait_falls_back_to_retry_after() {
    for ignored in ["0", "-5", "inf", "-inf", "NaN", "soon"] {
        let advice = retry_after_ms(&headers(&[("retry-after-ms", ignored), ("retry-after", "2")]), 0);
        assert_eq!(advice, Some(2_000), "retry-after-ms {ignored:?} is no advice: the seconds form counts");
        assert_eq!(retry_after_ms(&headers(&[("retry-after-ms", ignored)]), 0), None, "{ignored:?}");
    }
    assert_eq!(retry_after_ms(&headers(&[("retry-after-ms", "0.2")]), 0), Some(1), "rounded up, never to 0");
    assert_eq!(retry_after_ms(&headers(&[("retry-after-ms", " 700 ")]), 0), Some(700));
}

#[test]
fn an_http_date_advises_only_the_time_still_to_come() {
    let date = headers(&[("retry-after", "Thu, 01 Jan 2026 00:00:07 GMT")]);
    assert_eq!(retry_after_ms(&date, SEVEN_S_AFTER_2026_MS - 7_000), Some(7_000));
    assert_eq!(retry_after_ms(&date, SEVEN_S_AFTER_2026_MS - 1), Some(1));
    assert_eq!(retry_after_ms(&date, SEVEN_S_AFTER_2026_MS), None, "a date that is now advises no wait");
    assert_eq!(retry_after_ms(&date, SEVEN_S_AFTER_2026_MS + 1), None, "a date in the past advises no wait");
    for ignored in ["0", "+3", "1.5", "", "tomorrow"] {
        assert_eq!(retry_after_ms(&headers(&[("retry-after", ignored)]), 0), None, "{ignored:?}");
    }
}
