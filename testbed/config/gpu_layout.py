"""A GPU layout file: how many GPUs, and each service's starting replicas, MPS share, batch size and
GPUs. Mistakes name file, line and field: a share outside (0, 100] %, a batch below 1, shares on
one GPU above 100 %."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from testbed.config.yamlfile import load_yaml_file, validate
from testbed.errors import ConfigError


class ServiceLayout(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    replicas: int = Field(ge=1, description="replicas at the start")
    share_pct: float = Field(gt=0, le=100, description="each replica's MPS share of one GPU, %")
    batch: int = Field(default=1, ge=1, description="batch size")
    gpus: list[int] | None = Field(default=None, description="one GPU index per replica; default first fit")


class GpuLayout(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    gpus: int = Field(ge=1, description="GPUs in the cluster")
    services: dict[str, ServiceLayout]


def load_layout(path: str | Path) -> GpuLayout:
    doc = load_yaml_file(path)
    layout = validate(GpuLayout, doc)
    used = [0.0] * layout.gpus
    problems = []
    for name, svc in layout.services.items():
        where = ("services", name)
        if svc.gpus is None:  # first fit, as the simulator places them
            for _ in range(svc.replicas):
                g = next((k for k in range(layout.gpus) if used[k] + svc.share_pct <= 100 + 1e-9), None)
                if g is None:
                    problems.append(doc.problem(
                        (*where, "share_pct"),
                        f"{svc.replicas} replicas of {svc.share_pct:g} % do not fit on {layout.gpus} GPUs "
                        "beside the services above (shares on one GPU sum to at most 100 %)"))
                    break
                used[g] += svc.share_pct
            continue
        if len(svc.gpus) != svc.replicas:
            n = len(svc.gpus)
            problems.append(doc.problem((*where, "gpus"), f"{n} GPUs for {svc.replicas} replicas"))
            continue
        bad = [g for g in svc.gpus if not 0 <= g < layout.gpus]
        if bad:
            problems.append(doc.problem((*where, "gpus"), f"GPU index outside 0..{layout.gpus - 1}: {bad}"))
            continue
        for g in svc.gpus:
            used[g] += svc.share_pct
        over = sorted({g for g in svc.gpus if used[g] > 100 + 1e-9})
        if over:
            problems.append(doc.problem(
                (*where, "share_pct"),
                f"shares on GPU {over[0]} sum to {used[over[0]]:g} % (at most 100 %)"))
    if problems:
        raise ConfigError(problems)
    return layout
