"""Traces, request content, the asyncio open-loop clients (aiohttp), request records."""

from testbed.load.records import RecordWriter, RequestRecord
from testbed.load.trace import Trace, TraceLine, load_trace, schedule_from_trace

__all__ = ["RecordWriter", "RequestRecord", "Trace", "TraceLine", "load_trace", "schedule_from_trace"]
