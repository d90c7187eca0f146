"""The load balancer in front of in-process replicas: round robin, proxy counts, SLO violations,
Prometheus text, and a dead replica taken out of rotation."""

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from testbed.cluster.replica import EmulatedReplica
from testbed.load.api import build_request
from testbed.load.content import ContentSet
from testbed.metrics.balancer import LoadBalancer
from testbed.metrics.exposition import DURATION, IN_FLIGHT, READY, REQUESTS, UTILIZATION, VIOLATIONS
from testbed.profiles import ServiceProfile, default_profiles

pytestmark = pytest.mark.timed  # asserts on times: testbed.pytest_plugin.timed_priority

# 200 ms of work against a 480 ms SLO, one request at a time per replica: a request queued behind
# two others takes at least 600 ms and violates; load on the machine only adds violations.
PROFILE = ServiceProfile(capacity=1, queue_limit=10, proc_time_ms=(200, 200), startup_ms=0, slo_ms=480)


@contextlib.asynccontextmanager
async def replica_servers(profile: ServiceProfile, n: int = 2
                          ) -> AsyncIterator[tuple[list[EmulatedReplica], list[TestServer]]]:
    """`n` emulated chatbot replicas of `profile`, each served on a local port; closed after."""
    replicas = [EmulatedReplica("chatbot", profile, seed=i) for i in range(n)]
    servers = [TestServer(r.app(), host="127.0.0.1") for r in replicas]
    try:
        for s in servers:
            await s.start_server()
        yield replicas, servers
    finally:
        for s in servers:
            await s.close()


async def send(session, base, n, content):
    req = build_request("chatbot", content)

    async def one():
        async with session.request(req.method, base + req.target, data=req.body, headers=req.headers) as r:
            await r.read()
            return r.status
    return await asyncio.gather(*(one() for _ in range(n)))


def test_round_robin_counts_and_prometheus_text():
    async def main():
        profiles = default_profiles() | {"chatbot": PROFILE}
        async with replica_servers(PROFILE) as (replicas, servers), \
                LoadBalancer(profiles, ["chatbot", "imgcls"], sample_interval_s=0.05) as lb, \
                aiohttp.ClientSession() as session:
            for i, s in enumerate(servers):
                lb.services["chatbot"].add(f"chatbot-{i}", str(s.make_url("")))
            base = lb.endpoint("chatbot")
            # 6 at once: 3 per replica, 200 ms each -> the last of each takes 600 ms (> 480 SLO)
            statuses = await send(session, base, 6, ContentSet())
            statuses += await send(session, base, 8, ContentSet())  # 4 per replica: 2+ violate
            await asyncio.sleep(0.5)
            window = lb.window(10)
            async with session.get(lb.metrics_url + "/metrics") as r:
                text = await r.text()
            async with session.get(lb.metrics_url + "/window?seconds=10") as r:
                as_json = await r.json()
            return statuses, [r.served for r in replicas], window, text, as_json

    statuses, served, window, text, as_json = asyncio.run(main())
    assert statuses == [200] * 14
    assert served == [7, 7]
    w = window["chatbot"]
    assert w.arrivals == 14 and w.completed == 14 and w.instances == 2
    assert w.violations >= 6  # per replica, 1 of the first 3 and 2 of the next 4 wait behind two or more
    # the counter and the histogram are two records of the same durations: they must agree
    fast = re.search(rf'{DURATION}_bucket{{le="0.48",service="chatbot"}} ([0-9.]+)', text)
    assert fast is not None and w.violations == 14 - float(fast.group(1))
    assert 0 < w.utilization <= 1
    assert window["imgcls"].arrivals == 0 and window["imgcls"].instances == 0
    assert as_json["chatbot"]["arrivals"] == 14
    for name in (REQUESTS, DURATION + "_bucket", VIOLATIONS, IN_FLIGHT, READY, UTILIZATION):
        assert name in text, name
    assert 'le="0.48"' in text and 'le="0.5"' in text and 'le="2.5"' in text  # a bucket at each SLO
    assert f'{REQUESTS}{{code="200",service="chatbot"}} 14.0' in text
    assert f'{IN_FLIGHT}{{replica="chatbot-0",service="chatbot"}} 0.0' in text


def test_no_replica_is_503_and_a_dead_replica_leaves_rotation():
    async def main():
        profiles = default_profiles() | {"chatbot": PROFILE}
        replicas = [EmulatedReplica("chatbot", PROFILE) for _ in range(2)]
        servers = [TestServer(r.app(), host="127.0.0.1") for r in replicas]
        for s in servers:
            await s.start_server()
        failures = []
        async with LoadBalancer(profiles, ["chatbot"]) as lb, aiohttp.ClientSession() as session:
            base = lb.endpoint("chatbot")
            empty = await send(session, base, 1, ContentSet())
            sb = lb.services["chatbot"]
            sb.on_failure = lambda svc, rep: failures.append(rep)
            for i, s in enumerate(servers):
                sb.add(f"chatbot-{i}", str(s.make_url("")))
            await servers[0].close()  # replica 0 is gone: connections are refused
            after = await send(session, base, 4, ContentSet())
            await servers[1].close()
            return empty, after, failures, [b.replica for b in sb.rotation()], lb.window(5)["chatbot"]

    empty, after, failures, rotation, w = asyncio.run(main())
    assert empty == [503]
    assert after == [200] * 4  # refused connections are retried on the next replica
    assert failures == ["chatbot-0"] and rotation == ["chatbot-1"]
    assert w.violations >= 1  # the 503


def test_a_client_closing_mid_request_is_counted_not_a_traceback(caplog, capfd):
    """The main job printed aiohttp's "Error handling request … ConnectionResetError" traceback
    when a UE's client closed its connection while sending: now it is one count and one
    on_lost call (an event line in the run directory), and nothing on the console."""
    import logging

    from testbed.metrics.exposition import LOST

    async def main():
        profiles = default_profiles() | {"chatbot": PROFILE}
        replica = EmulatedReplica("chatbot", PROFILE, seed=0)
        server = TestServer(replica.app(), host="127.0.0.1")
        await server.start_server()
        lost = []
        try:
            async with LoadBalancer(profiles, ["chatbot"]) as lb, aiohttp.ClientSession() as session:
                sb = lb.services["chatbot"]
                sb.add("chatbot-0", str(server.make_url("")))
                sb.on_lost = lambda service, when: lost.append((service, when))
                host, port = lb.endpoint("chatbot").split("//")[1].split(":")
                # a request whose body never arrives in full: the client closes mid-upload
                _, writer = await asyncio.open_connection(host, int(port))
                writer.write(b"POST /api/generate HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n"
                             b"Content-Type: application/json\r\n\r\n" + b"x" * 1000)
                await writer.drain()
                writer.transport.abort()
                # a client that closes while the replica is still working on its request
                _, writer = await asyncio.open_connection(host, int(port))
                req = build_request("chatbot", ContentSet())
                writer.write(f"POST {req.target} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(req.body)}\r\n"
                             "Content-Type: application/json\r\n\r\n".encode() + req.body)
                await writer.drain()
                await asyncio.sleep(0.01)
                writer.transport.abort()
                for _ in range(100):
                    if sb.lost_connections >= 2:
                        break
                    await asyncio.sleep(0.02)
                statuses = await send(session, lb.endpoint("chatbot"), 2, ContentSet())  # still serving
                async with session.get(lb.metrics_url + "/metrics") as r:
                    text = await r.text()
                return sb.lost_connections, lost, statuses, text
        finally:
            await server.close()

    with caplog.at_level(logging.DEBUG):
        count, lost, statuses, text = asyncio.run(main())
    assert count == 2 and statuses == [200, 200]
    assert lost == [("chatbot", "while sending the request"), ("chatbot", "while waiting for the response")]
    assert f'{LOST}{{service="chatbot"}} 2.0' in text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err and "ConnectionResetError" not in out + err


def test_queue_length_counts_requests_waiting_beyond_capacity():
    """Six requests at once on one replica of capacity 1 (200 ms each): mid-way one is processed and
    the others wait, so the window's queue length is positive; once all have answered it is 0."""
    async def main():
        profiles = default_profiles() | {"chatbot": PROFILE}
        replica = EmulatedReplica("chatbot", PROFILE, seed=0)
        server = TestServer(replica.app(), host="127.0.0.1")
        await server.start_server()
        try:
            async with LoadBalancer(profiles, ["chatbot"], sample_interval_s=0.05) as lb, \
                    aiohttp.ClientSession() as session:
                lb.services["chatbot"].add("chatbot-0", str(server.make_url("")))
                sending = asyncio.ensure_future(send(session, lb.endpoint("chatbot"), 6, ContentSet()))
                await asyncio.sleep(0.3)  # the first answered by 200 ms; four more to go by 1.2 s
                during = lb.window(10)["chatbot"].queue_length
                statuses = await sending
                await asyncio.sleep(0.1)
                return statuses, during, lb.window(10)["chatbot"].queue_length
        finally:
            await server.close()

    statuses, during, after = asyncio.run(main())
    assert statuses == [200] * 6
    assert 2 <= during <= 5  # 6 sent, one in service, at least one answered by 300 ms
    assert after == 0


def test_a_window_holds_the_latency_with_the_upload_and_without_it():
    """A request whose body arrives over 200 ms (a slow uplink) counts those 200 ms in its
    latency (`mean_latency_ms`, from its headers at the service) and not in the service's own
    (`mean_service_latency_ms`): a policy that reads the first scales out during a network fade,
    one that reads the second does not."""
    req = build_request("chatbot", ContentSet())
    third = len(req.body) // 3

    async def slow_body():  # the real request's body in three parts, 100 ms apart
        for i in range(4):
            yield req.body[i * third:(i + 1) * third]
            await asyncio.sleep(0.1 if i < 3 else 0)

    async def main():
        fast = ServiceProfile(capacity=1, queue_limit=10, proc_time_ms=(50, 50), startup_ms=0,
                              slo_ms=2500)
        profiles = default_profiles() | {"chatbot": fast}
        async with replica_servers(fast, n=1) as (_, servers), \
                LoadBalancer(profiles, ["chatbot"], sample_interval_s=0.05) as lb, \
                aiohttp.ClientSession() as session:
            lb.services["chatbot"].add("chatbot-0", str(servers[0].make_url("")))
            headers = {**req.headers, "Content-Length": str(len(req.body))}
            async with session.post(lb.endpoint("chatbot") + req.target, data=slow_body(),
                                    headers=headers) as r:
                await r.read()
            return lb.window(10)["chatbot"]

    w = asyncio.run(main())
    assert w.completed == 1 and w.violations == 0, w
    assert w.mean_upload_ms >= 190, w  # the two 100 ms pauses inside its body
    assert w.mean_latency_ms >= w.mean_upload_ms + 45  # the upload, then the replica's 50 ms
    assert w.mean_service_latency_ms < 150, w  # the replica's 50 ms and the hops, no upload


def test_a_replica_slower_than_the_upstream_timeout_is_504_and_the_next_request_is_served():
    """A replica that takes 400 ms against a 0.2 s upstream timeout: the client gets 504 at the
    timeout (the balancer's own answer), counted as a violation; the balancer serves on."""
    slow = ServiceProfile(capacity=2, queue_limit=10, proc_time_ms=(400, 400), startup_ms=0,
                          slo_ms=2000)

    async def main():
        profiles = default_profiles() | {"chatbot": slow}
        async with replica_servers(slow, n=1) as (_, servers), \
                LoadBalancer(profiles, ["chatbot"], upstream_timeout_s=0.2) as lb, \
                aiohttp.ClientSession() as session:
            lb.services["chatbot"].add("chatbot-0", str(servers[0].make_url("")))
            req = build_request("chatbot", ContentSet())
            t0 = asyncio.get_running_loop().time()
            async with session.post(lb.endpoint("chatbot") + req.target, data=req.body,
                                    headers=req.headers) as r:
                first = (r.status, (await r.json())["error"], asyncio.get_running_loop().time() - t0)
            lb.services["chatbot"].upstream_timeout_s = 5.0
            second = await send(session, lb.endpoint("chatbot"), 1, ContentSet())
            return first, second, lb.window(10)["chatbot"]

    (status, error, took), second, w = asyncio.run(main())
    assert (status, error) == (504, "replica timed out") and 0.19 <= took < 0.35, took
    assert second == [200] and w.completed == 2 and w.violations >= 1
