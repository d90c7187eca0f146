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

from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from testbed.config.testbed_spec import Strict
from testbed.config.yamlfile import load_yaml_file, validate


class TrainFile(Strict):
    """The options of `testbed train`, each as its command-line option says (`--help`); `notes`
    is free text (where the run came from) that training ignores."""

    service: str | None = None
    policy: Literal["ppo", "ddpg", "inss"] | None = None
    traces: str | None = None
    trace: list[str] | None = None
    val_trace: str | None = None
    profiles: str | None = None
    out: str | None = None
    steps: int | None = Field(None, ge=1)
    seed: int | None = None
    gpus: int | None = Field(None, ge=1)
    tensorboard: str | None = None
    stop_at: int | None = Field(None, ge=1)
    scales: list[int] | None = None
    init_from: str | None = None
    load_scales: tuple[float, float] | None = None
    loads: list[float] | None = None
    shared: bool | None = None
    pool_reward: bool | None = None
    partners: str | None = None
    validate_pool: bool | None = None
    checkpoints: str | None = None
    ent_coef: float | None = Field(None, ge=0)
    release_below: float | None = None
    hold_largest: bool | None = None
    like_testbed: float | None = Field(None, ge=0, le=1)
    resume: bool | None = None
    notes: str = ""


# file fields that are paths (relative to the file), and the CLI's parameter name where it differs
_PATHS = ("traces", "val_trace", "profiles", "out", "init_from", "partners", "checkpoints")
_PARAM = {"profiles": "profiles_path"}


def load_train_file(path: str | Path) -> dict[str, Any]:
    """The options `path` sets, by the `train` command's parameter names and in the forms its
    options take (paths resolved against the file's folder, lists as the CLI's comma lists).

    Raises:
        ConfigError: one line per problem, naming the file, the line and the field.
    """
    path = Path(path)
    spec = validate(TrainFile, load_yaml_file(path))
    base = path.resolve().parent
    out: dict[str, Any] = {}
    for name, value in spec.model_dump(exclude={"notes"}, exclude_none=True).items():
        if name in _PATHS:
            value = base / value
        elif name == "trace":
            value = [base / v for v in value]
        elif name in ("scales", "loads", "load_scales"):
            value = ",".join(f"{v:g}" for v in value)
        out[_PARAM.get(name, name)] = value
    return out
