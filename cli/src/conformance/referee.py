"""The official `openai` SDK as the referee of a provider's stream.

`python referee.py BASE_URL` makes one streaming chat-completions request and prints, as one
JSON object, what the SDK's own objects carry: the text, reasoning and refusal deltas joined,
the tool calls (by `index`, or for a provider that sends none, by `id`, a fragment without
either going on with the last call, as the SDK's own accumulators read them), the last
`finish_reason` (null when none came), the last usage, and an error event (the SDK raises it).
`faultline llm conform` compares it with what faultline's adapter read from the same bytes.
"""
import json
import sys

import openai

client = openai.OpenAI(base_url=sys.argv[1], api_key="sk-referee-not-real", max_retries=0)
out = {"text": "", "reasoning": "", "refusal": "", "tool_calls": [], "finish": None, "usage": None, "error": None}
calls = {}
order = []
last = None


def extra(obj, name):
    """A field the SDK's model does not declare (DeepSeek's and OpenRouter's reasoning)."""
    value = getattr(obj, name, None)
    if value is None and getattr(obj, "model_extra", None):
        value = obj.model_extra.get(name)
    return value


try:
    stream = client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    for chunk in stream:
        usage = getattr(chunk, "usage", None)
        if usage is not None:
            out["usage"] = [usage.prompt_tokens, usage.completion_tokens, usage.total_tokens]
        for choice in chunk.choices or []:
            delta = choice.delta
            if delta is not None:
                out["text"] += delta.content or ""
                out["reasoning"] += extra(delta, "reasoning_content") or extra(delta, "reasoning") or ""
                out["refusal"] += getattr(delta, "refusal", None) or ""
                for call in delta.tool_calls or []:
                    index, cid = getattr(call, "index", None), getattr(call, "id", None)
                    key = ("index", index) if index is not None else (("id", cid) if cid else last)
                    if key is None or key not in calls:
                        key = key or ("order", len(order))
                        calls[key] = {"id": None, "name": None, "arguments": ""}
                        order.append(key)
                    last = key
                    entry = calls[key]
                    entry["id"] = entry["id"] or cid
                    function = getattr(call, "function", None)
                    if function is not None:
                        entry["name"] = entry["name"] or getattr(function, "name", None)
                        entry["arguments"] += getattr(function, "arguments", None) or ""
            if choice.finish_reason:
                out["finish"] = choice.finish_reason
except openai.APIError as e:
    body = e.body if isinstance(e.body, dict) else {}
    code = body.get("code") if isinstance(body, dict) else None
    out["error"] = {"code": code, "message": str(body.get("message") or e.message)}

out["tool_calls"] = [calls[key] for key in order]
print(json.dumps(out))
