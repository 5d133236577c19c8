#!/usr/bin/env python3
"""Re-predict a validation run's cases with other models, without running anything.

    bench/repredict_model.py CSV SETTING MODEL.json [MODEL.json ...]

CSV is a bench/validate_model.py output (bench/results/model_validation.csv), SETTING one of
its setting names ("simulator 4 ranks", "2 hosts, 1gbit/s, 2 rank(s) per host", ...). Each
case is predicted again with `distmm --dry-run --model MODEL` (train cases with `distmm train
--dry-run`), at the setting's rank count and ranks per host, and compared with the measured
time in the CSV: per model, per state (cold, warm), the median and worst error and the cases
within 25 %. It answers "would a better calibration (or a model change) have fixed that
setting?" in seconds instead of a validation run's minutes."""
import argparse
import csv
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def placement(setting):
    """(ranks, ranks per host) from a validate_model.py setting name."""
    hosts = re.match(r"2 hosts, .*, (\d+) rank\(s\) per host", setting)
    if hosts:
        per_host = int(hosts.group(1))
        return 2 * per_host, per_host
    local = re.match(r"(?:mpi|simulator) (\d+) ranks", setting)
    if not local:
        sys.exit(f"repredict_model.py: unknown setting {setting!r}")
    return int(local.group(1)), int(local.group(1))


def predict(distmm, model, ranks, per_host, row, report):
    kind, shape, label, state = row[1], row[2], row[3], row[4]
    m, k, n = shape.split("x")
    strategy, *rest = label.split()
    cmd = [distmm] + (["train"] if kind == "train" else [])
    cmd += ["--dry-run", "--ranks", str(ranks), "--ranks-per-host", str(per_host), "--model",
            model, "--strategy", strategy, "--m", m, "--k", k, "--n", n, "--report", report]
    if rest:  # "hsdp R=2"
        cmd += ["--replicas", rest[0].split("=")[1]]
    if kind == "matmul" and state == "warm":
        cmd += ["--warmup", "1"]
    subprocess.run(cmd, capture_output=True, check=True)
    run = json.load(open(report))["runs"][0]
    if kind == "train":
        return run["predicted_cold_s" if state == "cold" else "predicted_warm_s"]
    return run["predicted_time_s"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv")
    parser.add_argument("setting")
    parser.add_argument("models", nargs="+")
    parser.add_argument("--distmm", default=os.path.join(ROOT, "build", "distmm"))
    parser.add_argument("--cases", action="store_true",
                        help="also print every case off by more than --beyond")
    parser.add_argument("--beyond", type=float, default=0.25, metavar="FRACTION",
                        help="with --cases: the error beyond which a case is printed "
                             "(default 0.25; 0 prints all)")
    args = parser.parse_args()
    rows = [r for r in csv.reader(open(args.csv)) if r[0] == args.setting]
    if not rows:
        sys.exit(f"repredict_model.py: no cases of setting {args.setting!r} in {args.csv}")
    ranks, per_host = placement(args.setting)
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "r.json")
        for model in args.models:
            errors = {"cold": [], "warm": []}
            for row in rows:
                predicted = predict(args.distmm, model, ranks, per_host, row, report)
                error = (predicted - float(row[6])) / float(row[6])
                errors[row[4]].append(abs(error))
                if args.cases and abs(error) > args.beyond:
                    print(f"  {' '.join(row[1:5])}: predicted {predicted:.4g} s, measured "
                          f"{float(row[6]):.4g} s ({100 * error:+.0f} %)")
            for state, e in errors.items():
                within = sum(x <= 0.25 for x in e)
                print(f"{model}  {state}: median {100 * statistics.median(e):5.1f} %  worst "
                      f"{100 * max(e):5.1f} %  ({within} of {len(e)} within 25 %)")


if __name__ == "__main__":
    main()
