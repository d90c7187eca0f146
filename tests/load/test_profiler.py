"""The profiler recovers a known emulated replica's processing range and capacity, and times a
LocalCluster replica's startup."""

import asyncio

import pytest
from aiohttp.test_utils import TestServer

from testbed.cluster.local import LocalCluster, LocalClusterConfig
from testbed.cluster.replica import EmulatedReplica
from testbed.load.profiler import measure_startup, profile_service
from testbed.profiles import ServiceProfile
from testbed.pytest_plugin import MachineBehind
from tests.conftest import cpu_wait_s

KNOWN = ServiceProfile(capacity=2, queue_limit=50, proc_time_ms=(40, 60), startup_ms=0, slo_ms=500)


# its 95th percentile is the second-worst of 30 wall-clock latencies: at a worker's nice 10 beside
# a busy process it read 88.7 ms against 60 (busy-suite runs 5 and 23); it runs with the timed tests
@pytest.mark.slow  # a rate sweep: about 10 s
@pytest.mark.timed
def test_processing_range_and_capacity_of_a_known_replica():
    async def main():
        replica = EmulatedReplica("chatbot", KNOWN, seed=2)
        async with TestServer(replica.app(), host="127.0.0.1") as srv:
            return await profile_service(
                "chatbot", str(srv.make_url("")).rstrip("/"), requests=30, step_s=1.0
            )

    waited = cpu_wait_s()
    res = asyncio.run(main())
    waited = cpu_wait_s() - waited
    lo, hi = res.proc_range_ms
    assert 38 <= lo <= 50 and 50 <= hi <= 75, (lo, hi)
    # capacity 2 reads only where the fourth step (37 req/s against 40) is served in full; its
    # client and replica share this thread, and under the suite's workers it served 20 of 37 per
    # second while the thread waited for a core: the machine's, not the profiler's
    if res.capacity != 2 and waited > 0.2:
        raise MachineBehind(f"capacity read {res.capacity} (sweep {res.sweep}) while the thread "
                            f"waited {waited:.2f} s for a core", {"chatbot": waited * 1000.0})
    assert res.capacity == 2, (res.sweep, f"waited for a core {waited:.2f} s")
    prof = res.to_profile(KNOWN.replace(capacity=1))
    assert prof.capacity == 2 and prof.slo_ms == 500


def test_startup_time_through_the_cluster_backend():
    prof = ServiceProfile(capacity=1, queue_limit=5, proc_time_ms=(1, 2), startup_ms=20000, slo_ms=500)

    async def main():
        config = LocalClusterConfig(
            profiles={"tts": prof},
            time_scale=10,
            initial=1,
            use_espeak=False,
        )
        async with LocalCluster(config) as c:
            await c.wait_ready(20)
            ms = await measure_startup(c, "tts", timeout_s=20)
            await c.wait_for(lambda: c.free_units() == 7, 10)
            return ms, c.desired_replicas("tts")

    ms, desired = asyncio.run(main())
    assert 1900 <= ms <= 5000  # 20 s / 10, plus process start on a busy machine
    assert desired == 1
