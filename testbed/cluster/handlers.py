"""What an emulated replica does with a request of its service: read it, and do the payload work
that the replica runs under its capacity, queue and processing time.

A profile's `handler: module:attr` names an object (or a class built without arguments) with a
`method`, a `path` and `async prepare(request, replica)`, which returns either the work (an async
function with no arguments returning the response) or an answer to send at once (a 400, say), which
the replica does not admit. Without `handler:` a service gets a SizedHandler: it reads the body and
answers with the profile's `request.response_bytes`, spending only the processing time.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import ClassVar, Protocol

from aiohttp import web

from testbed.cluster import payload
from testbed.errors import ConfigError, ConfigProblem
from testbed.plugins import load_ref
from testbed.profiles import RequestSpec, ServiceProfile, default_profiles

Work = Callable[[], Awaitable[web.StreamResponse]]


class EmulatedReplica(Protocol):
    """What a handler may read of the replica it runs in (testbed.cluster.replica.EmulatedReplica)."""

    service: str
    profile: ServiceProfile
    use_espeak: bool
    # only sleep the profile's time: skip the work a small machine cannot keep up with at a time
    # scale (decoding, synthesis), answering in the same shape (a scenario's replica_work: sleep)
    sleep_only: bool


class Handler(Protocol):
    """The route a service answers on and what a request to it does."""

    method: str  # "GET" or "POST"
    path: str  # e.g. "/api/generate"
    # optional: True where prepare() reads only the request's method, path, query, headers,
    # content_type and body (read/text/json); the replica then serves it with its own HTTP server
    # (testbed.cluster.wire.PlainRequest), at half the CPU of aiohttp's (docs/pace.md)
    # plain_request: bool

    async def prepare(self, request: web.Request, replica: EmulatedReplica) -> Work | web.StreamResponse:
        """Read `request`; return the work to run under `replica`'s admission, or an answer now."""
        ...


class ChatbotHandler:
    """Ollama's `POST /api/generate` (stream false): an answer text and Ollama's fields."""

    method, path = "POST", "/api/generate"
    plain_request = True

    async def prepare(self, request: web.Request, replica: EmulatedReplica) -> Work | web.StreamResponse:
        try:
            doc = await request.json()
            prompt = doc["prompt"]
            if not isinstance(prompt, str):
                raise TypeError
        except (ValueError, KeyError, TypeError):
            return web.json_response({"error": "body must be JSON with a 'prompt' string"}, status=400)

        async def work() -> web.Response:
            t0 = time.monotonic_ns()
            answer = payload.chatbot_answer(prompt)
            return web.json_response(
                {
                    "model": doc.get("model", "llama3.2:1b"),
                    "created_at": _iso_now(),
                    "response": answer,
                    "done": True,
                    "done_reason": "stop",
                    "total_duration": time.monotonic_ns() - t0,
                    "prompt_eval_count": len(prompt.split()),
                    "eval_count": len(answer.split()),
                }
            )

        return work


class ImgclsHandler:
    """The ResNet152 server's `POST /classify_batch`: multipart JPEGs in, a label per image out."""

    method, path = "POST", "/classify_batch"
    plain_request = True

    async def prepare(self, request: web.Request, replica: EmulatedReplica) -> Work | web.StreamResponse:
        # the raw Content-Type and one split of the body: aiohttp's multipart reader parses each
        # part's headers through the email package, most of a sleeping replica's CPU (docs/pace.md)
        boundary = form_boundary(request.headers.get("Content-Type", ""))
        # no boundary (also a POST without Content-Type), or a malformed part: the client's
        # fault, not a 500
        files = None if boundary is None else form_fields(await request.read(), boundary, "files")
        if files is None:
            return web.json_response({"error": "expected multipart/form-data with field 'files'"},
                                     status=400)
        if not files:
            return web.json_response({"error": "no 'files' in the form"}, status=400)

        async def work() -> web.Response:
            try:
                if replica.sleep_only:
                    preds = payload.label_images_undecoded(files)
                else:
                    preds = await asyncio.to_thread(payload.classify_images, files)
            except ValueError as exc:
                return web.json_response({"error": str(exc)}, status=400)
            return web.json_response({"predictions": preds, "model": "emulated-resnet152"})

        return work


class TtsHandler:
    """Coqui TTS's `GET /api/tts?text=...`: a WAV file (espeak-ng, or a tone without it)."""

    method, path = "GET", "/api/tts"
    plain_request = True

    async def prepare(self, request: web.Request, replica: EmulatedReplica) -> Work | web.StreamResponse:
        text = request.query.get("text", "")
        if not text.strip():
            return web.json_response({"error": "query parameter 'text' is required"}, status=400)
        speaker = request.query.get("speaker_id", "")

        async def work() -> web.Response:
            if replica.sleep_only:
                wav = payload.silent_wav(text)
            else:
                wav = await asyncio.to_thread(payload.synthesize_wav, text, speaker, replica.use_espeak)
            return web.Response(body=wav, content_type="audio/wav")

        return work


@dataclass(frozen=True)
class SizedHandler:
    """The default handler: reads the request's body and answers `response_bytes` of payload; the
    replica spends the profile's processing time around it."""

    method: str
    path: str
    response_bytes: int
    plain_request: ClassVar[bool] = True

    @classmethod
    def for_request(cls, service: str, spec: RequestSpec) -> SizedHandler:
        """The handler that answers the default client of `spec` for `service`."""
        return cls(spec.method, spec.path_for(service), spec.response_bytes)

    async def prepare(self, request: web.Request, replica: EmulatedReplica) -> Work | web.StreamResponse:
        await request.read()
        body = bytes(self.response_bytes)

        async def work() -> web.Response:
            return web.Response(body=body, content_type="application/octet-stream")

        return work


def handler_for(profile: ServiceProfile, service: str = "") -> Handler:
    """The handler of a service: the object its profile's `handler:` names, else a SizedHandler. A
    profile that names neither `handler:` nor `request:` (one built in code for a known service)
    takes the registered service's.

    Args:
        profile: the service's profile.
        service: the service's name (default: the profile's).

    Raises:
        ConfigError: the reference fails to import, or names no object with method, path and prepare.
    """
    service = service or profile.name
    if profile.handler is None and profile.request is None and service in default_profiles():
        profile = default_profiles()[service]
    if profile.handler is None:
        return SizedHandler.for_request(service, profile.request_spec)
    obj = load_ref(profile.handler, source=f"service {profile.name}", field="handler")
    handler = obj() if isinstance(obj, type) else obj
    missing = [a for a in ("method", "path", "prepare") if not hasattr(handler, a)]
    if missing or not callable(handler.prepare):
        raise ConfigError([ConfigProblem(f"service {profile.name}", None, "handler",
                                         f"{profile.handler} lacks {', '.join(missing) or 'prepare()'} "
                                         "(a handler has method, path and async prepare(request, replica))")])
    return handler


_BOUNDARY = re.compile(r'boundary=(?:"([^"]+)"|([^;\s]+))', re.I)
_PART_NAME = re.compile(rb'(?:^|;)\s*name=(?:"([^"]*)"|([^;\s]+))', re.I)


def form_boundary(content_type: str) -> bytes | None:
    """The boundary of a `multipart/form-data` Content-Type header, or None for any other type."""
    kind, _, params = content_type.partition(";")
    if kind.strip().lower() != "multipart/form-data":
        return None
    m = _BOUNDARY.search(params)
    return (m.group(1) or m.group(2)).encode("latin-1") if m else None


def form_fields(body: bytes, boundary: bytes, name: str) -> list[bytes] | None:
    """The bodies of the parts of multipart `body` whose Content-Disposition names `name`, raw (no
    Content-Transfer-Encoding decoding, as aiohttp's `part.read()`), or None when `body` is not a
    well-formed multipart body: no delimiter, no closing one, a part without a blank line after
    its headers, or a header line without a colon. Only each part's Content-Disposition is read."""
    delim = b"--" + boundary
    start = body.find(delim)
    if start < 0 or (start > 0 and body[start - 2:start] != b"\r\n"):
        return None
    pieces = body[start + len(delim):].split(b"\r\n" + delim)
    if not pieces[-1].startswith(b"--"):
        return None  # no closing delimiter
    want, out = name.encode(), []
    for piece in pieces[:-1]:
        if not piece.startswith(b"\r\n"):
            return None
        head, sep, data = piece[2:].partition(b"\r\n\r\n")
        if not sep:
            if not piece[2:].startswith(b"\r\n"):
                return None
            head, data = b"", piece[4:]  # a part without headers
        part_name = None
        for line in head.split(b"\r\n") if head else ():
            key, colon, value = line.partition(b":")
            if not colon:
                return None
            if key.strip().lower() == b"content-disposition":
                m = _PART_NAME.search(value.partition(b";")[2])
                part_name = (m.group(1) if m.group(1) is not None else m.group(2)) if m else None
        if part_name == want:
            out.append(data)
    return out


def _iso_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
