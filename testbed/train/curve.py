"""A training run's learning curve: its progress line, and the JSON and PNG written beside the model."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from testbed.train.model_file import ModelMeta

REWARD_SCALE = (
    "an episode's reward is the sum of Eq. 3.2 over its periods (a validation: the mean of such "
    "sums over its episodes); divided by the periods of the episode it is the tables' per-period mean"
)


@dataclass
class TrainingStatus:
    """Where a training run stands, for its progress line."""

    steps: int
    episode_reward: float | None  # mean of the last finished training episodes (sums over periods)
    episode_periods: float | None  # their mean length
    last_validation: float | None
    best_validation: float | None
    validation_periods: int  # periods in one validation episode

    def line(self) -> str:
        """E.g. 'episode -31.2 (-1.04/period) | validation -254.5, best -250.1 (-0.088/period)'."""
        parts = []
        if self.episode_reward is not None and self.episode_periods:
            per = self.episode_reward / self.episode_periods
            parts.append(f"episode {self.episode_reward:.1f} ({per:.3f}/period)")
        if self.last_validation is not None and self.best_validation is not None:
            per = self.best_validation / self.validation_periods
            parts.append(
                f"validation {self.last_validation:.1f}, best {self.best_validation:.1f} "
                f"({per:.3f}/period over {self.validation_periods})"
            )
        return " | ".join(parts)


def curve_paths(out: str | Path) -> tuple[Path, Path]:
    """Where the learning curve of model file `out` goes: OUT.curve.json and OUT.curve.png."""
    out = Path(out)
    return out.with_suffix(".curve.json"), out.with_suffix(".curve.png")


def write_curve(
    out: str | Path, meta: ModelMeta, episodes: Sequence[tuple[int, float, int]], validation_periods: int,
    plot: bool = True,
) -> None:
    """Write the learning curve beside model file `out`: the training episodes (step at its end,
    reward, periods) and the validations of `meta`, as JSON and (with `plot`) a PNG on the
    tables' per-period scale."""
    json_path, png_path = curve_paths(out)
    doc = {
        "service": meta.service,
        "reward_scale": REWARD_SCALE,
        "validation_periods": validation_periods,
        "training": [
            {"step": n, "reward": r, "periods": length, "per_period": r / length}
            for n, r, length in episodes
        ],
        "validation": [
            {"step": n, "reward": r, "per_period": r / validation_periods} for n, r in meta.validations
        ],
        "best": {"step": meta.steps, "reward": meta.best_validation_reward},
    }
    json_path.write_text(json.dumps(doc, indent=1) + "\n")
    if not plot:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    if episodes:
        ax.plot([e["step"] for e in doc["training"]], [e["per_period"] for e in doc["training"]],
                ".", ms=3, alpha=0.4, label="training episodes")
    ax.plot([v["step"] for v in doc["validation"]], [v["per_period"] for v in doc["validation"]],
            "o-", label=f"validation (sum / {validation_periods} periods)")
    ax.set_xlabel("training steps")
    ax.set_ylabel("reward per period (Eq. 3.2, the tables' scale)")
    ax.set_title(f"{meta.service}: learning curve (best at step {meta.steps})")
    ax.legend()
    fig.tight_layout()
    fig.savefig(png_path, dpi=100)
    plt.close(fig)
