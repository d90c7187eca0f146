"""The real work an emulated replica does on each request: answer text, decode the four JPEGs,
synthesise a WAV whose length grows with the text (espeak-ng when installed)."""

from __future__ import annotations

import functools
import hashlib
import io
import math
import shutil
import struct
import subprocess

import numpy as np

CIFAR10_LABELS = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
_ANSWER_WORDS = [
    "yes",
    "it",
    "depends",
    "mostly",
    "on",
    "light",
    "time",
    "energy",
    "and",
    "people",
    "around",
    "the",
    "world",
]


def chatbot_answer(prompt: str) -> str:
    """A short deterministic answer (fewer than 10 words, as the questions ask)."""
    digest = hashlib.sha256(prompt.encode()).digest()
    n = 3 + digest[0] % 6
    words = [_ANSWER_WORDS[b % len(_ANSWER_WORDS)] for b in digest[1 : 1 + n]]
    return " ".join(words).capitalize() + "."


def classify_images(files: list[bytes]) -> list[dict[str, object]]:
    """Decode every JPEG fully (the CPU part of the real service) and label it by its colour
    statistics; raises ValueError for data that is not an image."""
    from PIL import Image, UnidentifiedImageError

    out: list[dict[str, object]] = []
    for data in files:
        try:
            with Image.open(io.BytesIO(data)) as img:
                rgb = img.convert("RGB")
                small = rgb.resize((32, 32))
        except (UnidentifiedImageError, OSError) as exc:
            raise ValueError(f"cannot decode image: {exc}") from None
        r, g, b = (float(v) for v in np.asarray(small, dtype=np.float32).mean(axis=(0, 1)))
        index = int(r * 3 + g * 5 + b * 7) % len(CIFAR10_LABELS)
        score = 0.5 + (abs(r - b) % 50) / 100.0
        out.append(
            {
                "label": CIFAR10_LABELS[index],
                "index": index,
                "score": round(score, 4),
                "width": rgb.width,
                "height": rgb.height,
            }
        )
    return out


def label_images_undecoded(files: list[bytes]) -> list[dict[str, object]]:
    """The same answer's shape as classify_images without decoding (a replica that only sleeps
    its profile's time, issue 34's time-scaled runs): a label per file from its bytes' digest;
    raises ValueError for data that does not start as a JPEG or PNG does."""
    out: list[dict[str, object]] = []
    for data in files:
        if not data.startswith((b"\xff\xd8", b"\x89PNG")):
            raise ValueError("cannot decode image: not a JPEG or PNG")
        index = hashlib.blake2b(data[:4096], digest_size=1).digest()[0] % len(CIFAR10_LABELS)
        out.append({"label": CIFAR10_LABELS[index], "index": index, "score": 0.5,
                    "width": None, "height": None})
    return out


def espeak_binary() -> str | None:
    return shutil.which("espeak-ng") or shutil.which("espeak")


def synthesize_wav(text: str, speaker_id: str = "", use_espeak: bool = True) -> bytes:
    """WAV audio for `text`: espeak-ng's speech when available, else a generated waveform of
    about 60 ms per character. Both grow with the text."""
    binary = espeak_binary() if use_espeak else None
    if binary and text.strip():
        try:
            proc = subprocess.run(
                [binary, "--stdout", "--", text], capture_output=True, timeout=30, check=True
            )
            if proc.stdout[:4] == b"RIFF":
                return _fix_wav_sizes(proc.stdout)
        except (subprocess.SubprocessError, OSError):
            pass
    return generated_wav(text, speaker_id)


def generated_wav(text: str, speaker_id: str = "", rate: int = 16000) -> bytes:
    """Mono 16-bit PCM: one short tone per character, pitch from the character and speaker."""
    per_char = int(rate * 0.06)
    base = 110 + (sum(speaker_id.encode()) % 60)
    frames = bytearray()
    for ch in text or " ":
        freq = 0.0 if ch.isspace() else base + (ord(ch) % 32) * 12
        for i in range(per_char):
            v = int(8000 * math.sin(2 * math.pi * freq * i / rate)) if freq else 0
            frames += struct.pack("<h", v)
    return wav_bytes(bytes(frames), rate)


def silent_wav(text: str, rate: int = 16000) -> bytes:
    """generated_wav's length and format in silence, without synthesising (a replica that only
    sleeps its profile's time)."""
    return _silence(len(text or " "), rate)


@functools.lru_cache(maxsize=64)
def _silence(chars: int, rate: int) -> bytes:
    # the same few hundred kB for every text of a length: built once (a sleeping TTS replica
    # answers dozens a second, each a new allocation and two copies before)
    return wav_bytes(bytes(2 * int(rate * 0.06) * chars), rate)


def wav_bytes(pcm: bytes, rate: int, channels: int = 1, width: int = 2) -> bytes:
    header = b"RIFF" + struct.pack("<I", 36 + len(pcm)) + b"WAVE"
    header += b"fmt " + struct.pack(
        "<IHHIIHH", 16, 1, channels, rate, rate * channels * width, channels * width, width * 8
    )
    return header + b"data" + struct.pack("<I", len(pcm)) + pcm


def _fix_wav_sizes(data: bytes) -> bytes:
    # espeak-ng writes 0x7fffffff sizes when its output is a pipe; set the real ones.
    idx = data.find(b"data", 12)
    if idx < 0:
        return data
    pcm = data[idx + 8 :]
    return data[:4] + struct.pack("<I", len(data) - 8) + data[8 : idx + 4] + struct.pack("<I", len(pcm)) + pcm
