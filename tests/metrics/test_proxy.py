"""The balancer's HTTP heads: names looked up case-blind (the first of a repeated name), and the
headers a proxy does not forward left out whatever their case."""

from testbed.metrics.meter import HOP_BY_HOP
from testbed.metrics.proxy import parse_head


def test_a_header_is_found_whatever_its_case_and_a_repeated_one_gives_its_first_value():
    head = parse_head(b"POST /x HTTP/1.1\r\nX-Testbed-Due: 1.5\r\nx-testbed-due: 9\r\nHost: a:1")
    assert head.get("x-testbed-due") == "1.5"
    assert head.get("X-TESTBED-DUE") == "1.5"
    assert head.get("host") == "a:1"
    assert head.get("absent") is None and head.get("absent", "d") == "d"
    assert head.number("X-TESTBED-DUE") == 1.5  # the replica's reported times are read so
    assert head.number("host") is None and head.number("absent") is None


def test_hop_by_hop_headers_are_left_out_in_any_case_and_the_rest_kept_in_order():
    head = parse_head(b"HTTP/1.1 200 OK\r\nCONNECTION: keep-alive\r\nX-B: 2\r\nContent-Length: 3"
                      b"\r\nx-a: 1\r\nTransfer-encoding: chunked\r\nkeep-alive: timeout=5")
    assert head.without(HOP_BY_HOP) == [("X-B", "2"), ("x-a", "1")]
    assert head.keep_alive  # the lookups after the filter still see every header
    assert parse_head(b"HTTP/1.1 200 OK\r\nConnection: Close").keep_alive is False
