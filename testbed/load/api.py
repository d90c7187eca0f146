"""How each AI service is called (method, path, body) and how its answer is checked, shared by the
clients, the emulated replicas' tests and the profiler."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import urlencode

from testbed.errors import ConfigError, ConfigProblem
from testbed.load.content import ContentSet
from testbed.plugins import load_ref
from testbed.profiles import RequestSpec, ServiceProfile, default_profiles, profile_for

CHATBOT_MODEL = "llama3.2:1b"


class MalformedResponse(Exception):
    """The service answered 200 with a body that is not what its API promises."""


@dataclass(frozen=True)
class PreparedRequest:
    """One HTTP request as a client sends it: method, target (path and query), body and headers."""
    method: str
    target: str  # path and query, e.g. "/api/tts?text=..."
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def bytes_up(self) -> int:
        """The bytes the request carries up (body and target), for the records' `bytes_up`."""
        return len(self.body) + len(self.target)


def chatbot_request(prompt: str, model: str = CHATBOT_MODEL) -> PreparedRequest:
    """Ollama `POST /api/generate` without streaming.

    prompt: the question; model: the Ollama model to ask."""
    body = json.dumps({"model": model, "prompt": prompt, "stream": False}).encode()
    return PreparedRequest("POST", "/api/generate", body, {"Content-Type": "application/json"})


def imgcls_request(images: list[bytes]) -> PreparedRequest:
    """`POST /classify_batch`, the JPEGs as repeated multipart field `files`.

    images: the JPEG files, one multipart part each."""
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


class ServiceClient(Protocol):
    """What a load client needs of a service: a request to send and a check of each 200 answer.

    A profile's `client: module:attr` names an object with these two methods, or a class that
    builds one without arguments."""

    def build(self, content: ContentSet) -> PreparedRequest:
        """The next request, its content drawn from `content` (seeded: the same run sends the same)."""
        ...

    def check(self, body: bytes) -> None:
        """Raise MalformedResponse unless `body` is a valid answer."""
        ...


class ChatbotClient:
    """Ollama `POST /api/generate` with a question; the answer is JSON with a `response` text."""

    def build(self, content: ContentSet) -> PreparedRequest:
        """The next request: a question from `content`, the run's seeded request contents."""
        return chatbot_request(content.question())

    def check(self, body: bytes) -> None:
        """Raise MalformedResponse unless `body`, a 200 answer, is JSON with a `response` text."""
        doc = _json(body)
        if not isinstance(doc, dict) or not isinstance(doc.get("response"), str):
            raise MalformedResponse("no 'response' text")


class ImgclsClient:
    """`POST /classify_batch` with four JPEGs; the answer is JSON with a `predictions` list."""

    def build(self, content: ContentSet) -> PreparedRequest:
        """The next request: four JPEGs from `content`, the run's seeded request contents."""
        return imgcls_request(content.images(4))

    def check(self, body: bytes) -> None:
        """Raise MalformedResponse unless `body`, a 200 answer, is JSON with a list of labelled
        predictions."""
        doc = _json(body)
        preds = doc.get("predictions") if isinstance(doc, dict) else None
        if not isinstance(preds, list) or not preds or not all(
            isinstance(p, dict) and isinstance(p.get("label"), str) for p in preds
        ):
            raise MalformedResponse("no 'predictions' list of labels")


class TtsClient:
    """Coqui TTS `GET /api/tts` with a sentence; the answer is a WAV file."""

    def build(self, content: ContentSet) -> PreparedRequest:
        """The next request: a sentence from `content`, the run's seeded request contents."""
        return tts_request(content.sentence())

    def check(self, body: bytes) -> None:
        """Raise MalformedResponse unless `body`, a 200 answer, is a WAV file."""
        if len(body) < 44 or body[:4] != b"RIFF" or body[8:12] != b"WAVE":
            raise MalformedResponse("not a WAV file")


@dataclass(frozen=True)
class SizedClient:
    """The default client of a service without `client:`: `upload_bytes` of payload to its path,
    answered with exactly `response_bytes` (what the default replica handler sends)."""

    service: str
    spec: RequestSpec

    def build(self, content: ContentSet) -> PreparedRequest:
        """The next request: `spec.upload_bytes` of `content`'s seeded bytes to the service's path
        (nothing for a GET)."""
        path = self.spec.path_for(self.service)
        if self.spec.method == "GET":
            return PreparedRequest("GET", path)
        return PreparedRequest("POST", path, content.blob(self.spec.upload_bytes),
                               {"Content-Type": "application/octet-stream"})

    def check(self, body: bytes) -> None:
        """Raise MalformedResponse unless `body`, a 200 answer, is exactly `spec.response_bytes` long."""
        if len(body) != self.spec.response_bytes:
            raise MalformedResponse(f"{len(body)} bytes, not the profile's {self.spec.response_bytes}")


def _json(body: bytes) -> object:
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise MalformedResponse("not JSON") from None


def client_for(profile: ServiceProfile, service: str = "") -> ServiceClient:
    """The client of a service: the object its profile's `client:` names, else a SizedClient of its
    `request:` sizes. A profile that names neither `client:` nor `request:` (one built in code for a
    known service) takes the registered service's.

    Args:
        profile: the service's profile.
        service: the service's name (default: the profile's).

    Raises:
        ConfigError: the reference fails to import, or names no object with `build` and `check`.
    """
    service = service or profile.name
    if profile.client is None and profile.request is None and service in default_profiles():
        profile = default_profiles()[service]
    if profile.client is None:
        return SizedClient(service, profile.request_spec)
    obj = load_ref(profile.client, source=f"service {profile.name}", field="client")
    client = obj() if isinstance(obj, type) else obj
    missing = [m for m in ("build", "check") if not callable(getattr(client, m, None))]
    if missing:
        raise ConfigError([ConfigProblem(f"service {profile.name}", None, "client",
                                         f"{profile.client} has no {' or '.join(missing)} method "
                                         "(a client builds requests and checks answers)")])
    return client


def build_request(service: str, content: ContentSet) -> PreparedRequest:
    """The next request of the registered `service` (a one-off: a client keeps `service_client`'s).

    service: a registered service's name; content: the run's seeded request contents."""
    return service_client(service).build(content)


def check_response(service: str, body: bytes) -> None:
    """Raise MalformedResponse unless `body` is a valid answer of the registered `service`'s API."""
    service_client(service).check(body)


def service_client(service: str, profile: ServiceProfile | None = None) -> ServiceClient:
    """`client_for` the service's profile: `profile`, else the registry's profile of `service`."""
    return client_for(profile or profile_for(default_profiles(), service, "service"), service)
