"""The `testbed` command: parses arguments, calls the library, prints results and progress."""

from __future__ import annotations

import sys

import typer
from rich.console import Console

from testbed.errors import TestbedError

app = typer.Typer(
    name="testbed",
    help="End-to-end 5G testbed harness for AI-native services.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)
console = Console()
err_console = Console(stderr=True)


def _register() -> None:
    # Each concern adds its commands in its own module; importing it registers them on `app`.
    import testbed.cli.core  # noqa: F401
    import testbed.cli.lab  # noqa: F401
    from testbed.cli import net  # noqa: F401
    from testbed.cli import scenario  # noqa: F401
    from testbed.cli import services  # noqa: F401
    from testbed.cli import sim  # noqa: F401


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script: one line per error, non-zero exit, no traceback."""
    _register()
    try:
        app(args=argv, standalone_mode=False)
    except TestbedError as exc:
        for line in str(exc).splitlines():
            err_console.print(f"[bold red]error:[/] {line}", highlight=False, markup=True)
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
    except Exception as exc:  # click usage errors arrive here in standalone_mode=False
        import click

        if isinstance(exc, click.ClickException):
            exc.show()
            return exc.exit_code
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
