"""The `testbed` command: parses arguments, calls the library, prints results and progress."""

from __future__ import annotations

import re
import sys

import typer
from rich.console import Console
from rich.markup import escape

from testbed.errors import TestbedError

app = typer.Typer(
    name="testbed",
    help="End-to-end 5G testbed harness for AI-native services.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)
# Piped or captured output has no terminal width; rich would then cut tables at 80 columns.
_WIDTH = None if sys.stdout.isatty() else 160
# no emoji codes: user text (an error's `file:100:`) would print as one (💯)
console = Console(width=_WIDTH, emoji=False)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 160, emoji=False)

# one option, one default for every command that reads the paper's traces
TracesOpt = typer.Option(None, "--traces", envvar="TESTBED_TRACES", show_default=False,
                         help="Trace directory with train/, val/ and test/ (DURATION COUNT "
                              "files). Default: the paper's traces, shipped with testbed "
                              "(testbed/traces).")


def show_traces(traces: object, on: Console | None = None) -> None:
    """One line per trace as it loads (`Trace.summary`: length, requests, mean and peak rate), so
    that a wrong unit shows before anything runs. traces: Trace objects; on: where (default
    stderr, beside a command's --json output)."""
    for trace in traces:  # type: ignore[attr-defined]
        (on or err_console).print(f"trace {escape(trace.summary())}", highlight=False)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            console.print(f"testbed {version('testbed')}")
        except PackageNotFoundError:  # a checkout run with python3 -m testbed, not installed
            console.print("testbed (not installed)")
        raise typer.Exit(0)


@app.callback()
def _options(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")) -> None:
    """End-to-end 5G testbed harness for AI-native services."""


def _register(argv: list[str] | None = None) -> None:
    """Register the commands: each concern adds its own in its module of testbed.cli, and
    importing it registers them on `app`. With `argv` naming a command, only that command's module
    is imported (a command starts without the others' imports); else every module (--help).

    argv: the command line after `testbed`, or None for every command."""
    import importlib

    word = next((a for a in argv or () if not a.startswith("-")), None)
    wanted = COMMAND_MODULES.get(word or "", MODULES)
    for module in wanted:
        importlib.import_module(f"testbed.cli.{module}")
    for info in [*app.registered_commands, *app.registered_groups]:
        name = info.name or (info.callback.__name__ if info.callback else "")
        info.rich_help_panel = next((panel for panel, names in HELP_PANELS.items()
                                     if name in names), None)
        doc = info.callback.__doc__ if info.callback else None
        if doc and isinstance(info, typer.models.CommandInfo) and not info.short_help:
            # the list shows the first paragraph; its line breaks are the source's, not the help's
            info.short_help = " ".join(doc.strip().split("\n\n")[0].split())


# `testbed --help` lists the commands by what a user does with them; each command's module (or
# modules: `sim fit-gpu` lives in gpu.py)
HELP_PANELS: dict[str, dict[str, str | tuple[str, ...]]] = {
    "Testbed": {"init": "net", "up": "net", "down": "net", "status": "net", "exec": "net",
                "traffic": "net", "demo": "net", "slice": "core", "subscriber": "core",
                "render": "core", "ue": "core"},
    "Services and load": {"services": "services", "load": "services", "profile": "services"},
    "Scenarios and reports": {"run": "scenario", "judge": "judge", "report": "scenario",
                              "export": "export", "reproduce": "reproduce", "watch": "web"},
    "Simulator and training": {"sim": ("sim", "gpu"), "train": "train", "tune": "train"},
}
# `lab`: the old spelling of `up|down|status --profile lab`, in no panel
COMMAND_MODULES: dict[str, tuple[str, ...]] = {
    name: (module,) if isinstance(module, str) else module
    for names in HELP_PANELS.values() for name, module in names.items()} | {"lab": ("lab",)}
MODULES = tuple(sorted({m for modules in COMMAND_MODULES.values() for m in modules}))


# options whose value may be left out (`testbed run X --web`): click takes a value always, so a
# bare one gets this default before click reads the line
OPTIONAL_VALUES = {"--web": ("127.0.0.1:0", re.compile(r"(?:(?:\[[0-9A-Fa-f:.]*\]|[^\s:/\[\]]+):)?\d+"))}


def optional_values(args: list[str]) -> list[str]:
    """`args` with each OPTIONAL_VALUES option that is not followed by a value of its form given
    its default (`--web scenarios/smoke.yaml` is `--web 127.0.0.1:0 scenarios/smoke.yaml`).

    args: the command line after `testbed`."""
    out = []
    for i, arg in enumerate(args):
        out.append(arg)
        if arg == "--":
            return out + args[i + 1:]
        if arg in OPTIONAL_VALUES:
            default, form = OPTIONAL_VALUES[arg]
            following = args[i + 1] if i + 1 < len(args) else None
            if following is None or not form.fullmatch(following):
                out.append(default)
    return out


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script: one line per error, non-zero exit, no traceback.

    argv: the command line after `testbed` (default: sys.argv's)."""
    args = optional_values(list(sys.argv[1:] if argv is None else argv))
    _register(args)
    try:
        # without standalone mode, click returns a command's typer.Exit code instead of raising
        rv = app(args=args, standalone_mode=False)
        if isinstance(rv, int):
            return rv
    except TestbedError as exc:
        for line in str(exc).splitlines() or [type(exc).__name__]:
            # user text (file names, values, patterns with brackets) is printed literally
            err_console.print(f"[bold red]error:[/] {escape(line)}", highlight=False, markup=True,
                              soft_wrap=True)
        return exc.exit_code
    except KeyboardInterrupt:
        err_console.print("[yellow]interrupted[/]")
        return 130
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        err_console.print("[yellow]aborted[/]")
        return 130
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    except Exception as exc:
        # usage errors (typer's vendored click) arrive here in standalone_mode=False
        show, code = getattr(exc, "show", None), getattr(exc, "exit_code", None)
        if callable(show) and isinstance(code, int):
            show()
            return code
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
