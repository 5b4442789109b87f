"""Fixtures the integration tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


@pytest.fixture
def exporter() -> Iterator[tuple[InMemorySpanExporter, TracerProvider]]:
    """A tracer provider of the test's own whose finished spans the test reads."""
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    yield spans, provider
    provider.shutdown()
