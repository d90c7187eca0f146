"""IperfSession as the owner of its two processes: leaving `with` ends them, `stop()` twice is
harmless. Real processes (`sleep`) stand in for iperf3's, so no root or namespace is needed."""

from __future__ import annotations

import subprocess

import pytest

from testbed.net.iperf import IperfFlows, IperfSession

PORT = 5999  # outside what a concurrent test's sessions reserve first (5201 upwards)


def _session() -> IperfSession:
    server = subprocess.Popen(["sleep", "60"])
    client = subprocess.Popen(["sleep", "60"], stdout=subprocess.PIPE, text=True)
    IperfSession._reserved.add(PORT)
    return IperfSession(None, None, PORT, flows=IperfFlows(1, 60, False, 0),  # type: ignore[arg-type]
                        server=server, client=client)


def test_leaving_the_with_block_by_an_exception_ends_both_processes():
    session = _session()
    with pytest.raises(RuntimeError, match="the cell failed"), session:
        assert session._server.poll() is None and session._client.poll() is None
        raise RuntimeError("the cell failed")
    assert session._server.returncode is not None and session._client.returncode is not None
    assert PORT not in IperfSession._reserved
    if session._client.stdout:
        session._client.stdout.close()


def test_stop_twice_is_harmless():
    session = _session()
    session.stop()
    codes = (session._server.returncode, session._client.returncode)
    session.stop()
    assert codes == (session._server.returncode, session._client.returncode) == (-15, -15)
    if session._client.stdout:
        session._client.stdout.close()
