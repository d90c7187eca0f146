"""Checks of command-line values, before any work starts: each failure is one ConfigError line
naming the option (`<command line>: --rate: must be > 0, got 0`)."""

from __future__ import annotations

import errno
import ipaddress
import math
import os
import socket
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from testbed.errors import ConfigError, ConfigProblem

if TYPE_CHECKING:
    from pydantic import BaseModel

SOURCE = "<command line>"


def bad(option: str, message: str) -> ConfigError:
    return ConfigError([ConfigProblem(SOURCE, None, option, message)])


def number(option: str, value: float | None, *, gt: float | None = None, ge: float | None = None,
           le: float | None = None) -> None:
    """A finite number within bounds (None: the option was not given)."""
    if value is None:
        return
    if not math.isfinite(value):
        raise bad(option, f"must be a finite number, got {value}")
    if gt is not None and not value > gt:
        raise bad(option, f"must be > {gt:g}, got {value:g}")
    if ge is not None and not value >= ge:
        raise bad(option, f"must be >= {ge:g}, got {value:g}")
    if le is not None and not value <= le:
        raise bad(option, f"must be <= {le:g}, got {value:g}")


def like_field(option: str, model: type[BaseModel], field: str, value: Any) -> Any:
    """`value` validated exactly as `model.field` in a file (same rules, same friendly message)."""
    if value is None:
        return None
    # pydantic and yaml load only for a command that validates: `testbed --help` starts fast
    from pydantic import TypeAdapter, ValidationError

    from testbed.config.yamlfile import friendly_message

    info = model.model_fields[field]
    strict = model.model_config.get("strict", False)
    adapter: TypeAdapter[Any] = TypeAdapter(
        info.rebuild_annotation(),
        config={"strict": strict, "allow_inf_nan": model.model_config.get("allow_inf_nan", True)})
    try:
        return adapter.validate_python(value)
    except ValidationError as exc:
        raise bad(option, friendly_message(exc.errors()[0])) from None


def http_url(option: str, url: str, schemes: tuple[str, ...] = ("http", "https")) -> str:
    """A URL of one of `schemes` with a host and a valid port."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise bad(option, f"not a URL ({exc}): {url!r}") from None
    if parts.scheme not in schemes or not parts.hostname:
        raise bad(option, f"must be {' or '.join(x + '://HOST:PORT' for x in schemes)}, "
                          f"got {url!r}")
    if port == 0:
        raise bad(option, f"port must be 1-65535, got {url!r}")
    return url


def port(option: str, value: int, span: int = 1) -> None:
    """A TCP port such that `value .. value+span-1` are all valid."""
    if not 1 <= value <= 65535 - (span - 1):
        top = 65535 - (span - 1)
        raise bad(option, f"must be 1-{top}" + (f" (it and the next {span - 1} ports)" if span > 1
                                                 else "") + f", got {value}")


def local_address(option: str, address: str) -> str:
    """An IP address of this machine (one a socket can bind to), checked by binding port 0."""
    if address == "localhost":
        address = "127.0.0.1"
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        raise bad(option, f"not an IP address: {address!r}") from None
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        try:
            s.bind((str(ip), 0))
        except OSError as exc:
            why = ("not an address of this machine (or of this namespace)"
                   if exc.errno == errno.EADDRNOTAVAIL else exc.strerror)
            raise bad(option, f"cannot use {address}: {why}") from None
    return str(ip)


def _nearest_existing(path: Path) -> Path:
    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def _probe_dir(option: str, directory: Path, target: Path) -> None:
    if not directory.is_dir():
        raise bad(option, f"cannot write {target}: {directory} is not a directory")
    try:
        fd, name = tempfile.mkstemp(dir=directory, prefix=".tb-write-probe-")
    except OSError as exc:
        raise bad(option, f"cannot write {target}: {exc.strerror} ({directory})") from None
    os.close(fd)
    os.unlink(name)


def writable_dir(option: str, path: Path) -> Path:
    """A directory that exists and is writable, or that can be created; creates nothing."""
    if path.exists() and not path.is_dir():
        raise bad(option, f"{path} exists and is not a directory")
    _probe_dir(option, _nearest_existing(path), path)
    return path


def writable_file(option: str, path: Path) -> Path:
    """A file that can be written (appended to when it exists); creates nothing."""
    if path.is_dir():
        raise bad(option, f"{path} is a directory")
    if path.exists():
        if not os.access(path, os.W_OK):
            raise bad(option, f"cannot write {path}: permission denied")
        try:
            with path.open("ab"):
                pass
        except OSError as exc:
            raise bad(option, f"cannot write {path}: {exc.strerror}") from None
        return path
    _probe_dir(option, _nearest_existing(path.parent), path)
    return path


def trace_units(time_unit: str | None, rate_unit: str | None) -> None:
    """--trace-time-unit and --trace-rate-unit name units a CSV trace's reader knows (None: not
    given)."""
    from testbed.load.trace_csv import caller_unit  # numpy: only when a unit is given

    for option, text, kind in (("--trace-time-unit", time_unit, "time"),
                               ("--trace-rate-unit", rate_unit, "rate")):
        if text is not None:
            try:
                caller_unit(text, kind)
            except ValueError as e:
                raise bad(option, str(e)) from None
