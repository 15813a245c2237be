"""The official `openai` SDK as a foreign client of `faultline model-server`.

Run by tests/it/llm.rs: `python openai_conformance.py BASE_URL`. Prints one JSON object with
what the SDK parsed; the Rust test asserts it. The script's responses, in order: a text
stream, a tool-call stream, a 429 with Retry-After, a non-streaming completion, then the
provider shapes the server can speak: a refusal, Mistral's tool calls without index,
OpenRouter's reasoning with the usage after the finish.
"""
import json
import sys

import openai

base_url = sys.argv[1]
client = openai.OpenAI(base_url=base_url, api_key="sk-conformance-not-real", max_retries=0)
messages = [{"role": "user", "content": "hi"}]
out = {}

text = []
for chunk in client.chat.completions.create(model="deepseek-chat", messages=messages, stream=True):
    if chunk.choices and chunk.choices[0].delta.content:
        text.append(chunk.choices[0].delta.content)
    if chunk.choices and chunk.choices[0].finish_reason:
        out["text_finish"] = chunk.choices[0].finish_reason
    out["text_model"] = chunk.model
out["text"] = "".join(text)

calls = {}
for chunk in client.chat.completions.create(model="deepseek-chat", messages=messages, stream=True):
    for call in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
        entry = calls.setdefault(call.index, {"id": None, "name": None, "arguments": ""})
        entry["id"] = entry["id"] or call.id
        if call.function and call.function.name:
            entry["name"] = call.function.name
        if call.function and call.function.arguments:
            entry["arguments"] += call.function.arguments
out["tool_calls"] = [calls[i] for i in sorted(calls)]

try:
    client.chat.completions.create(model="deepseek-chat", messages=messages, stream=True)
    out["rate_limit"] = None
except openai.RateLimitError as e:
    out["rate_limit"] = {"status": e.status_code, "retry_after": e.response.headers.get("retry-after")}

completion = client.chat.completions.create(model="deepseek-chat", messages=messages, stream=False)
out["whole"] = {
    "object": completion.object,
    "content": completion.choices[0].message.content,
    "finish": completion.choices[0].finish_reason,
    "total_tokens": completion.usage.total_tokens if completion.usage else None,
}
refusal = []
for chunk in client.chat.completions.create(model="gpt-4o", messages=messages, stream=True):
    if chunk.choices and chunk.choices[0].delta.refusal:
        refusal.append(chunk.choices[0].delta.refusal)
    if chunk.choices and chunk.choices[0].finish_reason:
        out["refusal_finish"] = chunk.choices[0].finish_reason
out["refusal"] = "".join(refusal)

mistral = []
for chunk in client.chat.completions.create(model="mistral-small-latest", messages=messages, stream=True):
    for call in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
        mistral.append({"index": getattr(call, "index", None), "id": call.id, "name": call.function.name,
                        "arguments": call.function.arguments})
out["mistral_calls"] = mistral

reasoning, usage = [], None
stream = client.chat.completions.create(model="openrouter", messages=messages, stream=True,
                                        stream_options={"include_usage": True})
for chunk in stream:
    if chunk.choices:
        extra = chunk.choices[0].delta.model_extra or {}
        if extra.get("reasoning"):
            reasoning.append(extra["reasoning"])
    if chunk.usage:
        usage = chunk.usage.total_tokens
out["openrouter"] = {"reasoning": "".join(reasoning), "total_tokens": usage}
print(json.dumps(out))
