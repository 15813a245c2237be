"""The official `google-genai` SDK as the referee of a Gemini `streamGenerateContent` stream.

`python referee_gemini.py BASE_URL` makes one `generate_content_stream` request and prints, as
one JSON object in the terms `faultline llm conform` compares (see `referee.py`), what the
SDK's own objects carry: text and thought parts joined, the whole `functionCall` parts (their
arguments as compact JSON, keys in the order they came), the finish reason in OpenAI's words (`STOP` with a
call is `tool_calls`; a safety, recitation or other stop is a failure, `content_filter`), the
usage (the completion counts the thoughts) and the error the SDK raised.
"""
import json
import sys

from google import genai
from google.genai import errors, types

client = genai.Client(
    api_key="referee-not-real",
    http_options=types.HttpOptions(base_url=sys.argv[1], api_version="v1beta"),
)
out = {"text": "", "reasoning": "", "refusal": "", "tool_calls": [], "finish": None, "usage": None, "error": None}

try:
    for chunk in client.models.generate_content_stream(model="m", contents="hi"):
        for candidate in chunk.candidates or []:
            for part in (candidate.content.parts if candidate.content else None) or []:
                if part.function_call is not None:
                    call = part.function_call
                    args = json.dumps(call.args or {}, separators=(",", ":"), ensure_ascii=False)
                    out["tool_calls"].append({"id": call.id, "name": call.name, "arguments": args})
                elif part.text:
                    out["reasoning" if part.thought else "text"] += part.text
            if candidate.finish_reason is not None:
                reason = getattr(candidate.finish_reason, "value", str(candidate.finish_reason))
                if reason == "STOP":
                    out["finish"] = "tool_calls" if out["tool_calls"] else "stop"
                elif reason == "MAX_TOKENS":
                    out["finish"] = "length"
                else:
                    out["finish"] = "content_filter"
        u = chunk.usage_metadata
        if u is not None and u.total_token_count is not None:
            prompt = u.prompt_token_count or 0
            completion = (u.candidates_token_count or 0) + (u.thoughts_token_count or 0)
            out["usage"] = [prompt, completion, u.total_token_count]
except errors.APIError as e:
    out["error"] = {"code": e.code, "message": str(e.message)}

print(json.dumps(out))
