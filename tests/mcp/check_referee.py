#!/usr/bin/env python3
"""Exercise referee_server.py with the official mcp SDK client (stdio + streamable HTTP).

Run: /tmp/otelvenv/bin/python tests/mcp/check_referee.py   (prints the HTTP wire of one tools/call)
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
import httpx2
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

SERVER = str(Path(__file__).with_name("referee_server.py"))
PY = sys.executable
KEY = "faultline/execution_id"
TMP = Path(tempfile.mkdtemp(prefix="referee-check-"))


def effects(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


async def wait_for(pred, what: str, timeout: float = 10.0) -> None:
    with anyio.fail_after(timeout):
        while not pred():
            await anyio.sleep(0.05)
    print(f"  ok: {what}")


def text(result) -> str:
    return result.content[0].text


async def common_checks(client: Client, eff: Path, header: str | None, pid: int | None) -> None:
    tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == {"record", "record_then_die", "record_then_hang", "lookup", "fail"}, tools
    a = tools["record"].annotations
    assert (a.read_only_hint, a.destructive_hint, a.idempotent_hint) == (False, False, False), a
    assert tools["lookup"].annotations.read_only_hint is True

    r = await client.call_tool("record", {"note": "r1"}, meta={KEY: "exec-1"})
    assert text(r) == "recorded r1" and not r.is_error, r
    r = await client.call_tool("record", {"note": "r2"})  # no _meta -> execution_id null
    line1, line2 = effects(eff)[-2:]
    assert line1 == {"tool": "record", "note": "r1", "execution_id": "exec-1", "header": header,
                     "pid": pid or line1["pid"]}, line1
    assert line2["execution_id"] is None and line2["note"] == "r2", line2
    n = len(effects(eff))
    r = await client.call_tool("lookup", {"key": "k1"})
    assert text(r) == "value of k1" and not r.is_error, r
    r = await client.call_tool("fail", {"note": "f1"})
    assert r.is_error is True, r
    assert len(effects(eff)) == n, "lookup/fail must record nothing"
    print("  ok: tools/list annotations, record/lookup/fail")

    # record_then_hang + cancel: the SDK client sends notifications/cancelled when the caller's scope is cancelled.
    scope = anyio.CancelScope()

    async def hang() -> None:
        with scope:
            await client.call_tool("record_then_hang", {"note": "h1"}, meta={KEY: "exec-h"})
        assert scope.cancelled_caught

    async with anyio.create_task_group() as tg:
        tg.start_soon(hang)
        await wait_for(lambda: any(e.get("note") == "h1" for e in effects(eff)), "hang recorded its effect")
        scope.cancel()
    await wait_for(lambda: {"tool": "record_then_hang", "cancelled": "h1", "execution_id": "exec-h"} in effects(eff),
                   "cancel produced the 'cancelled' line")
    assert text(await client.call_tool("lookup", {"key": "after"})) == "value of after"  # session still usable


async def die_check(make_client, eff: Path, proc_exit) -> None:
    n = len(effects(eff))
    try:
        async with make_client() as client:
            await client.call_tool("record_then_die", {"note": "d1"}, meta={KEY: "exec-d"})
        raise AssertionError("record_then_die returned")
    except AssertionError:
        raise
    except BaseException as e:  # noqa: BLE001 - transport error / ExceptionGroup, whatever the SDK raises
        print(f"  ok: record_then_die call failed with {type(e).__name__}")
    new = effects(eff)[n:]
    assert len(new) == 1 and new[0]["tool"] == "record_then_die" and new[0]["execution_id"] == "exec-d", new
    await proc_exit()
    print("  ok: record_then_die effect fsynced, process killed")


async def check_stdio() -> None:
    print("stdio:")
    eff = TMP / "stdio.jsonl"
    params = StdioServerParameters(command=PY, args=[SERVER, "--transport", "stdio", "--effects", str(eff)])
    for mode in ("legacy", "auto"):  # legacy: initialize handshake; auto (SDK default): server/discover probe
        async with Client(params, mode=mode) as client:
            print(f"  [mode={mode}] negotiated protocol version {client.protocol_version}")
            await common_checks(client, eff, header=None, pid=None)

    async def nothing() -> None:
        pass
    await die_check(lambda: Client(params, mode="legacy"), eff, nothing)

    # Raw: stdout carries only JSON-RPC, and the server exits when stdin closes.
    p = subprocess.Popen([PY, SERVER, "--transport", "stdio", "--effects", str(eff)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    msgs = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25",
             "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "fail", "arguments": {"note": "x"}}},
            {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "record_then_hang",
                                                                          "arguments": {"note": "eof"}}}]
    p.stdin.write("".join(json.dumps(m) + "\n" for m in msgs).encode())
    p.stdin.flush()
    deadline = time.monotonic() + 10
    while not any(e.get("note") == "eof" for e in effects(eff)):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    out, err = p.communicate(timeout=10)  # closes stdin while record_then_hang is pending
    lines = [json.loads(x) for x in out.decode().splitlines()]
    # The SDK answers the still-pending call on EOF: {"id":3,"error":{"code":-32000,"message":"Connection closed"}}
    assert [x.get("id") for x in lines] == [1, 2, 3] and lines[1]["result"]["isError"] is True, out
    assert lines[2]["error"]["code"] == -32000, lines[2]
    assert p.returncode == 0, (p.returncode, err)
    assert not any(e.get("cancelled") == "eof" for e in effects(eff)), "stdin EOF is not a client cancel"
    print(f"  ok: stdout is pure JSON-RPC ({len(lines)} lines), exit {p.returncode} on stdin EOF (with a hung call)")


class HttpServer:
    def __init__(self, name: str, *extra: str):
        self.eff, self.port_file = TMP / f"{name}.jsonl", TMP / f"{name}.port"
        self.proc = subprocess.Popen([PY, SERVER, "--transport", "http", "--effects", str(self.eff),
                                      "--port-file", str(self.port_file), *extra])
        deadline = time.monotonic() + 15
        while not self.port_file.exists():
            assert time.monotonic() < deadline and self.proc.poll() is None, "server did not publish its port"
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{int(self.port_file.read_text())}/mcp"

    def client(self, wire: list | None = None, header: str | None = "hdr-1", mode: str = "legacy") -> Client:
        async def on_request(req):
            if wire is not None:
                wire.append(("request", req.method, dict(req.headers), req.content.decode()))

        async def on_response(resp):
            if wire is not None:
                wire.append(("response", resp.request.method, resp.status_code, dict(resp.headers)))
        http = httpx2.AsyncClient(headers={"faultline-execution-id": header} if header else None,
                                  timeout=httpx2.Timeout(30, read=300),
                                  event_hooks={"request": [on_request], "response": [on_response]})
        return Client(streamable_http_client(self.url, http_client=http), mode=mode)

    async def exited(self) -> None:
        with anyio.fail_after(10):
            while self.proc.poll() is None:
                await anyio.sleep(0.05)
        assert self.proc.returncode == -9, self.proc.returncode

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


async def check_http() -> None:
    print("http:")
    srv = HttpServer("http")
    try:
        wire: list = []
        async with srv.client(wire) as client:
            print(f"  [mode=legacy] negotiated protocol version {client.protocol_version}")
            await common_checks(client, srv.eff, header="hdr-1", pid=srv.proc.pid)
        i = next(i for i, w in enumerate(wire) if w[0] == "request" and '"tools/call"' in w[3])
        print("  wire of one tools/call:")
        print("    POST headers:", {k: v for k, v in wire[i][2].items() if k not in ("content-length",)})
        print("    POST body:   ", wire[i][3])
        resp = next(w for w in wire[i + 1:] if w[0] == "response" and w[1] == "POST")
        print("    response:    ", resp[2], {k: v for k, v in resp[3].items() if k != "date"})
        async with srv.client(mode="auto") as client:  # SDK default: stateless 2026-07-28, no Mcp-Session-Id
            print(f"  [mode=auto] negotiated protocol version {client.protocol_version}")
            await common_checks(client, srv.eff, header="hdr-1", pid=srv.proc.pid)
        async with srv.client(header=None) as client:
            await client.call_tool("record", {"note": "nohdr"})
        assert effects(srv.eff)[-1]["header"] is None
        print("  ok: header null when absent")
        await die_check(lambda: srv.client(), srv.eff, srv.exited)
    finally:
        srv.stop()

    print("http --expire-after-calls 2:")
    srv = HttpServer("expire", "--expire-after-calls", "2")
    try:
        wire = []
        async with srv.client(wire) as client:
            await client.call_tool("record", {"note": "e1"})
            await client.call_tool("lookup", {"key": "e2"})  # 2nd completed call -> session expires
            sid = next(w[3]["mcp-session-id"] for w in wire if w[0] == "response" and "mcp-session-id" in w[3])
            n = len(effects(srv.eff))
            try:
                await client.call_tool("record", {"note": "e3"})
                raise AssertionError("call on expired session succeeded")
            except MCPError as e:
                print(f"  ok: 3rd call raised MCPError({e.error.code}, {e.error.message!r})")
            assert wire[-1][0] == "response" and wire[-1][2] == 404, wire[-1]
            assert len(effects(srv.eff)) == n, "nothing may execute for an expired session"
        async with httpx2.AsyncClient() as raw:  # raw: same session id is still 404
            r = await raw.post(srv.url, headers={"mcp-session-id": sid, "accept": "application/json, text/event-stream",
                                                  "content-type": "application/json"},
                               content=json.dumps({"jsonrpc": "2.0", "id": 9, "method": "tools/list"}))
            assert r.status_code == 404, r.status_code
            print(f"  ok: raw POST with expired session id -> 404 {r.text}")
        wire2: list = []
        async with srv.client(wire2) as client:  # fresh initialize -> new session
            assert text(await client.call_tool("record", {"note": "fresh"})) == "recorded fresh"
            sid2 = next(w[3]["mcp-session-id"] for w in wire2 if w[0] == "response" and "mcp-session-id" in w[3])
            assert sid2 != sid
        print("  ok: fresh initialize gets a new working session")
    finally:
        srv.stop()


async def main() -> None:
    await check_stdio()
    await check_http()
    shutil.rmtree(TMP)
    print("ALL CHECKS PASSED")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    anyio.run(main)
