"""The official `anthropic` SDK as the referee of a Messages API stream.

`python referee_anthropic.py BASE_URL` makes one streaming `messages.create` request and
prints, as one JSON object in the terms `faultline llm conform` compares (see `referee.py`),
what the SDK's own events carry: text and thinking deltas joined, the refusal's explanation,
the tool calls (`tool_use` blocks with their `input_json_delta` fragments joined), the stop
reason in OpenAI's words, the usage (the prompt is every input token, cached or not) and the
error event the SDK raised.
"""
import json
import sys

import anthropic

client = anthropic.Anthropic(base_url=sys.argv[1], api_key="sk-ant-referee-not-real", max_retries=0)
out = {"text": "", "reasoning": "", "refusal": "", "tool_calls": [], "finish": None, "usage": None, "error": None}
calls = {}
order = []
usage = {"input": 0, "output": 0}
FINISH = {"end_turn": "stop", "stop_sequence": "stop", "pause_turn": "stop", "refusal": "stop",
          "tool_use": "tool_calls", "max_tokens": "length"}


def field(obj, name):
    value = getattr(obj, name, None)
    if value is None and getattr(obj, "model_extra", None):
        value = obj.model_extra.get(name)
    return value


def count(u):
    """Every input token, cached or not, and the output tokens, when they came."""
    if u is None:
        return
    inputs = [field(u, k) for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")]
    if any(v is not None for v in inputs):
        usage["input"] = sum(v or 0 for v in inputs)
    if field(u, "output_tokens") is not None:
        usage["output"] = field(u, "output_tokens")
    out["usage"] = [usage["input"], usage["output"], usage["input"] + usage["output"]]


try:
    stream = client.messages.create(
        model="m", max_tokens=1024, messages=[{"role": "user", "content": "hi"}], stream=True
    )
    for event in stream:
        kind = event.type
        if kind == "message_start":
            count(event.message.usage)
        elif kind == "content_block_start":
            block = event.content_block
            if block.type == "tool_use":
                calls[event.index] = {"id": block.id, "name": block.name, "arguments": ""}
                order.append(event.index)
        elif kind == "content_block_delta":
            delta = event.delta
            if delta.type == "text_delta":
                out["text"] += delta.text
            elif delta.type == "thinking_delta":
                out["reasoning"] += delta.thinking
            elif delta.type == "input_json_delta" and event.index in calls:
                calls[event.index]["arguments"] += delta.partial_json
        elif kind == "message_delta":
            reason = event.delta.stop_reason
            out["finish"] = FINISH.get(reason, reason)
            if reason == "refusal":
                details = field(event.delta, "stop_details")
                said = None
                if details is not None:
                    said = details.get("explanation") if isinstance(details, dict) else field(details, "explanation")
                    if said is None:
                        said = details.get("category") if isinstance(details, dict) else field(details, "category")
                out["refusal"] = said or "refusal"
            count(event.usage)
except anthropic.APIError as e:
    body = e.body if isinstance(e.body, dict) else {}
    error = body.get("error") if isinstance(body.get("error"), dict) else body
    out["error"] = {"code": None, "message": str(error.get("message") or e.message)}

for index in order:
    # A tool_use that streamed no fragments keeps its (empty) input.
    calls[index]["arguments"] = calls[index]["arguments"] or "{}"
out["tool_calls"] = [calls[index] for index in order]
print(json.dumps(out))
