"""The live page: `testbed watch RUN_DIR` serves it here; `run --web` and `reproduce --web` bind its
port before anything runs and serve it from a process beside the run's (`LiveServer`)."""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from testbed.cli import app, console, err_console

DEFAULT_ADDRESS = "127.0.0.1:0"  # what `--web` alone means: localhost, a free port
WEB_NICE = 10  # the page's server yields the cores to the run it watches
STOP_S = 5.0  # how long the server has to send the pages the run's end

WEB_HELP = ("Serve the live page of the run on [HOST:]PORT while it goes (`--web` alone: "
            "127.0.0.1 and a free port; the address is printed at start). Bound before the run "
            "starts: a port in use is an error. A HOST other than localhost shows the run to "
            "whoever reaches this machine.")
WebOpt = typer.Option("--web", metavar="[HOST:]PORT", help=WEB_HELP, show_default=False)


def bind_web(address: str) -> socket.socket:
    """The live page's listening socket on `address` ([HOST:]PORT); one error line (and exit 4)
    when the port is in use or the address is not this machine's.

    address: what --web was given."""
    from testbed.web.server import bind, is_loopback, parse_address  # aiohttp: only with --web

    host, port = parse_address(address)
    sock = bind(host, port)
    if not is_loopback(host):
        err_console.print(f"[yellow]live page on {escape(host)}: anyone who reaches this machine "
                          "sees the run (its figures, names and problems; no keys)[/]")
    return sock


class LiveServer:
    """`python -m testbed.web.server` on a bound socket, beside the run: its own process (the run's
    event loop runs the load balancer and must not wait for the page), at nice WEB_NICE, ended
    with this process. `stop()` lets it send the pages the run's end.

        with LiveServer(bind_web("8080"), run_dir=path): run(...)
    """

    def __init__(self, sock: socket.socket, *, run_dir: Path | None = None,
                 reproduce: Path | None = None):
        from testbed.net.cmd import die_with_parent  # prctl: only with --web
        from testbed.web.server import url_of  # aiohttp: only with --web

        self.url = url_of(sock)
        what = ["--run-dir", str(run_dir)] if run_dir is not None else ["--reproduce", str(reproduce)]
        death = die_with_parent()

        def preexec() -> None:
            if death is not None:
                death()
            os.nice(WEB_NICE)

        package = Path(__file__).resolve().parents[2]  # the copy of testbed this process runs
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [str(package), *filter(None, [os.environ.get("PYTHONPATH")])]))
        # the server closes its end of this pipe once it runs: a run shorter than its start
        # (a simulator scenario) waits for it before it ends it, and the pages get the end
        self._ready, ready_w = os.pipe()
        self.proc: subprocess.Popen[bytes] | None = subprocess.Popen(
            [sys.executable, "-m", "testbed.web.server", "--fd", str(sock.fileno()),
             "--ready-fd", str(ready_w), *what],
            pass_fds=[sock.fileno(), ready_w], preexec_fn=preexec, start_new_session=True,
            env=env, stdin=subprocess.DEVNULL)
        os.close(ready_w)
        sock.close()  # the server holds it now
        console.print(f"live page: [bold]{self.url}[/]", highlight=False)

    def __enter__(self) -> LiveServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """End the server once it has sent the pages the run's end (safe twice)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        select.select([self._ready], [], [], STOP_S)  # readable (EOF) once the server runs
        os.close(self._ready)
        if proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def watch_hint(run_dir: Path) -> str:
    """The line after a run with --web: its page has stopped, and how to see it again."""
    return f"live page stopped with the run; to look again: testbed watch {run_dir}"


@app.command("watch")
def watch(
    run_dir: Annotated[Path, typer.Argument(help="A run directory (runs/<time>-<scenario>), running "
                                            "or finished, or a reproduce's folder.")],
    web: Annotated[str, typer.Option("--web", metavar="[HOST:]PORT", help="Where to serve the "
                                     "page (default 127.0.0.1 and a free port, printed).")
                   ] = DEFAULT_ADDRESS,
) -> None:
    """Serve the live page of a run in progress in another terminal, or of a finished one (what
    it recorded), until Ctrl-C.

    Example: [bold]testbed watch runs/20261202T011609Z-smoke[/]   or   [bold]--web 8080[/]
    """
    import asyncio

    from testbed.web.server import LivePage, is_loopback, serve, url_of
    from testbed.web.sources import source_for

    source = source_for(run_dir)
    sock = bind_web(web)
    console.print(f"live page of {escape(str(run_dir))}: [bold]{url_of(sock)}[/] (Ctrl-C to stop)",
                  highlight=False)
    page = LivePage(source, loopback_only=is_loopback(sock.getsockname()[0]))
    asyncio.run(serve(page, sock))
