#!/usr/bin/env python3
"""Test referee MCP server for the Rust MCP client (official `mcp` Python SDK 2.x).

    referee_server.py --transport stdio|http --effects FILE [--port-file FILE] [--expire-after-calls N]

Every effect is appended to FILE as one JSON line, fsynced before the tool replies.
Exercised by check_referee.py in this directory.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import sys

import anyio
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import ToolAnnotations
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from starlette.datastructures import Headers
from starlette.responses import JSONResponse

EXEC_META_KEY = "faultline/execution_id"
EXEC_HEADER = "faultline-execution-id"
SESSION_HEADER = "mcp-session-id"

parser = argparse.ArgumentParser()
parser.add_argument("--transport", choices=["stdio", "http"], required=True)
parser.add_argument("--effects", required=True)
parser.add_argument("--port-file")
parser.add_argument("--expire-after-calls", type=int)
args = parser.parse_args()

logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="referee %(levelname)s %(name)s: %(message)s")


def append_line(obj: dict) -> None:
    """Append one JSON line to the effects file; O_APPEND + fsync before returning."""
    fd = os.open(args.effects, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(obj) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def execution_id(ctx: Context) -> object:
    meta = (ctx.request_context.params or {}).get("_meta") or {}  # raw wire params
    return meta.get(EXEC_META_KEY)


def effect(tool: str, note: str, ctx: Context) -> None:
    headers = ctx.headers  # Starlette request headers over HTTP, None over stdio
    append_line({"tool": tool, "note": note, "execution_id": execution_id(ctx),
                 "header": headers.get(EXEC_HEADER) if headers is not None else None, "pid": os.getpid()})


mcp = MCPServer("faultline-referee")
# structured_output=False: plain text content only (no outputSchema / structuredContent).
tool = lambda **kw: mcp.tool(structured_output=False, **kw)  # noqa: E731


@tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False))
async def record(note: str, ctx: Context) -> str:
    """Record an effect."""
    effect("record", note, ctx)
    return f"recorded {note}"


@tool()
async def record_then_die(note: str, ctx: Context) -> str:
    """Record an effect, then SIGKILL the server before replying."""
    effect("record_then_die", note, ctx)
    os.kill(os.getpid(), signal.SIGKILL)
    return "unreachable"


@tool()
async def record_then_hang(note: str, ctx: Context) -> str:
    """Record an effect, then wait forever (until cancelled)."""
    effect("record_then_hang", note, ctx)
    try:
        await anyio.sleep_forever()
    except anyio.get_cancelled_exc_class():
        # Only a client cancel counts (session teardown / shutdown also cancel us): a notifications/cancelled
        # (the dispatcher sets cancel_requested before cancelling our scope), or, on the 2026-07-28 stateless
        # HTTP wire, the client closing the response stream (that era's only cancellation spelling).
        dctx = getattr(ctx.request_context.session, "_request_outbound", None)
        modern_http = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS and ctx.headers is not None
        if dctx is None or dctx.cancel_requested.is_set() or modern_http:
            append_line({"tool": "record_then_hang", "cancelled": note, "execution_id": execution_id(ctx)})
        raise
    return "unreachable"


@tool(annotations=ToolAnnotations(read_only_hint=True))
async def lookup(key: str) -> str:
    """Read-only lookup; no effect."""
    return f"value of {key}"


@tool()
async def fail(note: str) -> str:
    """Always fails (isError: true); no effect."""
    raise ToolError(f"fail: {note}")


# ---- session expiry (HTTP only) -------------------------------------------------------------
completed: dict[str, int] = {}  # session id -> completed tools/call count
expired: set[str] = set()  # sessions whose N-th tools/call completed: answer 404 from now on
reaped: set[str] = set()  # expired sessions already terminated inside the SDK


async def count_tool_calls(ctx, call_next):
    """MCP-level middleware: count completed tools/call per session, mark expiry at the N-th."""
    result = await call_next(ctx)  # an exception (JSON-RPC error) or cancellation is not "completed"
    sid = ctx.request.headers.get(SESSION_HEADER) if ctx.request is not None else None
    if ctx.method == "tools/call" and sid and args.expire_after_calls:
        completed[sid] = completed.get(sid, 0) + 1
        if completed[sid] >= args.expire_after_calls:
            expired.add(sid)  # before the reply is written, so the client can never beat us
    return result


class ExpiryGate:
    """ASGI front: 404 for expired sessions, and terminate them in the SDK via an internal DELETE."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        sid = Headers(scope=scope).get(SESSION_HEADER) if scope["type"] == "http" else None
        if sid in expired:
            body = {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "Session not found"}}
            await JSONResponse(body, status_code=404)(scope, receive, send)
            return
        await self.app(scope, receive, send)
        if sid in expired and sid not in reaped:
            reaped.add(sid)  # the SDK's own termination path: transport.terminate() + manager discards it
            await self.app(dict(scope, method="DELETE", headers=[(b"host", b"127.0.0.1"),
                           (SESSION_HEADER.encode(), sid.encode())]), _empty_body, _discard)


async def _empty_body():
    return {"type": "http.request", "body": b"", "more_body": False}


async def _discard(message):
    pass


async def serve_http() -> None:
    if args.expire_after_calls:
        mcp.middleware.append(count_tool_calls)
    app = ExpiryGate(mcp.streamable_http_app(
        streamable_http_path="/mcp",
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False)))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, log_level="warning", access_log=False,
                                           lifespan="on"))
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: server.serve(sockets=[sock]))
        while not server.started:
            await anyio.sleep(0.01)
        if args.port_file:
            tmp = f"{args.port_file}.tmp.{os.getpid()}"
            with open(tmp, "w") as f:
                f.write(f"{port}\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, args.port_file)
        print(f"referee: listening on http://127.0.0.1:{port}/mcp", file=sys.stderr, flush=True)


if __name__ == "__main__":
    if args.transport == "stdio":
        anyio.run(mcp.run_stdio_async)
    else:
        anyio.run(serve_http)
