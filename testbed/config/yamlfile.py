"""YAML loading that remembers the line of every key and value, for errors that point at them."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from testbed.errors import ConfigError, ConfigProblem

FieldPath = tuple[str | int, ...]
M = TypeVar("M", bound=BaseModel)


class LocatedYaml:
    """Plain data parsed from YAML plus the line (1-based) where each path starts."""

    def __init__(self, data: Any, lines: dict[FieldPath, int], source: str):
        self.data = data
        self.lines = lines
        self.source = source

    def line_of(self, path: FieldPath) -> int | None:
        """The line of `path`, or of its nearest ancestor that has one."""
        path = tuple(path)
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return self.lines.get(())

    def problem(self, path: FieldPath, message: str) -> ConfigProblem:
        return ConfigProblem(self.source, self.line_of(path), format_path(path), message)


def format_path(path: Iterable[str | int]) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def parse_yaml(text: str, source: str = "<string>") -> LocatedYaml:
    """Parse YAML text; duplicate keys and syntax errors become ConfigErrors with a line."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError([ConfigProblem(source, line, "", f"invalid YAML: {problem}")]) from None
    lines: dict[FieldPath, int] = {}
    if node is None:
        return LocatedYaml({}, {(): 1}, source)
    constructor = yaml.SafeLoader("")

    def convert(n: yaml.Node, path: FieldPath) -> Any:
        lines.setdefault(path, n.start_mark.line + 1)
        if isinstance(n, yaml.MappingNode):
            out: dict[Any, Any] = {}
            for key_node, value_node in n.value:
                key = constructor.construct_object(key_node, deep=True)
                if key == "<<":
                    raise ConfigError(
                        [ConfigProblem(source, key_node.start_mark.line + 1, format_path(path),
                                       "YAML merge keys (<<) are not supported")]
                    )
                child = (*path, key)
                if key in out:
                    raise ConfigError(
                        [ConfigProblem(source, key_node.start_mark.line + 1, format_path(child),
                                       "duplicate key")]
                    )
                lines[child] = key_node.start_mark.line + 1
                out[key] = convert(value_node, child)
            return out
        if isinstance(n, yaml.SequenceNode):
            return [convert(item, (*path, i)) for i, item in enumerate(n.value)]
        return constructor.construct_object(n, deep=True)

    return LocatedYaml(convert(node, ()), lines, source)


def read_config_text(path: str | Path, what: str = "") -> str:
    """A config or data file's text; an unreadable file is a ConfigError naming it."""
    p = Path(path)
    try:
        return p.read_text(encoding="utf-8")
    except OSError as exc:
        label = f"cannot read {what}" if what else "cannot read"
        raise ConfigError([ConfigProblem(str(p), None, "", f"{label}: {exc.strerror}")]) from None


def load_yaml_file(path: str | Path) -> LocatedYaml:
    return parse_yaml(read_config_text(path), str(path))


def validate(model: type[M], doc: LocatedYaml, root: FieldPath = ()) -> M:
    """Validate `doc` (or the subtree at `root`) as `model`, turning pydantic errors into
    ConfigErrors that name file, line and field."""
    data: Any = doc.data
    for part in root:
        data = data[part]
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = tuple(p for p in err["loc"] if not _is_union_tag(p))
            path = (*root, *loc)
            problems.append(doc.problem(path, _message(err)))
        raise ConfigError(problems) from None


def _is_union_tag(part: Any) -> bool:
    # pydantic inserts type names such as 'function-after[...]' into locs of unions
    return isinstance(part, str) and ("[" in part or part in {"str", "int", "float", "bool"})


def _message(err: dict[str, Any]) -> str:
    kind = err["type"]
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "missing":
        return "required field is missing"
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    value = err.get("input")
    if (kind != "model_type" and value is not None and not isinstance(value, dict | list)
            and repr(value) not in msg):
        return f"{msg} (got {value!r})"
    return msg
