#!/usr/bin/env python3
"""The time model's terms, each judged on held-out measurements: what the error is without it.

Reads the CSVs bench/validate_model.py wrote for drawn (held-out) cases, with the model each run
calibrated (its `model` column, under the CSV's models/ folder), and predicts every case again
with `distmm --dry-run --model` from that model as it is and with one term taken out at a time
(a field removed or zeroed: the model then costs that part as it would without the term). The
measured times stay as they were: only the predictions change. With the build the runs used,
the full model reproduces the CSV's own predictions (it says how many differ: with a later
build, the model's changes since).

  bench/ablate_model.py bench/results/heldout/*.csv [--markdown]

A change to calibrate (what it measures, not how the model reads it) is judged from
calibrations made without it beside the runs' own: validate_model.py --also-calibrate NAME
PROGRAM makes them, --calibration NAME predicts every case from them.

A term pays where taking it out raises the held-out median error beyond the noise of the case
set: the 90 % interval of the rise, over cases resampled with replacement, lies above 0.
docs/time-model.md keeps the table."""
import argparse
import copy
import csv
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, OPENBLAS_CORETYPE=os.environ.get("OPENBLAS_CORETYPE", "Haswell"))


def strip_collectives(m, keep):
    m["collectives"] = [c for c in m.get("collectives", []) if keep(c)]


def zero(path, value=0):
    """A transform setting the field at `path` (keys) to `value` where it is present."""
    def apply(m):
        node = m
        for key in path[:-1]:
            node = node.get(key, {})
        if path[-1] in node:
            node[path[-1]] = value
    return apply


def each_gemm(field, value):
    def apply(m):
        for g in m.get("gemm", []):
            if field in g:
                g[field] = value
    return apply


def each_link(field, value):
    def apply(m):
        for link in m.get("links", {}).values():
            if field in link:
                link[field] = value
    return apply


def remove(*fields):
    def apply(m):
        for f in fields:
            if "." in f:
                head, tail = f.split(".")
                m.get(head, {}).pop(tail, None)
            else:
                m.pop(f, None)
    return apply


def no_first_use_pages(m):
    for c in m.get("collectives", []):
        for p in c["points"]:
            p.pop("first_use_pages", None)


# Each term the model has: a name and what taking it out does to a calibrated model.
TERMS = [
    ("measured collective curves (all)", lambda m: strip_collectives(m, lambda c: False)),
    # Only a model of one host (no inter link): across hosts, groups > 1 are hsdp's own groups.
    ("curves of groups dividing the world (one host)", lambda m: strip_collectives(
        m, lambda c: "inter" in m.get("links", {}) or c["groups"] == 1)),
    ("members-multiply-next curves", lambda m: strip_collectives(
        m, lambda c: not c["op"].endswith("_then_compute"))),
    ("exchange slowdown", each_link("exchange_slowdown", 1)),
    ("overlap contention", each_link("overlap_contention", 0)),
    ("link first use per page", each_link("first_use_s_per_page", 0)),
    ("narrow-shape table", lambda m: [g.pop("narrow", None) for g in m.get("gemm", [])]),
    ("strided copy rate", lambda m: [remove("memory.strided_copy_curve")(m),  # free
                                     zero(["memory", "strided_copy_Bps"], 1e18)(m)]),
    ("strided copy by block size", remove("memory.strided_copy_curve")),
]
# The terms the ablation removed (docs/time-model.md): their fields are read and ignored by
# builds after they went, so these rows mean something only with an older build (--retired
# --distmm OLD, as the docs' first table was made with commit c9f471d's).
RETIRED_TERMS = [
    ("gemm first use per page", each_gemm("first_use_s_per_page", 0)),
    ("all-gather after scatter curve", lambda m: strip_collectives(
        m, lambda c: c["op"] != "allgatherv_after_scatterv")),
    ("columns collective curves", lambda m: strip_collectives(
        m, lambda c: not c["op"].endswith("_columns"))),
    ("collective first-call pages", no_first_use_pages),
    ("revisit", remove("revisit_s_per_page")),
    ("first-touch pool", remove("first_touch_pool_bytes", "first_touch_beyond_s_per_page")),
    ("straggler", remove("straggler")),
    ("BLAS first call", each_gemm("first_call_s", 0)),
    ("strided copy by row length", remove("memory.strided_copy")),
]


def placement(setting):
    """distmm's --ranks and --ranks-per-host for a validation setting's name."""
    words = setting.split()
    if words[0] in ("mpi", "simulator"):
        return int(words[1]), int(words[1])
    per_host = int(words[-4])  # "2 hosts, 1gbit/s, 2 rank(s) per host"
    return 2 * per_host, per_host


def predict(distmm, model, setting, kind, shape, state, strategy, tmp):
    """{strategy label: predicted seconds} of one case, launched as the validation ran it: a warm
    matmul case with every strategy in one process; a cold one, and training, each strategy
    alone (its process's first multiply and the caller's fresh A and C are its own)."""
    ranks, per_host = placement(setting)
    m, k, n = shape.split("x")
    report = os.path.join(tmp, "p.json")
    common = ["--dry-run", "--ranks", str(ranks), "--ranks-per-host", str(per_host), "--m", m,
              "--k", k, "--n", n, "--model", model, "--report", report]
    # "grid PMxPNxPK": grid on that grid (validate_model.py --grid, or the one grid picked).
    chosen = ["--strategy"] + (["grid", "--grid", strategy.split()[1]]
                               if strategy.startswith("grid ") else [strategy])
    if kind == "train":
        cmd = [distmm, "train"] + chosen + ["--steps", "4"] + common
    elif state == "cold":
        cmd = [distmm] + chosen + ["--warmup", "0", "--repeat", "1"] + common
    else:
        cmd = [distmm] + chosen + ["--warmup", "1", "--repeat", "5"] + common
    done = subprocess.run(cmd, capture_output=True, text=True, env=ENV)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr[-500:]}")
    out = {}
    for r in json.load(open(report))["runs"]:
        label = (r["strategy"] + (f" R={r['replicas']}" if "replicas" in r else "") +
                 (f" {r['grid']}" if "grid" in r else ""))
        if kind == "train" and state == "cold":
            out[label] = (r["predicted_cold_s"], r["predicted_cold_low_s"],
                          r["predicted_cold_high_s"])
        elif kind == "train":
            out[label] = (r["predicted_warm_s"], r["predicted_low_s"], r["predicted_high_s"])
        else:
            out[label] = (r["predicted_time_s"], r["predicted_low_s"], r["predicted_high_s"])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", nargs="+", help="validate_model.py's CSVs of drawn cases")
    ap.add_argument("--distmm", default=os.path.join(ROOT, "build", "distmm"))
    ap.add_argument("--markdown", action="store_true", help="print the table as markdown")
    ap.add_argument("--interval-error", nargs="+", type=float, metavar="X",
                    help="score the intervals with other held-out errors than the ones each "
                         "calibration recorded: COLD WARM (symmetric: uncertainty.error_cold, "
                         "error_warm) or COLD_LOW COLD_HIGH WARM_LOW WARM_HIGH (the 10th and 90th "
                         "percentiles of ln(measured / predicted): uncertainty.interval_cold, "
                         "interval_warm)")
    ap.add_argument("--retired", action="store_true",
                    help="also the terms the ablation removed (with a build that still has them)")
    ap.add_argument("--without", action="append", default=[], metavar="TERM",
                    help="take this term out of every model first (the ablation's starting point: "
                         "backward elimination, one term at a time); repeatable")
    ap.add_argument("--calibration", action="append", default=[], metavar="NAME",
                    help="also score the calibrations validate_model.py --also-calibrate NAME "
                         "made beside each run's (models/<model>.NAME.json): a change to "
                         "calibrate, on the same measurements; repeatable")
    ap.add_argument("--compare", nargs=2, action="append", metavar=("NAME", "DISTMM"), default=[],
                    help="also score another build of distmm (a change to the model's code) on "
                         "the runs' models, as row NAME; repeatable")
    ap.add_argument("--setting", action="append", default=[], metavar="NAME",
                    help="only the cases of this setting (as the CSV names it); repeatable")
    args = ap.parse_args()
    if args.interval_error and len(args.interval_error) not in (2, 4):
        ap.error("--interval-error takes 2 numbers (COLD WARM) or 4")
    rows = []
    for path in args.csv:
        for r in csv.DictReader(open(path)):
            if r["seed"] == "fixed":
                sys.exit(f"ablate_model.py: {path} holds the fixed (training) cases, not held-out")
            if args.setting and r["setting"] not in args.setting:
                continue
            if not r.get("model"):
                sys.exit(f"ablate_model.py: {path} names no model per run (an older CSV)")
            r["model_path"] = os.path.join(os.path.dirname(os.path.abspath(path)), "models",
                                           r["model"])
            rows.append(r)
    variants = [("full model", lambda m: None)] + TERMS + (RETIRED_TERMS if args.retired else [])
    programs = {name: args.distmm for name, _ in variants}
    for name, program in args.compare:
        variants.append((name, lambda m: None))
        programs[name] = program
    sources = {name: "" for name, _ in variants}  # which calibration each variant predicts from
    for name in args.calibration:
        variants.append((f"calibrated by {name}", lambda m: None))
        programs[f"calibrated by {name}"] = args.distmm
        sources[f"calibrated by {name}"] = f".{name}"
    errors = {name: {} for name, _ in variants}  # name -> {(setting, state): [|error|]}
    mismatched = []
    inside = {}  # state -> [whether the measurement lies in the full model's 80 % interval]
    log_errors = {}  # state -> the full model's ln(measured / predicted)
    with tempfile.TemporaryDirectory() as tmp:
        models = {}
        for path in sorted({r["model_path"] for r in rows}):
            calibrations = {}  # each calibration of the run once, with --without and widths
            for src in set(sources.values()):
                base = calibrations[src] = json.load(open(path[:-5] + src + ".json"))
                for term in args.without:
                    dict(TERMS + RETIRED_TERMS)[term](base)
                if args.interval_error:
                    u = base.setdefault("uncertainty", {})
                    for key in ("error_cold", "error_warm", "interval_cold", "interval_warm"):
                        u.pop(key, None)
                    x = args.interval_error
                    if len(x) == 2:
                        u["error_cold"], u["error_warm"] = x
                    else:
                        u["interval_cold"], u["interval_warm"] = x[:2], x[2:]
            for name, transform in variants:
                m = copy.deepcopy(calibrations[sources[name]])
                transform(m)
                out = os.path.join(tmp, f"{len(models)}.json")
                json.dump(m, open(out, "w"))
                models[(path, name)] = out
        cases = {}
        for r in rows:
            # One launch serves every strategy of a warm matmul case; the others run alone.
            # The grid's own, as the label names it (the one it picked, or a --grid).
            alone = r["kind"] == "train" or r["state"] == "cold"
            strategy = r["strategy"] if r["strategy"].startswith("grid ") and alone else (
                r["strategy"].split()[0] if alone else "all")
            cases.setdefault((r["model_path"], r["setting"], r["kind"], r["shape"], r["state"],
                              strategy), []).append(r)
        for (path, setting, kind, shape, state, strategy), members in cases.items():
            for name, _ in variants:
                predicted = predict(programs[name], models[(path, name)], setting, kind, shape,
                                    state, strategy, tmp)
                for r in members:
                    if r["strategy"] not in predicted:  # a --grid of validate_model.py: alone
                        predicted.update(predict(programs[name], models[(path, name)], setting,
                                                 kind, shape, state, r["strategy"], tmp))
                    (p, low, high), measured = predicted[r["strategy"]], float(r["measured_s"])
                    if name == "full model":
                        if abs(p / float(r["predicted_s"]) - 1) > 1e-3:
                            mismatched.append((setting, kind, shape, r["strategy"], state,
                                               float(r["predicted_s"]), p))
                        inside.setdefault(state, []).append(low <= measured <= high)
                        log_errors.setdefault(state, []).append(math.log(measured / p))
                    errors[name].setdefault((setting, state), []).append(
                        abs(p - measured) / measured)
    # The same build as the runs' reproduces their predictions; another build (a change to the
    # model since) differs, and its table scores that change on the same measurements.
    if mismatched:
        print(f"{len(mismatched)} of {sum(len(v) for v in errors['full model'].values())} full-model "
              "predictions differ from the runs' own (another build than the runs', or a dry run "
              "that does not predict what the run did), e.g.:")
        for m in mismatched[:3]:
            print(f"  {m[0]} {m[1]} {m[2]} {m[3]} {m[4]}: run {m[5]:.6f} s, here {m[6]:.6f} s")
    keys = sorted({k for e in errors.values() for k in e})
    seeds = sorted({r["seed"] for r in rows})
    print(f"held-out cases: {len(rows)} rows, seeds {', '.join(seeds)}; median |error| "
          "(all settings) cold / warm, and worst; per setting: median cold / warm")

    def flat(name, state):
        # Every variant holds the same cases in the same order: paired.
        return [x for (s, st), v in sorted(errors[name].items()) if st == state for x in v]

    def raised(name, state, draws=2000):
        """How much taking the term out raises the median |error| of a state, and the 90 %
        interval of that rise over cases resampled with replacement (paired; seed 1)."""
        import random
        rng = random.Random(1)
        a, b = flat("full model", state), flat(name, state)
        rises = []
        for _ in range(draws):
            picks = [rng.randrange(len(a)) for _ in a]
            rises.append(statistics.median(b[i] for i in picks) -
                         statistics.median(a[i] for i in picks))
        rises.sort()
        return (statistics.median(b) - statistics.median(a), rises[int(0.05 * draws)],
                rises[int(0.95 * draws)])

    settings = sorted({s for s, _ in keys})
    if args.markdown:
        print("| without | cold median | warm median | cold: rise (90 % interval) | "
              "warm: rise (90 % interval) | worst cold / warm | pays |")
        print("|---|---|---|---|---|---|---|")
    for name, _ in variants:
        c, w = flat(name, "cold"), flat(name, "warm")
        rises = {st: raised(name, st) for st in ("cold", "warm")}
        # A term pays where taking it out raises a median beyond the resampling's noise.
        pays = any(lo > 0 for _, lo, _ in rises.values())
        text = {st: f"{100 * r[0]:+.1f} ({100 * r[1]:+.1f} to {100 * r[2]:+.1f})"
                for st, r in rises.items()}
        per = [f"{100 * statistics.median(errors[name].get((s, 'cold'), [0])):.1f} / "
               f"{100 * statistics.median(errors[name].get((s, 'warm'), [0])):.1f}"
               for s in settings]
        if args.markdown:
            print(f"| {name} | {100 * statistics.median(c):.1f} % | "
                  f"{100 * statistics.median(w):.1f} % | {text['cold']} | {text['warm']} | "
                  f"{100 * max(c):.0f} / {100 * max(w):.0f} % | "
                  f"{'' if name == 'full model' else 'yes' if pays else 'no'} |")
        else:
            print(f"{name:36} cold {100 * statistics.median(c):5.1f} %  warm "
                  f"{100 * statistics.median(w):5.1f} %  rise {text['cold']:24} / "
                  f"{text['warm']:24} worst {100 * max(c):5.0f} / {100 * max(w):5.0f} %   " +
                  "  ".join(per))
    if not args.markdown:
        print("settings: " + "; ".join(settings))
    for state, flags in sorted(inside.items()):
        # What an interval fitted on these cases would take (the 80th percentile of the
        # magnitude for a symmetric one; the 10th and 90th of the signed ratio otherwise).
        logs = log_errors[state]
        cuts = statistics.quantiles(logs, n=10, method="inclusive")
        magnitude = statistics.quantiles([abs(x) for x in logs], n=5, method="inclusive")[3]
        print(f"the full model's 80 % intervals hold {sum(flags)} of {len(flags)} {state} "
              f"measurements ({100 * sum(flags) / len(flags):.0f} %); ln(measured / predicted): "
              f"10th and 90th percentiles {cuts[0]:+.3f} {cuts[-1]:+.3f}, the 80th percentile of "
              f"its magnitude {magnitude:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
