"""`testbed train --config FILE`: a training run's options as a YAML file, under the command line.

A file names the `train` command's options by their names (`init_from`, `hold_largest`, ...),
so a run is a file one can keep beside its model (models/SERVICE.train.yaml) and rerun; an option
given on the command line wins over the file's. Paths in the file are relative to its folder.

    service: imgcls
    steps: 100000
    scales: [8, 128]
    init_from: imgcls.zip
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, create_model

from testbed.config.testbed_spec import Strict
from testbed.config.yamlfile import load_yaml_file, validate
from testbed.train.options import TRAIN_FIELDS, TrainOptions, opt


def _file_type(name: str, hint: Any) -> Any:
    """The type a file's field `name` takes: TrainOptions' own, with text for paths (resolved
    against the file's folder on loading) and the choices of a named set."""
    o = opt(name)
    if o.choices:
        return Literal[o.choices] | None  # type: ignore[valid-type]
    if o.path:
        return list[str] | None if typing.get_origin(_strip(hint)) is list else str | None
    return hint if _strip(hint) is not hint else hint | None


def _strip(hint: Any) -> Any:
    """`hint` without its `| None`."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if len(args) == 1 and type(None) in typing.get_args(hint) else hint


_HINTS = typing.get_type_hints(TrainOptions)
# the file's fields: every option of TrainOptions by its name (absent: not set), and notes
TrainFile = create_model(
    "TrainFile", __base__=Strict,
    __doc__="The options of `testbed train`, each as its command-line option says (`--help`); "
            "`notes` is free text (where the run came from) that training ignores.",
    notes=(str, ""),
    **{name: (_file_type(name, _HINTS[name]),
              Field(None, ge=opt(name).ge, le=opt(name).le)) for name in TRAIN_FIELDS},
)


def load_train_file(path: str | Path) -> dict[str, Any]:
    """The options `path` sets, by TrainOptions' names and in its types (paths resolved against
    the file's folder).

    Raises:
        ConfigError: one line per problem, naming the file, the line and the field.
    """
    path = Path(path)
    spec = validate(TrainFile, load_yaml_file(path))
    base = path.resolve().parent
    out: dict[str, Any] = {}
    for name, value in spec.model_dump(exclude={"notes"}, exclude_none=True).items():
        if opt(name).path:
            value = [base / v for v in value] if isinstance(value, list) else base / value
        elif isinstance(value, tuple):
            value = list(value) if name != "load_scales" else value
        out[name] = value
    return out
