"""A small OTLP/HTTP trace receiver that decodes with the official protobuf definitions
(the `opentelemetry-proto` package), for tests/it/telemetry.rs.

Usage: python otlp_receiver.py OUT.jsonl

Listens on 127.0.0.1 (a port of its own, printed as `listening PORT` on the first line of
stdout), accepts POST /v1/traces (application/x-protobuf, optionally gzip), decodes each
ExportTraceServiceRequest and appends one JSON line per span to OUT.jsonl: its name, ids,
parent, kind, status, attributes (by key, arrays as lists), events and resource attributes.
Anything it cannot decode is a 400 and a line {"error": ...}: the exporter's bytes are held to
the official definitions, not to what faultline thinks it sent.
"""

import gzip
import json
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

BODY_BYTES_MAX = 16 * 1024 * 1024


def value_of(any_value):
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [value_of(v) for v in any_value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: value_of(kv.value) for kv in any_value.kvlist_value.values}
    if kind == "bytes_value":
        return any_value.bytes_value.hex()
    return getattr(any_value, kind) if kind else None


def attributes(kvs):
    return {kv.key: value_of(kv.value) for kv in kvs}


class Handler(BaseHTTPRequestHandler):
    out = None

    def log_message(self, *args):
        pass

    def record(self, line):
        with open(Handler.out, "a", encoding="utf-8") as f:
            f.write(json.dumps(line, sort_keys=True) + "\n")

    def do_POST(self):
        length = int(self.headers.get("content-length", "0"))
        if self.path != "/v1/traces" or length > BODY_BYTES_MAX:
            self.send_response(404 if self.path != "/v1/traces" else 413)
            self.end_headers()
            return
        body = self.rfile.read(length)
        try:
            if self.headers.get("content-encoding") == "gzip":
                body = gzip.decompress(body)
            if self.headers.get("content-type") != "application/x-protobuf":
                raise ValueError(f"content-type {self.headers.get('content-type')!r}")
            request = trace_service_pb2.ExportTraceServiceRequest()
            request.ParseFromString(body)
        except Exception as e:  # noqa: BLE001 - any undecodable body is the finding
            self.record({"error": repr(e)})
            self.send_response(400)
            self.end_headers()
            return
        for resource_spans in request.resource_spans:
            resource = attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.record({
                        "name": span.name,
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent_span_id": span.parent_span_id.hex(),
                        "kind": span.kind,
                        "status": span.status.code,
                        "start_ns": span.start_time_unix_nano,
                        "end_ns": span.end_time_unix_nano,
                        "attributes": attributes(span.attributes),
                        "events": [event.name for event in span.events],
                        "resource": resource,
                        "scope": scope_spans.scope.name,
                    })
        reply = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)


def main():
    Handler.out = sys.argv[1]
    server = HTTPServer(("127.0.0.1", 0), Handler)
    print(f"listening {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
