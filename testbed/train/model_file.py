"""A trained PPO agent's files: the sb3 zip with its `testbed.json` manifest (`ModelMeta`: the
run's config plus what it found), the checkpoints of a run, and the partner agents a shared run
loads."""

from __future__ import annotations

import json
import zipfile
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from testbed.errors import ConfigError, ConfigProblem
from testbed.profiles import paper
from testbed.scaler.policies import Policy
from testbed.scaler.ppo import META_MEMBER, MaskablePpoPolicy, read_manifest
from testbed.train.options import PpoOptions


@dataclass(kw_only=True)
class ModelMeta(PpoOptions):
    """What a trained model file says about itself, as sb3 saves what an object holds: the run's
    config (the research options of PpoOptions, with the service, its profile, ratio, pool and
    seed) plus its results (traces, the best model's step and validation reward, every validation,
    what the starting agent was taught: `distilled`, `held`) and how to train it again."""

    service: str
    profile: dict
    ratio: float
    total_units: int
    seed: int
    train_traces: list[str]
    val_traces: list[str]
    steps: int  # the step of the model in this file (the best validated so far)
    commit: str
    best_validation_reward: float | None = None
    validations: list[tuple[int, float]] = field(default_factory=list)
    observation: str | None = None  # testbed.scaler.state.OBSERVATION it was trained with
    command: str | None = None  # how to train it again
    distilled: dict | None = None  # testbed.train.distill.DistillStats of release_below's teaching
    held: dict | None = None  # testbed.train.distill.HoldStats of this checkpoint's fitting


_META_FIELDS = {f.name for f in fields(ModelMeta)}


def read_meta(path: str | Path) -> ModelMeta:
    """The ModelMeta a model file at `path` carries, or a ConfigError naming the file. A manifest
    written before the options were recorded whole loads too: `partners` then names each agent's
    file (their folder is kept), and the options it lacks take their defaults.

    path: the model file."""
    meta = read_manifest(path)
    if isinstance(meta.get("partners"), dict):
        meta["partners"] = str(Path(next(iter(meta["partners"].values()))).parent)
    unknown = sorted(set(meta) - _META_FIELDS)
    try:
        if unknown:
            raise TypeError(f"unknown fields {unknown}")
        return ModelMeta(**meta)
    except TypeError as exc:
        raise ConfigError([ConfigProblem(str(path), None, META_MEMBER,
                                         f"not a testbed model file: {exc}")]) from None


def latest_checkpoint(folder: str | Path, service: str) -> Path:
    """The newest checkpoint of `service` in `folder` (SERVICE-STEPS.zip, the most steps)."""
    found = []
    for p in Path(folder).glob(f"{service}-*.zip"):
        step = p.stem.removeprefix(f"{service}-")
        if step.isdigit():
            found.append((int(step), p))
    if not found:
        why = f"no checkpoint {service}-STEPS.zip to resume from (train with --checkpoints first)"
        raise ConfigError([ConfigProblem(str(folder), None, "resume", why)])
    return max(found)[1]


def load_partners(folder: str | Path | None, service: str) -> dict[str, Policy]:
    """The agents in `folder` (SERVICE.zip) for the paper's services other than `service`; each
    is checked as `sim tables` checks a model (a missing file or another service's agent is one
    ConfigError naming it)."""
    if folder is None:
        return {}
    return {
        s: MaskablePpoPolicy.load(Path(folder) / f"{s}.zip", s)
        for s in paper.TEST_SHIFT_HOURS
        if s != service
    }


def write_meta(path: str | Path, meta: ModelMeta) -> None:
    """Replace the manifest in model file `path` and beside it (SERVICE.json)."""
    path = Path(path)
    text = json.dumps(asdict(meta), indent=2)
    tmp = path.with_suffix(".tmp.zip")
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
        for item in src.infolist():
            if item.filename != META_MEMBER:
                dst.writestr(item, src.read(item))
        dst.writestr(META_MEMBER, text)
    tmp.replace(path)
    path.with_suffix(".json").write_text(text + "\n")


def save_model(model, out: Path, meta: ModelMeta) -> None:
    """Write `model` to `out` with `meta` as its manifest (member and SERVICE.json beside it)."""
    text = json.dumps(asdict(meta), indent=2)
    tmp = out.with_suffix(".tmp.zip")
    model.save(str(tmp))
    with zipfile.ZipFile(tmp, "a") as zf:
        zf.writestr(META_MEMBER, text)
    tmp.replace(out)
    out.with_suffix(".json").write_text(text + "\n")
