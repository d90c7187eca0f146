"""The control API of `testbed services up`: refused without the per-run token, also from a UE
that reaches the service address; the CLI finds the token and keeps working."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

import aiohttp
import pytest

from testbed.cluster.local import LocalCluster, LocalClusterConfig
from testbed.cluster.local.admin import add_admin_routes, admin_call
from testbed.errors import StateError
from tests.conftest import namespaces_with_prefix


def test_admin_requests_without_the_token_are_refused_and_change_nothing():
    async def main():
        stop = asyncio.Event()
        c = LocalCluster(LocalClusterConfig(services=["chatbot"], initial=0, total_units=2, time_scale=20))
        add_admin_routes(c, stop, "right-token")
        async with c, aiohttp.ClientSession() as s:
            url = c.metrics_url
            codes = []
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "right-token"}):
                async with s.post(url + "/admin/shutdown", headers=headers) as r:
                    codes.append(r.status)
                async with s.post(url + "/admin/scale", json={"service": "chatbot", "replicas": 1},
                                  headers=headers) as r:
                    codes.append(r.status)
                async with s.get(url + "/admin/status", headers=headers) as r:
                    codes.append(r.status)
            refused = (codes, stop.is_set(), c.desired_replicas("chatbot"))
            with pytest.raises(StateError, match="admin token required"):
                await admin_call(url, "GET", "/admin/status")
            doc = await admin_call(url, "POST", "/admin/scale", {"service": "chatbot", "replicas": 1},
                                   token="right-token")
            await admin_call(url, "POST", "/admin/shutdown", token="right-token")
            return refused, doc["chatbot"]["desired"], stop.is_set()

    (codes, stopped, desired), desired_after, stopped_after = asyncio.run(main())
    assert codes == [401] * 9 and not stopped and desired == 0
    assert desired_after == 1 and stopped_after


def _in_ns(ns: str, *cmd: str, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", "netns", "exec", ns, *cmd], capture_output=True, text=True,
                          timeout=60, env=dict(os.environ, COLUMNS="200"), **kw)


UE_POST = """\
import sys, urllib.error, urllib.request
req = urllib.request.Request(sys.argv[1], data=b'{"service": "imgcls", "replicas": 3}',
                             method="POST", headers={"Content-Type": "application/json"})
try:
    print(urllib.request.urlopen(req, timeout=5).status)
except urllib.error.HTTPError as exc:
    print(exc.code)
"""


@pytest.mark.needs_root
def test_a_ue_cannot_scale_or_stop_services_in_the_data_network(tb_name, state_dir):
    from testbed.bringup.local import LocalTestbed
    from testbed.config import load_testbed

    spec = load_testbed().model_copy(update={"name": tb_name})
    testbed = [sys.executable, "-m", "testbed"]
    with LocalTestbed(spec) as tb:
        dn, ue = tb.topology.dn.name, tb.topology.ue_hosts["ai"].name
        addr = str(tb.topology.dn_addr)
        admin = f"http://{addr}:8000"
        up = subprocess.Popen(["ip", "netns", "exec", dn, *testbed, "services", "up", "--host", addr,
                               "--services", "imgcls", "--replicas", "1", "--time-scale", "20"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                st = _in_ns(dn, *testbed, "services", "status", "--admin", admin, "--json")
                if st.returncode == 0:
                    break
                time.sleep(0.3)
            assert st.returncode == 0, st.stdout + st.stderr
            token_file = state_dir / "services-8000.token"
            assert token_file.stat().st_mode & 0o777 == 0o600
            token = token_file.read_text().strip()
            for path in ("/admin/scale", "/admin/shutdown"):
                from_ue = _in_ns(ue, sys.executable, "-c", UE_POST, admin + path)
                assert from_ue.stdout.strip() == "401", from_ue.stdout + from_ue.stderr
            assert up.poll() is None, "a UE stopped the services"
            scale = _in_ns(dn, *testbed, "services", "scale", "imgcls", "2", "--admin", admin)
            assert scale.returncode == 0, scale.stderr
            down = _in_ns(dn, *testbed, "services", "down", "--admin", admin)
            assert down.returncode == 0, down.stderr
            out, _ = up.communicate(timeout=30)
            assert up.returncode == 0, out
            assert "Traceback" not in out and token not in out  # secrets never printed
            assert list(state_dir.glob("services-*.token")) == []  # removed on exit
        finally:
            if up.poll() is None:
                up.terminate()
                up.wait(timeout=30)
    assert namespaces_with_prefix(f"tb-{tb_name}-") == []
