"""YAML loading that remembers the line of every key and value, for errors that point at them."""

from __future__ import annotations

import os
import stat
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


MAX_YAML_BYTES = 1 << 20  # a testbed or scenario file is a few KiB; this bounds the parser's work
MAX_TRACE_BYTES = 32 << 20  # a day at one line per second is under 1 MiB
MAX_DEPTH = 40  # nesting levels (mappings and sequences)
MAX_NODES = 100_000  # values after alias expansion (an alias bomb stops here)
_PLAIN_TAGS = {f"tag:yaml.org,2002:{t}" for t in
               ("str", "int", "float", "bool", "null", "map", "seq", "timestamp")}


class _Loader(yaml.SafeLoader):
    """SafeLoader that refuses nesting deeper than MAX_DEPTH while composing (PyYAML's composer
    recurses: a few hundred levels end in RecursionError)."""

    depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise yaml.composer.ComposerError(
                    None, None, f"nested deeper than {MAX_DEPTH} levels", mark)
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def parse_yaml(text: str, source: str = "<string>") -> LocatedYaml:
    """Parse YAML text into plain data; syntax errors, duplicate keys, tags other than YAML's plain
    types, non-scalar keys, merge keys, deep nesting and alias expansion past MAX_NODES values
    become ConfigErrors with a line."""
    node = _compose(text, source)
    if node is None:
        return LocatedYaml({}, {(): 1}, source)
    plain = _PlainData(source)
    return LocatedYaml(plain.convert(node, (), 0), plain.lines, source)


def _compose(text: str, source: str) -> yaml.Node | None:
    """The YAML node tree of `text` (None for an empty document); too large a text, a control
    character and a syntax error are ConfigErrors."""
    if len(text) > MAX_YAML_BYTES:
        raise ConfigError([ConfigProblem(source, None, "", f"file too large ({len(text):,} "
                                         f"characters; the limit is {MAX_YAML_BYTES:,})")])
    try:
        loader = _Loader(text)  # the reader refuses NUL and other control characters here
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        raise ConfigError([ConfigProblem(source, line, "", f"invalid YAML: control character "
                                         f"U+{exc.character:04X} is not allowed")]) from None
    try:
        return loader.get_single_node()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError([ConfigProblem(source, line, "", f"invalid YAML: {problem}")]) from None
    except RecursionError:  # only when the interpreter's own stack is already deep
        raise ConfigError([ConfigProblem(source, None, "", "invalid YAML: nested too deeply")]
                          ) from None
    finally:
        loader.dispose()


class _PlainData:
    """Converts a composed node tree to plain data, recording the line of every path in `lines`
    and refusing what parse_yaml refuses (counting values against MAX_NODES as it goes)."""

    def __init__(self, source: str):
        self.source = source
        self.lines: dict[FieldPath, int] = {}
        self.seen = 0
        self._constructor = yaml.SafeLoader("")

    def _fail(self, n: yaml.Node, path: FieldPath, message: str) -> ConfigError:
        return ConfigError([ConfigProblem(self.source, n.start_mark.line + 1, format_path(path),
                                          message)])

    def _scalar(self, n: yaml.Node, path: FieldPath) -> Any:
        if n.tag not in _PLAIN_TAGS:
            raise self._fail(n, path, f"YAML tag {n.tag!r} is not supported (plain values only)")
        try:
            return self._constructor.construct_object(n, deep=True)
        except yaml.YAMLError as exc:
            raise self._fail(n, path, f"invalid YAML: {getattr(exc, 'problem', None) or exc}"
                             ) from None
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError):
            # PyYAML's constructors fail this way on an explicit tag over text that is not of
            # that type: `!!int "abc"` (ValueError), `!!bool x` (KeyError), `!!timestamp x`
            kind = n.tag.rsplit(":", 1)[-1]
            raise self._fail(n, path, f"invalid YAML: {n.value!r} is not a valid {kind} "
                             f"(tag !!{kind})") from None

    def convert(self, n: yaml.Node, path: FieldPath, depth: int) -> Any:
        self.seen += 1
        if self.seen > MAX_NODES:
            raise self._fail(n, path[:1], f"more than {MAX_NODES:,} values (aliases expand to too much)")
        if depth > MAX_DEPTH:
            raise self._fail(n, path[:1], f"nested deeper than {MAX_DEPTH} levels (a recursive alias?)")
        self.lines.setdefault(path, n.start_mark.line + 1)
        if n.tag == "tag:yaml.org,2002:merge" or (isinstance(n, yaml.ScalarNode)
                                                   and n.tag.endswith(":merge")):
            raise self._fail(n, path, "YAML merge keys (<<) are not supported")
        if isinstance(n, yaml.MappingNode):
            return self._mapping(n, path, depth)
        if isinstance(n, yaml.SequenceNode):
            if n.tag not in _PLAIN_TAGS:
                raise self._fail(n, path, f"YAML tag {n.tag!r} is not supported (plain values only)")
            return [self.convert(item, (*path, i), depth + 1) for i, item in enumerate(n.value)]
        return self._scalar(n, path)

    def _mapping(self, n: yaml.MappingNode, path: FieldPath, depth: int) -> dict[Any, Any]:
        if n.tag not in _PLAIN_TAGS:
            raise self._fail(n, path, f"YAML tag {n.tag!r} is not supported (plain values only)")
        out: dict[Any, Any] = {}
        for key_node, value_node in n.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise self._fail(key_node, path, "YAML merge keys (<<) are not supported")
            if not isinstance(key_node, yaml.ScalarNode):
                raise self._fail(key_node, path, "a key must be a plain value, not a "
                                 + ("mapping" if isinstance(key_node, yaml.MappingNode) else "list"))
            key = self._scalar(key_node, path)
            child = (*path, key)
            if key in out:
                raise self._fail(key_node, child, "duplicate key")
            self.lines[child] = key_node.start_mark.line + 1
            out[key] = self.convert(value_node, child, depth + 1)
        return out


def read_config_text(path: str | Path, what: str = "", limit: int = MAX_YAML_BYTES) -> str:
    """A config or data file's text; a file that cannot be read, is not a regular file, is larger
    than `limit` bytes or is not UTF-8 is a ConfigError naming it (read at most `limit` bytes)."""
    p = Path(path)
    label = f"cannot read {what}" if what else "cannot read"

    def problem(message: str) -> ConfigError:
        return ConfigError([ConfigProblem(str(p), None, "", message)])

    try:
        with p.open("rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                raise problem(f"{label}: not a regular file")
            data = fh.read(limit + 1)
    except OSError as exc:
        raise problem(f"{label}: {exc.strerror}") from None
    if len(data) > limit:
        raise problem(f"{label}: larger than {limit:,} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise problem(f"{label}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
                      f"{exc.start})") from None


def load_yaml_file(path: str | Path) -> LocatedYaml:
    return parse_yaml(read_config_text(path), str(path))


def validate(model: type[M], doc: LocatedYaml, root: FieldPath = ()) -> M:
    """Validate `doc` (or the subtree at `root`) as `model`, turning pydantic errors into
    ConfigErrors that name file, line and field. An empty file is one problem; of a union's
    branches only those that got furthest into the value are reported."""
    data: Any = doc.data
    for part in root:
        data = data[part]
    if not root and data == {} and any(f.is_required() for f in model.model_fields.values()):
        raise ConfigError([ConfigProblem(doc.source, None, "", "the file is empty")])
    source = Path(doc.source)
    # relative paths in the file (a conditions trace) are read from the file's folder
    context = {"base_dir": str(source.parent)} if source.is_file() else None
    try:
        return model.model_validate(data, context=context)
    except ValidationError as exc:
        errors = [(tuple(p for p in err["loc"] if not _is_union_tag(p)), err)
                  for err in exc.errors()]
        # `testbed: {...}` against `str | InlineTestbed`: "should be a valid string" is noise
        # when another branch reports something deeper inside the same value
        errors = [(loc, err) for loc, err in errors
                  if not any(len(other) > len(loc) and other[:len(loc)] == loc
                             for other, _ in errors)]
        problems = [doc.problem((*root, *loc), friendly_message(err)) for loc, err in errors]
        raise ConfigError(problems) from None


def _is_union_tag(part: Any) -> bool:
    # pydantic inserts branch names into locs of unions: 'function-after[...]', 'str', or a
    # model's class name (our fields and keys are lower case)
    return isinstance(part, str) and ("[" in part or part in {"str", "int", "float", "bool"}
                                      or (part[:1].isupper() and part.isidentifier()))


def friendly_message(err: Any) -> str:
    """A pydantic error as the user reads it: no "Value error, " prefix, the value when it helps."""
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
