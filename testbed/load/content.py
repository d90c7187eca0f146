"""Seeded request content: 500 chatbot questions, JPEG images (32×32 pictures upscaled to 512×512),
and 100 sentences of varied length for text to speech (dissertation Section 4.4.1)."""

from __future__ import annotations

import io
import random
from dataclasses import dataclass, field

import numpy as np

QUESTION_SUFFIX = " Answer in less than 10 words."

_TOPICS = [
    "the moon",
    "a rainbow",
    "photosynthesis",
    "the internet",
    "a volcano",
    "gravity",
    "jazz",
    "the Roman Empire",
    "a black hole",
    "coffee",
    "a glacier",
    "democracy",
    "a neural network",
    "the ocean tide",
    "bread yeast",
    "a 5G network",
    "electric cars",
    "honey bees",
    "the Sahara",
    "chess",
    "vaccines",
    "a lighthouse",
    "the piano",
    "recycling",
    "a hurricane",
]
_TEMPLATES = [
    "What is {t}?",
    "Why does {t} matter?",
    "How does {t} work?",
    "Who first studied {t}?",
    "Where can I learn about {t}?",
    "Describe {t} to a child.",
    "What is surprising about {t}?",
    "Give one fact about {t}.",
    "How old is the idea of {t}?",
    "What would change without {t}?",
    "Name a word that rhymes with {t}.",
    "Is {t} dangerous?",
    "How big is {t}?",
    "What color is {t}?",
    "Summarize {t} in one line.",
    "What replaced {t}?",
    "Which country is known for {t}?",
    "How do scientists measure {t}?",
    "Can {t} be built at home?",
    "What is the opposite of {t}?",
]
_WORDS = [
    "the",
    "a",
    "quiet",
    "river",
    "morning",
    "city",
    "light",
    "signal",
    "network",
    "answer",
    "small",
    "bright",
    "slowly",
    "over",
    "under",
    "station",
    "voice",
    "model",
    "image",
    "sound",
    "careful",
    "distant",
    "green",
    "winter",
    "summer",
    "engineer",
    "listens",
    "speaks",
    "between",
    "window",
    "paper",
    "garden",
    "travel",
    "music",
    "number",
    "simple",
    "clear",
    "strong",
    "early",
    "late",
]


def questions(n: int = 500, seed: int = 0) -> list[str]:
    """`n` distinct procedurally generated questions, each asking for a short answer.

    n: how many; seed: the generator's seed."""
    rng = random.Random(seed)
    pairs = [(tpl, topic) for tpl in _TEMPLATES for topic in _TOPICS]
    rng.shuffle(pairs)
    if n > len(pairs):
        raise ValueError(f"at most {len(pairs)} distinct questions")
    return [tpl.format(t=topic) + QUESTION_SUFFIX for tpl, topic in pairs[:n]]


def sentences(n: int = 100, seed: int = 0, min_words: int = 3, max_words: int = 60) -> list[str]:
    """`n` sentences whose lengths spread evenly from `min_words` to `max_words` words.

    n: how many; seed: the generator's seed; min_words, max_words: the range of lengths."""
    rng = random.Random(seed + 1)
    out = []
    for i in range(n):
        length = min_words + round((max_words - min_words) * i / max(1, n - 1))
        words = [rng.choice(_WORDS) for _ in range(length)]
        out.append(" ".join(words).capitalize() + ".")
    rng.shuffle(out)
    return out


def tiny_picture(rng: np.random.Generator) -> np.ndarray:
    """A 32×32 RGB picture (CIFAR-10 sized): a gradient background with a few coloured blobs.

    rng: the generator it draws from."""
    y, x = np.mgrid[0:32, 0:32].astype(np.float32) / 31.0
    base = rng.uniform(0, 255, size=(2, 3)).astype(np.float32)
    img = base[0] * (1 - x[..., None]) + base[1] * y[..., None]
    for _ in range(int(rng.integers(1, 4))):
        cy, cx, r = rng.uniform(4, 28), rng.uniform(4, 28), rng.uniform(3, 9)
        mask = (np.mgrid[0:32, 0:32][0] - cy) ** 2 + (np.mgrid[0:32, 0:32][1] - cx) ** 2 < r * r
        img[mask] = rng.uniform(0, 255, size=3)
    return np.clip(img, 0, 255).astype(np.uint8)


def jpeg_images(n: int = 40, seed: int = 0, size: int = 512, quality: int = 85) -> list[bytes]:
    """`n` JPEG files: tiny pictures upscaled to size×size, as the paper did with CIFAR-10.

    n: how many; seed: the generator's seed; size: their side in pixels; quality: the JPEG quality."""
    from PIL import Image  # imported here: only image content needs Pillow

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        pic = Image.fromarray(tiny_picture(rng), "RGB").resize((size, size), Image.Resampling.BILINEAR)
        buf = io.BytesIO()
        pic.save(buf, format="JPEG", quality=quality)
        out.append(buf.getvalue())
    return out


@dataclass
class ContentSet:
    """The per-service pools a client draws request content from, with its own seeded RNG."""

    seed: int = 0
    n_images: int = 40
    _questions: list[str] | None = field(default=None, repr=False)
    _sentences: list[str] | None = field(default=None, repr=False)
    _images: list[bytes] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed + 7)

    def question(self) -> str:
        """A chatbot question."""
        if self._questions is None:
            self._questions = questions(seed=self.seed)
        return self.rng.choice(self._questions)

    def sentence(self) -> str:
        """A sentence to speak."""
        if self._sentences is None:
            self._sentences = sentences(seed=self.seed)
        return self.rng.choice(self._sentences)

    def images(self, k: int = 4) -> list[bytes]:
        """`k` JPEG images to classify."""
        if self._images is None:
            self._images = jpeg_images(self.n_images, seed=self.seed)
        return [self.rng.choice(self._images) for _ in range(k)]

    def blob(self, n: int) -> bytes:
        """`n` bytes of payload (a default request's body: incompressible, from the seeded RNG)."""
        return self.rng.randbytes(n)
