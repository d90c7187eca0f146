"""The netstats exporter's /metrics server when its scraper gives up mid-answer."""

import socket
import struct
import threading
import time

from testbed.net.netstats import _serve


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_scraper_that_hangs_up_leaves_no_traceback():
    """Prometheus closes a scrape at its timeout, its interval (62 ms at time scale 16): the
    exporter's answer then meets a closed socket, which is the scraper's choice, not an error
    (socketserver prints each handler error's traceback into the run's log)."""
    port = _free_port()
    latest = ["x" * 8_000_000]  # larger than the socket buffers, so the write meets the close
    server = _serve(f"127.0.0.1:{port}", latest)
    errors: list[object] = []
    done = threading.Event()
    server.handle_error = lambda request, address: errors.append(address)  # type: ignore[method-assign]
    original_shutdown = server.shutdown_request

    def shutdown_request(request: socket.socket) -> None:
        original_shutdown(request)
        done.set()

    server.shutdown_request = shutdown_request  # type: ignore[method-assign]
    try:
        client = socket.create_connection(("127.0.0.1", port))
        client.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        client.recv(1024)
        # a reset, as a scraper's timeout gives: the rest of the write fails at once
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()
        assert done.wait(10), "the handler never finished"
        time.sleep(0.05)
        assert errors == []
    finally:
        server.shutdown()
        server.server_close()
