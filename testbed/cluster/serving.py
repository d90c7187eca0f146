"""An emulated replica (testbed.cluster.replica) as a process: its HTTP server (testbed.cluster.wire's
for a plain handler, aiohttp's for any other) and its serving loop, which drains on SIGTERM/SIGINT
or when the parent process is gone. Run `python3 -m testbed.cluster.serving --service imgcls
--profile-file PATH` (or `--profile JSON`)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from testbed.clock import ScenarioClock
from testbed.cluster.replica import TOKEN_ENV, EmulatedReplica, HandlerWork, ReplicaGpu
from testbed.cluster.wire import PlainServer
from testbed.net.cmd import exit_with_parent
from testbed.profiles import HEADER_TIMEOUT_S, ServiceProfile


@dataclass
class Listening:
    """A replica's server, listening: the port bound, and how to stop it."""

    port: int
    server: PlainServer | web.AppRunner

    async def close(self) -> None:
        """Stop listening and close its connections (drain the replica first)."""
        if isinstance(self.server, PlainServer):
            await self.server.close()
        else:
            await self.server.cleanup()


async def listen(replica: EmulatedReplica, host: str, port: int, *,
                 plain: bool | None = None) -> Listening:
    """Start the replica's HTTP server on host:port (0: any free port). A handler that reads only a
    request's line, headers and body (`plain_request`) is served by testbed.cluster.wire's server,
    any other by aiohttp's; `plain` chooses instead. Either closes a connection that has not sent
    a whole request (headers included) within HEADER_TIMEOUT_S, or stays idle that long."""
    if plain is None:
        plain = bool(getattr(replica.handler, "plain_request", False))
    if plain:
        server = PlainServer(replica.plain_routes(), idle_timeout_s=HEADER_TIMEOUT_S)
        return Listening(await server.start(host, port), server)
    runner = web.AppRunner(replica.app(), access_log=None, handle_signals=False,
                           keepalive_timeout=HEADER_TIMEOUT_S)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=1024)
    await site.start()
    return Listening(site._server.sockets[0].getsockname()[1], runner)  # type: ignore[union-attr]


async def serve(replica: EmulatedReplica, host: str, port: int,
                announce: Callable[[str], object] = print, parent_pid: int | None = None) -> None:
    """Serve until SIGTERM/SIGINT (or the parent process is gone), then drain gracefully and exit."""
    listening = await listen(replica, host, port)
    announce(f"LISTENING {listening.port}")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    orphan_watch = asyncio.create_task(_watch_parent(parent_pid, stop)) if parent_pid else None
    try:
        await stop.wait()
        await replica.drain()
    finally:
        if orphan_watch is not None:
            orphan_watch.cancel()
        await listening.close()


async def _watch_parent(parent_pid: int, stop: asyncio.Event) -> None:
    # A cluster killed with SIGKILL cannot stop its replicas; they notice and stop themselves.
    while os.getppid() == parent_pid:
        await asyncio.sleep(1.0)
    stop.set()


def main(argv: list[str] | None = None) -> int:
    """One replica, served until told to stop (the cluster launches it so)."""
    ap = argparse.ArgumentParser(prog="python3 -m testbed.cluster.serving", description=__doc__)
    ap.add_argument("--service", required=True, help="the service's name (its profile says what it does)")
    given = ap.add_mutually_exclusive_group(required=True)
    given.add_argument("--profile", help="ServiceProfile as JSON")
    given.add_argument("--profile-file", help="a file holding the ServiceProfile as JSON")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0 = any free port (announced on stdout)")
    ap.add_argument("--time-scale", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--no-espeak", action="store_true")
    ap.add_argument("--sleep-only", action="store_true",
                    help="spend the profile's time without the handler's work (decoding, synthesis)")
    ap.add_argument("--launched-at", type=float, default=None, help="epoch seconds the launch began")
    ap.add_argument("--warm", action="store_true",
                    help="ready once listening, without the profile's startup (a run's initial replica)")
    ap.add_argument("--parent-pid", type=int, default=None, help="exit when this process is gone")
    ap.add_argument("--batch", type=int, default=1, help="batch size (needs the profile's gpu curve)")
    ap.add_argument("--share", type=float, default=None, help="MPS share, %% of one GPU (gpu curve)")
    ap.add_argument("--stretch", type=float, default=1.0,
                    help="1 + interference from the neighbours on its emulated GPU")
    args = ap.parse_args(argv)
    if args.parent_pid:  # a SIGKILLed harness leaves no replica behind
        exit_with_parent(args.parent_pid)
    text = args.profile if args.profile is not None else Path(args.profile_file).read_text()
    profile = ServiceProfile.model_validate(json.loads(text))

    async def run() -> None:
        replica = EmulatedReplica(
            args.service,
            profile,
            clock=ScenarioClock(args.time_scale),
            seed=args.seed,
            work=HandlerWork(use_espeak=not args.no_espeak, sleep_only=args.sleep_only),
            launched_at=args.launched_at,
            warm=args.warm,
            gpu=ReplicaGpu(batch=args.batch, share_pct=args.share, stretch=args.stretch),
            admin_token=os.environ.get(TOKEN_ENV) or None,
        )
        await serve(
            replica, args.host, args.port, announce=lambda s: print(s, flush=True), parent_pid=args.parent_pid
        )

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
