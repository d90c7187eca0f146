"""Fit a `GpuCurve` to GPU probe JSON (bench/gpu_curve.py's shape, the H200 files in
testbed/profiles/gpu/h200/): its batch curve, share exponent and knee, launch floor and interference,
each with the residual at every measured point."""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from testbed.errors import ConfigError, ConfigProblem
from testbed.profiles.service import GpuCurve

DECODER_ROWS = ("chatbot", "chatbot_share25")  # the probe's decoder rows: whole GPU, 25 % share
MODEL_SERVICE = "imgcls"  # the service a model's rows describe unless one is named
DECODER_SERVICE = "chatbot"  # the service the decoder's rows describe unless one is named
FLOOR_GAIN = 0.75  # a floor is kept where it brings the RMS log residual below this much of none's
KNEE_GAIN = 0.05  # the knee: the first share past which the largest batch gains less than this


@dataclass(frozen=True)
class Point:
    """One measured median: `batch` requests per pass at `share` % of the GPU."""

    source: str
    batch: float
    share: float
    median_ms: float
    p10_ms: float
    p90_ms: float
    n: int


@dataclass
class CurveFit:
    """The fitted parameters (work(b) = a b^2 + c b + d ms at the ref share; time = max(F, work(b)
    x (ref / min(s, knee))^k)) and the residual of each point."""

    a: float
    c: float
    d: float
    k: float
    knee: float
    floor_ms: float
    ref_share: float
    points: list[Point]
    k_measured: bool = True  # False: no point below the knee, k is `fit_curve`'s unmeasured_k
    fitted_ms: list[float] = field(default_factory=list)

    def time_ms(self, batch: float, share: float) -> float:
        """The fitted time of one pass, ms.

        batch: requests per pass; share: MPS share, %."""
        work = (self.a * batch * batch + self.c * batch + self.d) * (
            self.ref_share / min(share, self.knee)) ** self.k
        return max(self.floor_ms, work)

    @property
    def residuals_pct(self) -> list[float]:
        """(fitted - measured) / measured of each point, percent."""
        return [100.0 * (f - p.median_ms) / p.median_ms
                for f, p in zip(self.fitted_ms, self.points, strict=True)]

    @property
    def rms_log(self) -> float:
        """Root mean square of log(fitted / measured) over the points."""
        r = [math.log(f / p.median_ms) for f, p in zip(self.fitted_ms, self.points, strict=True)]
        return math.sqrt(sum(x * x for x in r) / len(r))


@dataclass
class InterferenceFit:
    """beta = alpha_cache * cache_util + alpha_dram * dram_util, from 1 + beta * sum(share_j) / 100."""

    beta: float
    rows: list[tuple[str, float, float, float]]  # (neighbours, sum of their shares %, measured, fitted)


def read_probe(path: str | Path) -> dict[str, Any]:
    """The probe JSON file at `path`, or a ConfigError naming it."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError([ConfigProblem(str(path), None, "", f"cannot read: {exc.strerror}")]) from None
    except json.JSONDecodeError as exc:
        raise ConfigError([ConfigProblem(str(path), exc.lineno, "", f"not JSON: {exc.msg}")]) from None
    if not isinstance(doc, dict):
        raise ConfigError([ConfigProblem(str(path), None, "", "expected a JSON object")])
    return doc


def _stats_points(src: str, share: float, by: Any, per_request: float, where: str) -> list[Point]:
    if not isinstance(by, dict):
        raise ConfigError([ConfigProblem(src, None, where, "expected an object of {size: stats}")])
    out = []
    for size, st in by.items():
        try:
            med = float(st["median_ms"])
            out.append(Point(src, float(size) / per_request, share, med, float(st.get("p10_ms", med)),
                             float(st.get("p90_ms", med)), int(st.get("n", 0))))
        except (KeyError, TypeError, ValueError):
            raise ConfigError([ConfigProblem(src, None, f"{where}.{size}",
                                             "expected median_ms (and p10_ms, p90_ms, n)")]) from None
    return out


def share_points(doc: dict[str, Any], source: str, images_per_request: float) -> list[Point]:
    """The model's passes at MPS shares in `doc`: `by_share` (run 2's shape) or `mps` (run 1's);
    without either (no MPS where it was measured), `batch`: the whole device, as 100 %.

    source: the file's name for errors and residuals; images_per_request: images in one request
    (the JSON counts images, a curve's batch counts requests)."""
    rows = doc.get("by_share") or doc.get("mps") or {}
    key = "by_share" if "by_share" in doc else "mps"
    out: list[Point] = []
    for share, r in rows.items():
        if isinstance(r, dict) and "by_images" in r:
            out += _stats_points(source, float(share), r["by_images"], images_per_request,
                                 f"{key}.{share}.by_images")
    whole = doc.get("batch")
    if not out and isinstance(whole, dict) and "by_images" in whole:
        out = _stats_points(source, float(whole.get("share_env") or 100), whole["by_images"],
                            images_per_request, "batch.by_images")
    return out


def decoder_points(doc: dict[str, Any], source: str) -> list[Point]:
    """The decoder's generate calls against batch in `doc`: `chatbot` (whole GPU) and
    `chatbot_share25`; source: the file's name for errors and residuals."""
    out: list[Point] = []
    for key in DECODER_ROWS:
        r = doc.get(key)
        if isinstance(r, dict) and "by_batch" in r:
            share = float(r.get("share_env") or 100)
            out += _stats_points(source, share, r["by_batch"], 1.0, f"{key}.by_batch")
    return out


def _nelder_mead(f: Any, x0: np.ndarray, iters: int = 3000, scale: float = 0.3) -> np.ndarray:
    """Minimise f from x0 (a plain Nelder-Mead: a few parameters, no dependency beyond numpy)."""
    n = len(x0)
    steps = [scale if x == 0 else scale * abs(x) + 0.05 for x in x0]
    simplex = [x0] + [x0 + np.eye(n)[i] * steps[i] for i in range(n)]
    vals = [f(x) for x in simplex]
    for _ in range(iters):
        order = np.argsort(vals)
        simplex, vals = [simplex[i] for i in order], [vals[i] for i in order]
        if abs(vals[-1] - vals[0]) < 1e-12:
            break
        centre = np.mean(simplex[:-1], axis=0)
        refl = centre + (centre - simplex[-1])
        fr = f(refl)
        if fr < vals[0]:
            exp = centre + 2 * (centre - simplex[-1])
            fe = f(exp)
            simplex[-1], vals[-1] = (exp, fe) if fe < fr else (refl, fr)
        elif fr < vals[-2]:
            simplex[-1], vals[-1] = refl, fr
        else:
            con = centre + 0.5 * (simplex[-1] - centre)
            fc = f(con)
            if fc < vals[-1]:
                simplex[-1], vals[-1] = con, fc
            else:
                simplex = [simplex[0] + 0.5 * (x - simplex[0]) for x in simplex]
                vals = [f(x) for x in simplex]
    return simplex[int(np.argmin(vals))]


def knee_share(points: list[Point], ref_share: float = 25.0) -> float:
    """The share past which more share stops helping: at the largest batch of `points`, the first
    share above `ref_share` whose next larger share is not KNEE_GAIN faster (100: none)."""
    top = max(p.batch for p in points)
    by_share: dict[float, list[float]] = {}
    for p in points:
        if p.batch == top and p.share >= ref_share:
            by_share.setdefault(p.share, []).append(p.median_ms)
    shares = sorted(by_share)
    for lo, hi in itertools.pairwise(shares):
        if float(np.median(by_share[hi])) > (1 - KNEE_GAIN) * float(np.median(by_share[lo])):
            return lo
    return 100.0


def fit_curve(points: list[Point], ref_share: float = 25.0, floor: bool | None = None,
              unmeasured_k: float = 0.95) -> CurveFit:
    """Least squares on log time over `points` (at least 3, two batch sizes), normalised at batch 1
    and `ref_share` %.

    floor: True fits a floor, False none, None (default) keeps one only where it lowers the RMS log
    residual to FLOOR_GAIN of the fit without; unmeasured_k: the share exponent when no point lies
    below the knee (the assumed curve's 0.95 by default)."""
    if len(points) < 3 or len({p.batch for p in points}) < 2:
        raise ConfigError([ConfigProblem(points[0].source if points else "<probe>", None, "by_images",
                                         "need at least 3 points at 2 or more batch sizes to fit")])
    b = np.array([p.batch for p in points])
    s = np.array([p.share for p in points])
    y = np.log([p.median_ms for p in points])
    # the curve's numbers are ratios to time(1, ref): the fit holds that point as much as all others
    wt = np.where((b == 1) & (np.abs(s - ref_share) < 1e-9), float(len(points)), 1.0)
    knee = knee_share(points, ref_share)
    # no point below the knee: the exponent is not measured, `unmeasured_k` stands in
    fixed_k = None if np.any(s < knee - 1e-9) else unmeasured_k

    def unpack(u: np.ndarray, with_floor: bool) -> tuple[float, ...]:
        k = u[3] ** 2 if fixed_k is None else fixed_k
        return (u[0] ** 2, u[1] ** 2, u[2] ** 2, k, u[4] ** 2 if with_floor else 0.0)

    def model(params: tuple[float, ...]) -> np.ndarray:
        a, c, d, k, fl = params
        work = (a * b * b + c * b + d) * (ref_share / np.minimum(s, knee)) ** k
        return np.maximum(fl, work)

    at_ref = [p for p in points if abs(p.share - ref_share) < 1e-9] or points
    slope, icpt = np.polyfit([p.batch for p in at_ref], [p.median_ms for p in at_ref], 1) \
        if len({p.batch for p in at_ref}) > 1 else (0.0, at_ref[0].median_ms)
    options = [False, True] if floor is None else [floor]
    fits: dict[bool, tuple[float, CurveFit]] = {}
    for with_floor in options:
        def loss(u: np.ndarray, wf: bool = with_floor) -> float:
            pred = model(unpack(u, wf))
            return float(np.sum(wt * (np.log(np.maximum(pred, 1e-9)) - y) ** 2))

        for k0 in (0.5, 0.9):
            x0 = np.sqrt(np.array([0.01 * abs(slope), abs(slope), max(abs(icpt), 1e-3), k0,
                                   min(p.median_ms for p in points)]))
            u = _nelder_mead(loss, x0)
            val = loss(u)
            if with_floor not in fits or val < fits[with_floor][0]:
                params = unpack(u, with_floor)
                fit = CurveFit(*params[:4], knee, params[4], ref_share, points, k_measured=fixed_k is None)
                fit.fitted_ms = [float(x) for x in model(params)]
                fits[with_floor] = (val, fit)
    if floor is not None:
        return fits[floor][1]
    keep = fits[True][1].rms_log < FLOOR_GAIN * fits[False][1].rms_log
    return fits[keep][1]


def interference_fit(doc: dict[str, Any], source: str, images_per_request: float,
                     batch: float = 4.0) -> InterferenceFit | None:
    """beta from `doc`'s `interf_mps`: the measuring process's time at `batch` requests
    (`images_per_request` images each) beside each set of neighbours over its time alone. None
    when the file has no such rows; `source` names it in errors."""
    rows = doc.get("interf_mps")
    if not isinstance(rows, dict) or "alone" not in rows:
        return None
    size = str(int(batch * images_per_request))
    try:
        alone = float(rows["alone"]["by_images"][size]["median_ms"])
    except (KeyError, TypeError, ValueError):
        raise ConfigError([ConfigProblem(source, None, f"interf_mps.alone.by_images.{size}",
                                         "no median_ms to compare the neighbours against")]) from None
    data = []
    for tag, r in rows.items():
        if tag == "alone" or not isinstance(r, dict):
            continue
        shares = [float(x.get("share_env") or 100) for x in r.get("neighbours", [])]
        ms = r.get("by_images", {}).get(size, {}).get("median_ms")
        if shares and ms:
            data.append((tag, sum(shares), float(ms) / alone))
    if not data:
        return None
    x = np.array([d[1] / 100.0 for d in data])
    y = np.array([d[2] - 1.0 for d in data])
    beta = float(x @ y / (x @ x))
    return InterferenceFit(beta, [(t, sh, st, 1.0 + beta * sh / 100.0) for t, sh, st in data])


def to_curve(fit: CurveFit, inter: InterferenceFit | None, assumed: GpuCurve, *, max_batch: int,
             sources: dict[str, str]) -> GpuCurve:
    """The `GpuCurve` of a fit: batch_curve normalised to 1 at batch 1, the floor in units of
    work(1). Interference: only alpha_cache * cache_util + alpha_dram * dram_util is measurable, so
    `assumed`'s split between cache and DRAM is kept and scaled to `inter`'s beta (without `inter`,
    `assumed`'s numbers as they are). max_batch: the largest batch measured; sources: field -> where
    its number comes from."""
    w1 = fit.a + fit.c + fit.d
    alphas = assumed.interference
    if inter is not None:
        scale = inter.beta / (alphas[0] * assumed.cache_util + alphas[1] * assumed.dram_util)
        alphas = (round(alphas[0] * scale, 4), round(alphas[1] * scale, 4))
    return GpuCurve(
        ref_share_pct=fit.ref_share,
        batch_curve=(round(fit.a / w1, 5), round(fit.c / w1, 5), round(fit.d / w1, 5)),
        max_batch=max_batch, share_exponent=round(fit.k, 4), share_knee_pct=round(fit.knee, 1),
        floor=round(fit.floor_ms / w1, 4), interference=alphas,
        cache_util=assumed.cache_util, dram_util=assumed.dram_util, sources=sources)
