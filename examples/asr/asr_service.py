"""The example ASR service's API: the client sends about 100 KB of WAV audio with
`POST /asr/transcribe`, the emulated replica answers `{"text": ...}` (the profile's processing time
is spent around it by the replica)."""

from __future__ import annotations

import json
import struct
from collections.abc import Awaitable, Callable

from aiohttp import web

from testbed.load.api import MalformedResponse, PreparedRequest
from testbed.load.content import ContentSet

AUDIO_BYTES = 100_000
Work = Callable[[], Awaitable[web.Response]]  # what the replica runs under its capacity and time
SAMPLE_RATE = 16_000


def wav(samples: bytes) -> bytes:
    """A mono 16-bit WAV file around raw PCM `samples`."""
    header = b"RIFF" + struct.pack("<I", 36 + len(samples)) + b"WAVEfmt "
    header += struct.pack("<IHHIIHH", 16, 1, 1, SAMPLE_RATE, SAMPLE_RATE * 2, 2, 16)
    return header + b"data" + struct.pack("<I", len(samples)) + samples


class AsrClient:
    """Builds one upload of about 100 KB of audio; a good answer is JSON with a `text` string."""

    def build(self, content: ContentSet) -> PreparedRequest:
        return PreparedRequest("POST", "/asr/transcribe", wav(content.blob(AUDIO_BYTES - 44)),
                               {"Content-Type": "audio/wav"})

    def check(self, body: bytes) -> None:
        try:
            doc = json.loads(body)
        except ValueError:
            raise MalformedResponse("not JSON") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("text"), str):
            raise MalformedResponse("no 'text'")


class AsrHandler:
    """Reads the WAV upload (a 400 without one) and transcribes it: here, the audio's length."""

    method, path = "POST", "/asr/transcribe"

    async def prepare(self, request: web.Request, replica: object) -> Work | web.Response:
        audio = await request.read()
        if audio[:4] != b"RIFF" or audio[8:12] != b"WAVE":
            return web.json_response({"error": "expected a WAV file"}, status=400)
        seconds = (len(audio) - 44) / (SAMPLE_RATE * 2)

        async def work() -> web.Response:
            return web.json_response({"text": f"{seconds:.2f} seconds of speech", "model": "example-asr"})

        return work
