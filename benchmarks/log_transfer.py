"""Transfer of a log-fitted profile (issue 16's done-when): calibrate on one published run,
predict the other published runs on the same GPU family and framework (different models or
layouts), and print the |error| of the step and of each phase before and after calibration.

    python benchmarks/log_transfer.py [--runs benchmarks/data/log_runs.yaml] [--calibrate-on ID]
                                      [--cases FILE ...]

`--cases` also scores the rl_step rows of reference-case files (NeMo-RL's performance tables:
step time only) without and with the profile (`rlsolve cases FILE --profile`)."""
from __future__ import annotations

import argparse
import copy
import statistics
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rlsolve.cases import score_cases  # noqa: E402
from rlsolve.logfit import fit_table, model_phases  # noqa: E402
from rlsolve.runlogs.phases import averaged  # noqa: E402
from rlsolve.solver.estimate import estimate  # noqa: E402

PHASES = ("generation", "logprob", "train", "refit", "step")


def measured(run: dict) -> dict[str, float]:
    t = averaged(run["framework"], run["phases_s"], run.get("response_len_mean"))
    s = t.steps[0]
    return {**s.phases, "step": s.total}


def predicted(run: dict, profile: dict) -> dict[str, float]:
    """The model on the run's layout, at the run's own mean response length (as the fit reads it)."""
    spec = copy.deepcopy(run["spec"])
    if run.get("response_len_mean"):
        spec["rl"]["response_len"]["mean"] = int(round(run["response_len_mean"]))
    return model_phases(estimate(spec, run["layout"], profile=profile), False)


def calibrate(src: dict):
    table = averaged(src["framework"], src["phases_s"], src.get("response_len_mean"))
    return fit_table(src["spec"], src["layout"], table, log_format="published-means")


def each(runs: list[dict]) -> None:
    """Median |error| over the other runs, per phase, after calibrating on each run in turn."""
    print(f"{'calibrated on':46s} " + " ".join(f"{p:>10s}" for p in PHASES) + "   (median |error| of the others, after)")
    before = {p: [] for p in PHASES}
    for r in runs:
        m = measured(r)
        b = predicted(r, {})
        for p in PHASES:
            if m.get(p, 0) > 0:
                before[p].append(abs(b[p] / m[p] - 1))
    print(f"{'(no calibration)':46s} " + " ".join(f"{statistics.median(before[p]):10.1%}" for p in PHASES))
    for src in runs:
        profile = calibrate(src).profile
        errs = {p: [] for p in PHASES}
        for r in runs:
            if r["id"] == src["id"]:
                continue
            m, a = measured(r), predicted(r, profile)
            for p in PHASES:
                if m.get(p, 0) > 0:
                    errs[p].append(abs(a[p] / m[p] - 1))
        print(f"{src['id']:46s} " + " ".join(f"{statistics.median(errs[p]):10.1%}" for p in PHASES))


def pct(x: float | None) -> str:
    return "" if x is None else f"{x:+.1%}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", default=str(ROOT / "benchmarks/data/log_runs.yaml"))
    ap.add_argument("--calibrate-on", default="nemorl03-blog-llama3.1-8b-megatron-1n8g")
    ap.add_argument("--cases", nargs="*", default=[])
    ap.add_argument("--each", action="store_true", help="Calibrate on every run in turn; one summary line each.")
    args = ap.parse_args()
    runs = yaml.safe_load(Path(args.runs).read_text())["runs"]
    if args.each:
        each(runs)
        return
    src = next(r for r in runs if r["id"] == args.calibrate_on)
    fit = calibrate(src)
    profile = fit.profile
    print(f"calibrated on {src['id']} ({src['source']})")
    for k, f in fit.factors.items():
        print(f"  {k:30s} {f.value:10.4g}  (model {f.model_value:.4g}{', at bound' if f.at_bound else ''})")
    print("  residuals on the calibration run: " + ", ".join(f"{k} {pct(v)}" for k, v in fit.residuals().items()))
    print()
    head = f"{'run':46s} {'phase':10s} {'measured':>9s} {'before':>9s} {'after':>9s} {'err before':>10s} {'err after':>10s}"
    print(head)
    errs: dict[str, tuple[list[float], list[float]]] = {p: ([], []) for p in PHASES}
    for r in runs:
        if r["id"] == src["id"]:
            continue
        m = measured(r)
        b, a = predicted(r, {}), predicted(r, profile)
        for p in PHASES:
            if m.get(p, 0) <= 0:
                continue
            eb, ea = b[p] / m[p] - 1, a[p] / m[p] - 1
            errs[p][0].append(abs(eb))
            errs[p][1].append(abs(ea))
            print(f"{r['id']:46s} {p:10s} {m[p]:9.1f} {b[p]:9.1f} {a[p]:9.1f} {pct(eb):>10s} {pct(ea):>10s}")
    print()
    print(f"{'median |error| over the other runs':46s} {'phase':10s} {'n':>3s} {'before':>9s} {'after':>9s}")
    for p in PHASES:
        bs, as_ = errs[p]
        if bs:
            print(f"{'':46s} {p:10s} {len(bs):3d} {statistics.median(bs):9.1%} {statistics.median(as_):9.1%}")
    for path in args.cases:
        data = yaml.safe_load(Path(path).read_text())
        rows = [c for c in data["cases"] if c.get("kind") == "rl_step"
                and str(c.get("hardware", {}).get("gpu", "")).startswith("H100")
                and "nemo" in str(c.get("source", "")).lower()]
        sub = {"version": data.get("version", 1), "cases": rows}
        before = score_cases(sub)
        after = score_cases(sub, profile=profile)
        eb = [abs(r.error) for r in before.rows if r.error is not None]
        ea = [abs(r.error) for r in after.rows if r.error is not None]
        print(f"\n{path}: NeMo-RL rl_step rows on H100 (step time only), scored as `rlsolve cases` does")
        print(f"  rows {len(rows)}, modelled {len(eb)} / {len(ea)}; median |error| before "
              f"{statistics.median(eb):.1%}, after {statistics.median(ea):.1%}" if eb and ea else "  no row modelled")


if __name__ == "__main__":
    main()
