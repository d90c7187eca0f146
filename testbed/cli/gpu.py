"""`testbed sim fit-gpu`: a service's `gpu:` curve fitted to GPU probe JSON, each parameter and the
residual at every measured point printed, the curve optionally written into a profile file."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

from testbed.cli import console
from testbed.cli.sim import sim_app
from testbed.errors import ConfigError, ConfigProblem


@sim_app.command("fit-gpu")
def sim_fit_gpu(
    files: list[Path] = typer.Argument(..., help="Probe JSON files (bench/gpu_curve.py's shape; the "
                                       "H200's are in testbed/profiles/gpu/h200/)."),
    service: str = typer.Option(None, help="The service whose curve this is (any registered one; "
                                "default: the image classifier, the decoder's service with --decoder)."),
    decoder: bool = typer.Option(False, "--decoder", help="Fit the decoder's rows (its whole-"
                                 "GPU and 25 % share rows) instead of the model's shares (by_share, mps)."),
    images_per_request: float = typer.Option(
        None, help="Images in one request (default: the file's images_per_request, else 4, "
                   "as the image classifier)."),
    ref_share: float = typer.Option(25.0, help="Share (%) the curve is normalised at (DRAFAS's slice)."),
    interference: Path = typer.Option(None, help="Probe JSON whose interf_mps rows give the "
                                      "interference (default: the first of FILES that has them)."),
    floor: str = typer.Option("auto", help="auto: a launch floor where it lowers the RMS residual by a "
                              "quarter; on; off."),
    out: Path = typer.Option(None, help="Profile file to write the curve into (services.SERVICE.gpu; "
                             "other services in the file stay)."),
    as_json: bool = typer.Option(False, "--json", help="Print the curve and residuals as JSON."),
) -> None:
    """Fit a service's GPU curve to measured latencies: each parameter and the residual at every point.

    Example: testbed sim fit-gpu testbed/profiles/gpu/h200/probe-run2.json
    --interference testbed/profiles/gpu/h200/probe-run1.json --out testbed/profiles/gpu-measured.yaml

    Example: testbed sim fit-gpu testbed/profiles/gpu/h200/probe-run1.json --decoder --service chatbot
    """
    from testbed.profiles import default_profiles
    from testbed.profiles.gpu_fit import (
        DECODER_ROWS,
        DECODER_SERVICE,
        MODEL_SERVICE,
        decoder_points,
        fit_curve,
        interference_fit,
        read_probe,
        share_points,
        to_curve,
    )

    if floor not in ("auto", "on", "off"):
        raise ConfigError([ConfigProblem("--floor", None, "floor", f"auto, on or off, not {floor!r}")])
    service = service or (DECODER_SERVICE if decoder else MODEL_SERVICE)
    known = default_profiles()
    if service not in known or known[service].gpu is None:
        raise ConfigError([ConfigProblem("--service", None, "service",
                                         f"{service!r} is no registered service with a gpu: curve")])
    assumed = known[service].gpu
    points, inter, names, docs = [], None, [], []
    for path in files:
        doc = read_probe(path)
        docs.append(doc)
        per = images_per_request or float(doc.get("images_per_request", 4))
        found = decoder_points(doc, str(path)) if decoder else share_points(doc, str(path), per)
        points += found
        names.append(path.name)
        if not decoder and inter is None and interference is None:
            inter = interference_fit(doc, str(path), per)
    if interference is not None and not decoder:
        doc = read_probe(interference)
        docs.append(doc)
        inter = interference_fit(doc, str(interference), images_per_request or
                                 float(doc.get("images_per_request", 4)))
        if inter is None:
            raise ConfigError([ConfigProblem(str(interference), None, "interf_mps",
                                             "no interf_mps rows (alone and beside neighbours)")])
    if not points:
        what = "/".join(DECODER_ROWS) + " rows" if decoder else "by_share or mps rows"
        raise ConfigError([ConfigProblem(str(files[0]), None, "by_share" if not decoder else DECODER_ROWS[0],
                                         f"no {what} in {', '.join(names)}")])
    fit = fit_curve(points, ref_share, {"auto": None, "on": True, "off": False}[floor],
                    unmeasured_k=assumed.share_exponent)
    cmd = " ".join(["testbed sim fit-gpu", *names, *(["--interference", interference.name] if interference
                                                     else []), *(["--decoder"] if decoder else []),
                    "--service", service])
    curve = to_curve(fit, inter, assumed, max_batch=int(max(p.batch for p in points)),
                     sources=_sources(cmd, fit, inter, _measured_on(docs, files, decoder)))
    if as_json:
        console.print_json(json.dumps({
            "curve": curve.model_dump(mode="json"), "rms_log": fit.rms_log,
            "points": [{"file": p.source, "batch": p.batch, "share": p.share, "measured_ms": p.median_ms,
                        "fitted_ms": f, "residual_pct": r}
                       for p, f, r in zip(fit.points, fit.fitted_ms, fit.residuals_pct, strict=True)],
            "interference": None if inter is None else {"beta": inter.beta, "rows": inter.rows}}))
    else:
        _print_fit(curve, fit, inter)
    if out is not None:
        _write(out, service, curve, cmd)
        console.print(f"wrote services.{service}.gpu to {out}")


def _measured_on(docs: list[dict], files: list[Path], decoder: bool) -> str:
    """What the files measured, on what, as their JSON says: bench/gpu_curve.py's `target` and
    `info`; the H200 probe's files (no `target`) measured ResNet152 and the decoder."""
    target = next((d["target"] for d in docs if isinstance(d.get("target"), str)), None)
    what = target or ("a llama3.2-1B-shaped decoder (64 new tokens)" if decoder
                      else "ResNet152 (fp32, random weights, 4 images a request)")
    device = next((d["info"]["device"] for d in docs
                   if isinstance(d.get("info"), dict) and d["info"].get("device")), "an unnamed device")
    mps = any(isinstance(d.get(k), dict) and "skipped" not in d[k] for d in docs for k in ("by_share", "mps"))
    prov = ("provenance.yaml beside the data" if (files[0].parent / "provenance.yaml").is_file()
            else "no provenance file beside the data")
    return f"{what}, {device}{' under MPS' if mps else ''} ({prov})"


def _sources(cmd: str, fit, inter, measured_on: str) -> dict[str, str]:
    where = f"`{cmd}` on {measured_on}"
    rms = f"RMS log residual {fit.rms_log:.3f}, every point's residual printed by the command"
    out = {
        "ref_share_pct": "DRAFAS's slice (a quarter of a GPU): the curve is 1 at batch 1 there",
        "batch_curve": f"least squares on log time, {where}; {rms}",
        "max_batch": "the largest batch measured",
        "share_knee_pct": f"{where}: the first share past which the largest batch is not 5 % faster "
                          "(100: faster up to the whole GPU)",
        "floor": f"{where}: a pass takes at least this x the work of batch 1 at 25 % at any share (the "
                 "host's kernel launches; fitted with the batch curve)" if fit.floor_ms > 0
                 else f"{where}: no floor (one did not lower the residual by a quarter)",
        "share_exponent": f"{where}, fitted with the batch curve" if fit.k_measured else
                          "not measured below the knee: the assumed curve's exponent stands in",
        "cache_util": "an assumption (the assumed curve's): only alpha_cache x cache_util + alpha_dram x "
                      "dram_util is measurable",
        "dram_util": "an assumption (the assumed curve's), as cache_util",
    }
    if inter is not None:
        rows = ", ".join(f"+{100 * (m - 1):.0f} % beside {t}" for t, _, m, _ in inter.rows)
        out["interference"] = (f"{where}: 1 + beta x (sum of the neighbours' shares) / 100 least squares "
                               f"(beta {inter.beta:.3f}; measured {rows}), split between cache and DRAM "
                               "as the assumed curve's")
    else:
        out["interference"] = "not measured for this service: the assumed curve's (InSS Fig. 2)"
    return out


def _print_fit(curve, fit, inter) -> None:
    params = Table(title="fitted gpu curve")
    for col in ("parameter", "value", "meaning"):
        params.add_column(col)
    w1 = fit.a + fit.c + fit.d
    rows = [
        ("work(1) at ref share", f"{w1:.2f} ms", "a + c + d (this GPU's ms; the profile keeps its own)"),
        ("batch_curve a, c, d", ", ".join(f"{x:g}" for x in curve.batch_curve),
         "work(b) / work(1) = a b² + c b + d"),
        ("share_exponent", f"{curve.share_exponent:g}", "work(s) = work(ref) (ref / min(s, knee))^k"
         + ("" if fit.k_measured else " (not measured: assumed)")),
        ("share_knee_pct", f"{curve.share_knee_pct:g}", "share above which time stops falling"),
        ("floor", f"{curve.floor:g} ({fit.floor_ms:.2f} ms)", "time >= floor x work(1, ref)"),
        ("interference", ", ".join(f"{x:g}" for x in curve.interference),
         f"alpha_cache, alpha_dram (beta {inter.beta:.3f})" if inter else "assumed (not measured)"),
        ("RMS log residual", f"{fit.rms_log:.3f}", f"over {len(fit.points)} points"),
    ]
    for r in rows:
        params.add_row(*r)
    console.print(params)
    res = Table(title="residual at every measured point")
    for col in ("file", "batch", "share %", "measured ms (p10-p90)", "fitted ms", "residual"):
        res.add_column(col, justify="right")
    for p, f, r in zip(fit.points, fit.fitted_ms, fit.residuals_pct, strict=True):
        res.add_row(Path(p.source).name, f"{p.batch:g}", f"{p.share:g}",
                    f"{p.median_ms:.1f} ({p.p10_ms:.1f}-{p.p90_ms:.1f})", f"{f:.1f}", f"{r:+.1f} %")
    console.print(res)
    if inter is not None:
        it = Table(title="interference at the largest batch beside neighbours (MPS)")
        for col in ("neighbours", "their shares %", "measured stretch", "fitted", "residual"):
            it.add_column(col, justify="right")
        for tag, sh, m, f in inter.rows:
            it.add_row(tag, f"{sh:g}", f"{m:.3f}", f"{f:.3f}", f"{100 * (f - m) / m:+.1f} %")
        console.print(it)


def _write(out: Path, service: str, curve, cmd: str) -> None:
    import yaml  # only here: `testbed --help` imports no heavy library (tests/cli/test_startup.py)

    doc: dict = {}
    if out.exists():
        try:
            doc = yaml.safe_load(out.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            raise ConfigError([ConfigProblem(str(out), mark.line + 1 if mark else None, "",
                                             "not YAML; give a new file or a profile file")]) from None
        if not isinstance(doc, dict) or not isinstance(doc.get("services", {}), dict):
            raise ConfigError([ConfigProblem(str(out), None, "services", "expected a profile file")])
    gpu = curve.model_dump(mode="json")
    for key in ("batch_curve", "interference"):
        gpu[key] = list(gpu[key])
    doc.setdefault("services", {}).setdefault(service, {})["gpu"] = gpu
    from testbed.profiles import default_profiles

    assumed = sorted(n for n, p in default_profiles().items() if p.gpu and n not in doc["services"])
    header = ("# Measured GPU curves, written by `testbed sim fit-gpu` (docs/gpu.md): merged over the\n"
              "# packaged profiles with --profiles; a service not named here keeps the assumed curve.\n"
              + (f"# Not measured, so on the assumed curve: {', '.join(assumed)}.\n" if assumed else ""))
    out.write_text(header + yaml.safe_dump(doc, sort_keys=False, width=100), encoding="utf-8")
