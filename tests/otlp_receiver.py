"""A real OTLP/HTTP trace receiver for tests: ``POST /v1/traces`` with a
protobuf ``ExportTraceServiceRequest`` (gzip or not), decoded and kept.

Built on the project's one fake server, so it is a real HTTP endpoint that
the web, worker and scheduler processes export to as they would to a
collector.
"""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from resumable.dev.fake_server import NOT_FOUND, FakeServer, Reply, Request


@dataclass(frozen=True)
class ReceivedSpan:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, Any]
    start_ns: int
    end_ns: int
    status_code: int


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return None if kind is None else getattr(value, kind)


class OtlpReceiver(FakeServer):
    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._spans: list[ReceivedSpan] = []

    @property
    def endpoint(self) -> str:
        return self.url

    def handle(self, request: Request) -> Reply:
        if request.method != "POST" or request.path != "/v1/traces":
            return NOT_FOUND
        body = request.body
        if request.header("content-encoding") == "gzip":
            body = gzip.decompress(body)
        export = ExportTraceServiceRequest()
        export.ParseFromString(body)
        received = []
        for resource_spans in export.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    received.append(
                        ReceivedSpan(
                            service=str(resource.get("service.name")),
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_id=span.parent_span_id.hex(),
                            attributes={a.key: _value(a.value) for a in span.attributes},
                            start_ns=span.start_time_unix_nano,
                            end_ns=span.end_time_unix_nano,
                            status_code=span.status.code,
                        )
                    )
        with self._lock:
            self._spans.extend(received)
        return Reply(
            200,
            ExportTraceServiceResponse().SerializeToString(),
            content_type="application/x-protobuf",
        )

    def spans(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self._spans)

    def named(self, name: str) -> list[ReceivedSpan]:
        return [span for span in self.spans() if span.name == name]


def span_tree(spans: list[ReceivedSpan], root_parent: str) -> str:
    """The spans under `root_parent` as an indented tree, children by start time."""
    children: dict[str, list[ReceivedSpan]] = {}
    for span in spans:
        children.setdefault(span.parent_id, []).append(span)
    lines: list[str] = []

    def walk(parent: str, depth: int) -> None:
        for span in sorted(children.get(parent, []), key=lambda s: s.start_ns):
            keep = {
                k.removeprefix("resumable."): v
                for k, v in span.attributes.items()
                if k not in ("resumable.session.id", "resumable.tool.idempotency_key")
            }
            detail = " ".join(f"{k}={v}" for k, v in sorted(keep.items()))
            lines.append(f"{'  ' * depth}{span.name} [{span.service}] {detail}".rstrip())
            walk(span.span_id, depth + 1)

    walk(root_parent, 0)
    return "\n".join(lines)
