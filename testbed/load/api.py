"""How each AI service is called (method, path, body) and how its answer is checked, shared by the
clients, the emulated replicas' tests and the profiler."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from urllib.parse import urlencode

from testbed.load.content import ContentSet

CHATBOT_MODEL = "llama3.2:1b"


class MalformedResponse(Exception):
    """The service answered 200 with a body that is not what its API promises."""


@dataclass(frozen=True)
class PreparedRequest:
    method: str
    target: str  # path and query, e.g. "/api/tts?text=..."
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def bytes_up(self) -> int:
        return len(self.body) + len(self.target)


def chatbot_request(prompt: str, model: str = CHATBOT_MODEL) -> PreparedRequest:
    """Ollama `POST /api/generate` without streaming."""
    body = json.dumps({"model": model, "prompt": prompt, "stream": False}).encode()
    return PreparedRequest("POST", "/api/generate", body, {"Content-Type": "application/json"})


def imgcls_request(images: list[bytes]) -> PreparedRequest:
    """`POST /classify_batch`, the JPEGs as repeated multipart field `files`."""
    boundary = uuid.uuid4().hex
    parts = []
    for i, img in enumerate(images):
        parts.append(
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"files\"; filename=\"img{i}.jpg\"\r\n"
            f"Content-Type: image/jpeg\r\n\r\n".encode() + img + b"\r\n"
        )
    body = b"".join(parts) + f"--{boundary}--\r\n".encode()
    return PreparedRequest("POST", "/classify_batch", body,
                           {"Content-Type": f"multipart/form-data; boundary={boundary}"})


def tts_request(text: str, speaker_id: str = "p225") -> PreparedRequest:
    """Coqui TTS server `GET /api/tts?text=…&speaker_id=…`."""
    return PreparedRequest("GET", "/api/tts?" + urlencode({"text": text, "speaker_id": speaker_id}))


def build_request(service: str, content: ContentSet) -> PreparedRequest:
    if service == "chatbot":
        return chatbot_request(content.question())
    if service == "imgcls":
        return imgcls_request(content.images(4))
    if service == "tts":
        return tts_request(content.sentence())
    raise ValueError(f"unknown service {service!r} (known: chatbot, imgcls, tts)")


def check_response(service: str, body: bytes) -> None:
    """Raise MalformedResponse unless `body` is a valid answer of `service`'s API."""
    if service == "tts":
        if len(body) < 44 or body[:4] != b"RIFF" or body[8:12] != b"WAVE":
            raise MalformedResponse("not a WAV file")
        return
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise MalformedResponse("not JSON") from None
    if service == "chatbot":
        if not isinstance(doc, dict) or not isinstance(doc.get("response"), str):
            raise MalformedResponse("no 'response' text")
    elif service == "imgcls":
        preds = doc.get("predictions") if isinstance(doc, dict) else None
        if not isinstance(preds, list) or not preds or not all(
            isinstance(p, dict) and isinstance(p.get("label"), str) for p in preds
        ):
            raise MalformedResponse("no 'predictions' list of labels")
    else:
        raise ValueError(f"unknown service {service!r}")
