"""Request content follows the paper: 500 questions, 100 sentences of varied length, 512×512 JPEGs
four per request; seeded so two runs send the same content."""

import io

from testbed.load.api import build_request, check_response
from testbed.load.content import QUESTION_SUFFIX, ContentSet, jpeg_images, questions, sentences


def test_content_sets_match_the_paper_and_are_seeded():
    qs = questions()
    assert len(qs) == len(set(qs)) == 500 and all(q.endswith(QUESTION_SUFFIX) for q in qs)
    ss = sentences()
    lengths = sorted(len(s.split()) for s in ss)
    assert len(ss) == 100 and lengths[0] <= 4 and lengths[-1] >= 50
    assert questions(seed=3) == questions(seed=3) != questions(seed=4)
    from PIL import Image

    img = Image.open(io.BytesIO(jpeg_images(1)[0]))
    assert img.format == "JPEG" and img.size == (512, 512)


def test_requests_are_well_formed_and_reproducible():
    a, b = ContentSet(seed=5, n_images=6), ContentSet(seed=5, n_images=6)
    for service in ("chatbot", "imgcls", "tts"):
        ra, rb = build_request(service, a), build_request(service, b)
        assert ra.target == rb.target and ra.bytes_up > 0
    img = build_request("imgcls", a)
    assert img.body.count(b'name="files"') == 4 and img.bytes_up > 4 * 5000


def test_check_response_rejects_wrong_bodies():
    import pytest

    from testbed.load.api import MalformedResponse

    for service, body in (("chatbot", b"{}"), ("imgcls", b'{"predictions": []}'), ("tts", b"RIFF"),
                          ("chatbot", b"not json")):
        with pytest.raises(MalformedResponse):
            check_response(service, body)
