//! The conversation a request sends, rebuilt from committed records: what the model reads
//! back of a session (a provider refuses a tool result whose call it was never shown).

use faultline_runtime::testing::History;
use serde_json::json;

use crate::support::*;

#[test]
fn a_tool_turn_is_sent_back_as_the_user_message_the_calls_their_results_and_the_answer() {
    let mut log = Log::default();
    log.tool_turn(1);
    let history = History::from_records(&log.records);
    assert_eq!(
        history.messages(),
        [
            json!({"role": "user", "content": "send hi"}),
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "send", "arguments": "{}"}}
            ]}),
            json!({"role": "tool", "tool_call_id": "c1", "content": "ok"}),
            json!({"role": "assistant", "content": "sent"}),
        ]
    );
    assert_eq!(history.last_turn, 1);
    assert_eq!(history.last_header, Some(request_header().header));
}
