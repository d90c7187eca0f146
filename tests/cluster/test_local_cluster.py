"""LocalCluster with real replica processes, time-scaled: readiness, scaling within the unit pool,
graceful scale-down, and a SIGKILLed replica detected and replaced."""

import asyncio
import os
import signal
from pathlib import Path

import pytest

from testbed.cluster.base import ClusterBackend
from testbed.cluster.local import LocalCluster, LocalClusterConfig
from testbed.errors import ConfigError, StateError
from testbed.load.client import ClientConfig, LoadClient
from testbed.load.trace import constant_schedule
from testbed.profiles import ServiceProfile

SLOW = ServiceProfile(capacity=1, queue_limit=20, proc_time_ms=(300, 300), startup_ms=500, slo_ms=2500)


def test_protocol_readiness_and_unit_pool():
    async def main():
        config = LocalClusterConfig(
            services=["chatbot", "imgcls"],
            total_units=3,
            time_scale=20,
            initial={"chatbot": 1, "imgcls": 1},
        )
        async with LocalCluster(config) as c:
            assert isinstance(c, ClusterBackend)
            assert c.ready_replicas("chatbot") == 0 and c.desired_replicas("chatbot") == 1
            await c.wait_ready(15)
            assert c.free_units() == 1
            c.scale("imgcls", 2)
            assert c.free_units() == 0
            with pytest.raises(StateError, match="free resource units"):
                c.scale("chatbot", 2)
            with pytest.raises(ConfigError, match="unknown service"):
                c.scale("nope", 1)
            await c.wait_ready(15)
            records = []
            async with LoadClient(ClientConfig("imgcls", c.endpoint("imgcls")), [records.append]) as cl:
                await cl.run_open_loop(constant_schedule(20, 0.5))
            kinds = [e.kind for e in c.events]
            return records, kinds, c.window(30)["imgcls"]  # scenario seconds: 1.5 s of wall time

    records, kinds, w = asyncio.run(main())
    assert len(records) == 10 and all(r.ok for r in records)
    assert kinds.count("ready") == 3
    assert w.arrivals == 10 and w.instances == 2


@pytest.mark.timed
def test_scale_down_finishes_in_flight_requests():
    async def main():
        profiles = {"chatbot": SLOW}
        async with LocalCluster(LocalClusterConfig(profiles=profiles, time_scale=1.0, initial=2)) as c:
            await c.wait_ready(15)
            records = []
            async with LoadClient(ClientConfig("chatbot", c.endpoint("chatbot")), [records.append]) as cl:
                load = asyncio.create_task(cl.run_open_loop(constant_schedule(20, 0.3)))  # 6 requests
                # all 6 at the balancer; the last may still be on its way to its replica, which
                # then gets its SIGTERM after answering it
                while c.window(30)["chatbot"].arrivals < 6:
                    await asyncio.sleep(0.01)
                c.scale("chatbot", 1)  # one replica drains the requests it already holds
                assert c.desired_replicas("chatbot") == 1 and c.ready_replicas("chatbot") == 1
                await load
            await c.wait_for(lambda: c.free_units() == 7, 10)
            return records, [e.kind for e in c.events]

    records, kinds = asyncio.run(main())
    assert len(records) == 6 and all(r.ok for r in records), [r.error for r in records]
    assert "draining" in kinds and "stopped" in kinds and "died" not in kinds


def test_a_replica_taken_out_gets_its_sigterm_once_the_balancers_requests_to_it_are_answered():
    """The scale-down race: a request the balancer had sent to a replica, which the replica had not
    read yet, when the replica was taken out. Signalled at once, the replica drained with nothing
    admitted and the request got its 503 or a refused connection. Here the balancer's upstream
    pool holds the request (a stand-in for it in flight) while the replica is stopped."""
    quick = ServiceProfile(capacity=1, queue_limit=20, proc_time_ms=(20, 20), startup_ms=100, slo_ms=2500)

    async def main():
        async with LocalCluster(LocalClusterConfig(profiles={"chatbot": quick}, time_scale=1.0,
                                                   initial=2)) as c:
            await c.wait_ready(15)
            sb = c.lb.services["chatbot"]
            exchange, sending, send = sb._pool.exchange, asyncio.Event(), asyncio.Event()

            async def held(*args, **kwargs):
                sending.set()
                await send.wait()
                return await exchange(*args, **kwargs)

            sb._pool.exchange = held
            records = []
            async with LoadClient(ClientConfig("chatbot", c.endpoint("chatbot")), [records.append]) as cl:
                load = asyncio.create_task(cl.run_open_loop(constant_schedule(1, 1.0)))
                await asyncio.wait_for(sending.wait(), 10)
                [name] = [b.replica for b in sb.backends.values() if b.in_flight]
                [victim] = [r for r in c.replicas("chatbot") if r.name == name]
                c._supervisor.stop(victim)
                await asyncio.sleep(0.5)
                alive = victim.proc.returncode is None
                send.set()
                await load
            await c.wait_for(lambda: victim.proc.returncode is not None, 10)
            return alive, records, [(e.replica, e.kind) for e in c.events]

    alive, records, events = asyncio.run(main())
    assert alive, "the replica was signalled with the balancer's request on its way to it"
    assert len(records) == 1 and records[0].ok, [r.error for r in records]
    stopped = [r for r, kind in events if kind == "stopped"]
    assert len(stopped) == 1 and ("unreachable" not in {k for _, k in events})


@pytest.mark.timed
def test_sigkilled_replica_is_detected_and_replaced():
    """A replica killed outright is out of rotation at once and replaced; every request after
    it is answered by a replica alive (routing, not latency: the client waits up to 30 s, since
    on a loaded CI machine the replacement's start-up and the other workers hold the cores)."""
    async def main():
        config = LocalClusterConfig(
            services=["tts"],
            time_scale=20,
            initial=2,
            use_espeak=False,
        )
        async with LocalCluster(config) as c:
            await c.wait_ready(15)
            victim = c.replicas("tts")[0]
            os.kill(victim.proc.pid, signal.SIGKILL)
            await c.wait_for(lambda: any(e.kind == "died" for e in c.events), 5)
            assert c.ready_replicas("tts") == 1  # out of rotation at once
            records = []
            client = ClientConfig("tts", c.endpoint("tts"), timeout_s=30.0)
            async with LoadClient(client, [records.append]) as cl:
                await cl.run_open_loop(constant_schedule(20, 0.25))
            await c.wait_ready(15)
            return victim.name, c.events, records

    victim, events, records = asyncio.run(main())
    died = [e for e in events if e.kind == "died"]
    assert [e.replica for e in died] == [victim] and "SIGKILL" in died[0].detail
    replaced = [e for e in events if e.kind == "replaced"]
    assert len(replaced) == 1 and victim in replaced[0].detail
    assert all(r.ok for r in records), [(r.status, r.error, round(r.latency_ms)) for r in records]


def test_a_lost_client_connection_is_one_event_and_a_count():
    """The scenario runner writes every cluster event to the cell's events.jsonl: a client that
    leaves mid-request becomes one `connection_lost` line there, not a console traceback."""
    async def main():
        seen = []
        config = LocalClusterConfig(
            services=["imgcls"],
            initial=1,
            time_scale=20,
        )
        async with LocalCluster(config, on_event=seen.append) as c:
            await c.wait_ready(15)
            host, port = c.endpoint("imgcls").split("//")[1].split(":")
            _, writer = await asyncio.open_connection(host, int(port))
            writer.write(b"POST /classify_batch HTTP/1.1\r\nHost: x\r\nContent-Length: 50000\r\n\r\nxx")
            await writer.drain()
            writer.transport.abort()
            await c.wait_for(lambda: any(e.kind == "connection_lost" for e in seen), 5)
            return [e for e in seen if e.kind == "connection_lost"], c.status()["_cluster"]

    lost, status = asyncio.run(main())
    assert len(lost) == 1 and lost[0].service == "imgcls" and "while sending" in lost[0].detail
    assert status["lost_connections"] == {"imgcls": 1}


def test_share_and_batch_reach_the_replicas_and_a_share_change_restarts_beside_the_old():
    from testbed.cluster.base import GpuClusterBackend, ServiceTarget
    from testbed.profiles import default_profiles

    async def main():
        profiles = {"imgcls": default_profiles()["imgcls"].replace(startup_ms=2000)}
        config = LocalClusterConfig(
            profiles=profiles,
            services=["imgcls"],
            total_units=8,
            time_scale=20,
            initial={"imgcls": 2},
        )
        async with LocalCluster(config) as c:
            assert isinstance(c, GpuClusterBackend)
            await c.wait_ready(15)
            assert c.gpu_free_pct() == [50.0, 100.0]
            applied = c.configure("imgcls", ServiceTarget(1, 50.0, 4))
            assert applied == ServiceTarget(1, 50.0, 4)
            assert c.gpu_free_pct() == [0.0, 100.0]  # the old slices serve until the new one is ready
            await c.wait_for(lambda: c.share_used_pct("imgcls") == 50.0, 15)
            assert c.target("imgcls") == ServiceTarget(1, 50.0, 4, (0,))
            c.configure("imgcls", ServiceTarget(1, 50.0, 2))
            await asyncio.sleep(0.3)
            (r,) = c.replicas("imgcls")
            async with c._http.get(r.url + "/healthz") as resp:
                assert resp.status == 200
            async with c._http.get(r.url + "/healthz") as resp:
                told = await resp.json()
            async with c._http.post(r.url + "/_config", json={"batch": 3}) as resp:
                return told["batch"], told["share_pct"], resp.status  # no token: refused

    assert asyncio.run(main()) == (2, 50.0, 401)


def test_more_replicas_while_a_share_change_is_under_way_apply_what_fits():
    """A planner (inss, policies-ci) that asks for more replicas of a service whose new share is
    still starting beside its old replicas gets as many as fit, not a StateError: the retiring
    replicas hold their share but are not counted as the service's."""
    from testbed.cluster.base import ServiceTarget
    from testbed.profiles import default_profiles

    async def main():
        profiles = {"imgcls": default_profiles()["imgcls"].replace(startup_ms=40000)}
        config = LocalClusterConfig(profiles=profiles, services=["imgcls"], total_units=8,
                                    time_scale=20, initial={"imgcls": 2})
        async with LocalCluster(config) as c:
            await c.wait_ready(15)
            c.configure("imgcls", ServiceTarget(1, 50.0, 4))  # two 25 % retire beside one 50 %
            assert c.gpu_free_pct() == [0.0, 100.0]
            c.configure("imgcls", ServiceTarget(4, 50.0, 4))  # two more 50 % fit, not three
            new = [r for r in c.replicas("imgcls") if not r.retiring]
            return len(new), c.gpu_free_pct()

    assert asyncio.run(main()) == (3, [0.0, 0.0])


def test_replicas_on_one_emulated_gpu_are_told_their_interference_and_when_neighbours_go():
    """interference=True: two replicas on the one GPU each report 1 + InSS's term for the other;
    when the neighbour has exited the survivor is told 1.0. A policy's placement is honoured."""
    from testbed.cluster.base import ServiceTarget
    from testbed.profiles import default_profiles, gpu_stretches

    profiles = {s: p.replace(startup_ms=200) for s, p in default_profiles().items()}
    gpu = profiles["imgcls"].gpu
    both = gpu_stretches([("a", 0, 25.0, gpu), ("b", 0, 25.0, gpu)])["a"]
    assert both == pytest.approx(1 + 0.25 * 0.6 * 0.25 + 0.20 * 0.5 * 0.25)  # the curve's numbers

    async def reported(c):
        rows = await c.probe()
        return sorted((r["service"], r["gpu"], r["stretch"], r["stretch_set"]) for r in rows)

    async def main(interference):
        config = LocalClusterConfig(
            profiles=profiles,
            services=["chatbot", "imgcls"],
            total_units=8,
            time_scale=20,
            initial={"chatbot": 1, "imgcls": 1},
            interference=interference,
            use_espeak=False,
        )
        async with LocalCluster(config) as c:
            await c.wait_ready(15)
            await asyncio.sleep(0.3)  # the tell after the second replica became ready
            together = await reported(c)
            c.scale("chatbot", 0)
            await c.wait_for(lambda: not c.replicas("chatbot"), 15)
            await asyncio.sleep(0.3)
            alone = await reported(c)
            # inss's placement: a 50 % imgcls replica on GPU 1, where nobody presses
            c.configure("imgcls", ServiceTarget(1, 50.0, 2, (1,)))
            await c.wait_for(lambda: [r.gpu for r in c.replicas("imgcls")] == [1], 15)
            await asyncio.sleep(0.3)
            moved = await reported(c)
        return together, alone, moved

    together, alone, moved = asyncio.run(main(True))
    assert together == [("chatbot", 0, both, both), ("imgcls", 0, both, both)]
    assert alone == [("imgcls", 0, 1.0, 1.0)]
    assert moved == [("imgcls", 1, 1.0, 1.0)]
    together, _, _ = asyncio.run(main(False))
    assert together == [("chatbot", 0, 1.0, 1.0), ("imgcls", 0, 1.0, 1.0)]


def test_replicas_read_their_profile_from_a_file_not_their_command_line():
    """`ps` shows a replica's command line: kilobytes of profile JSON there drown it."""

    async def main():
        async with LocalCluster(LocalClusterConfig(services=["imgcls"], time_scale=20, initial=1)) as c:
            await c.wait_ready(15)
            pid = c.replicas("imgcls")[0].proc.pid
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            path = argv[argv.index(b"--profile-file") + 1].decode()
            return argv, os.path.exists(path), path

    argv, existed, path = asyncio.run(main())
    assert b"--profile" not in argv
    assert sum(len(a) for a in argv) < 600, argv
    assert existed and not os.path.exists(path)  # removed with the cluster


def test_replicas_import_the_package_of_the_harness_that_starts_them():
    """A harness run from a copy of the package (a worktree, from any folder) starts replicas of
    that copy, not of the installed one: their PYTHONPATH is the folder holding the package."""
    import testbed
    from testbed.cluster.local.launch import _child_env

    path = _child_env("token")["PYTHONPATH"].split(os.pathsep)[0]
    assert (Path(path) / "testbed" / "__init__.py").resolve() == Path(testbed.__file__).resolve()


def test_warm_initial_replicas_are_ready_without_their_startup_and_a_scaled_up_one_pays_it():
    """`initial_warm` (a cell's cluster): the initial replica answers its first request well
    before its profile's 20 s of startup, while the one the scaler adds is still starting 3 s
    after it was asked for."""
    long_start = ServiceProfile(capacity=1, queue_limit=20, proc_time_ms=(5, 5), startup_ms=20000,
                                slo_ms=2500)

    async def main():
        config = LocalClusterConfig(profiles={"chatbot": long_start}, services=["chatbot"],
                                    initial={"chatbot": 1}, initial_warm=True)
        async with LocalCluster(config) as c:
            t0 = asyncio.get_running_loop().time()
            await c.wait_ready(15)
            warm_s = asyncio.get_running_loop().time() - t0
            c.scale("chatbot", 2)
            await asyncio.sleep(3.0)
            return warm_s, c.ready_replicas("chatbot"), c.desired_replicas("chatbot")

    warm_s, ready, desired = asyncio.run(main())
    assert warm_s < 15, warm_s
    assert (ready, desired) == (1, 2)
