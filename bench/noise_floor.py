#!/usr/bin/env python3
"""How close any prediction can come on this machine: two validation runs' measurements of
the same cases, one taken as the other's prediction.

    bench/noise_floor.py A.csv B.csv [C.csv ...]

Each CSV is a bench/validate_model.py output (model_validation.csv) of the same code. For every
ordered pair of runs (X, Y) and every setting and state, the cases both measured are scored as
the validation scores the model: |measured_Y - measured_X| / measured_X, its median and worst,
and whether they meet the targets (median <= 10 %, worst <= 25 %). Beside it, each run's own
model against its own measurements (the predicted_s column) in that setting and state. A
setting where a second measurement misses the targets against the first is one where no
prediction can be sure to meet them: the runs themselves differ by that much."""
import argparse
import csv
import itertools
import statistics

MEDIAN_TARGET, WORST_TARGET = 0.10, 0.25


def load(path):
    """{(setting, kind, shape, strategy, state): (predicted, measured)}"""
    with open(path) as f:
        return {(r["setting"], r["kind"], r["shape"], r["strategy"], r["state"]):
                (float(r["predicted_s"]), float(r["measured_s"])) for r in csv.DictReader(f)}


def score(errors):
    """(median, worst, meets both targets) of relative errors."""
    median, worst = statistics.median(errors), max(errors)
    return median, worst, median <= MEDIAN_TARGET and worst <= WORST_TARGET


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csvs", nargs="+", metavar="CSV")
    args = parser.parse_args()
    if len(args.csvs) < 2:
        parser.error("two runs at least")
    runs = [load(p) for p in args.csvs]
    groups = sorted({(k[0], k[4]) for run in runs for k in run})
    totals = {"measured again": [0, 0], "model": [0, 0]}
    print(f"{'setting':<40} {'state':<5} {'another run measured':>22}   {'its model':>18}")
    for setting, state in groups:
        cases = [[k for k in run if k[0] == setting and k[4] == state] for run in runs]
        again = []
        for x, y in itertools.permutations(range(len(runs)), 2):
            keys = [k for k in cases[x] if k in runs[y]]
            if keys:
                again.append(score([abs(runs[y][k][1] - runs[x][k][1]) / runs[x][k][1]
                                    for k in keys]))
        if not again:
            continue
        model = [score([abs(run[k][0] - run[k][1]) / run[k][1] for k in keys])
                 for run, keys in zip(runs, cases) if keys]
        cells = []
        for name, scores in (("measured again", again), ("model", model)):
            met = sum(s[2] for s in scores)
            totals[name][0] += met
            totals[name][1] += len(scores)
            worst = max(s[1] for s in scores)
            cells.append(f"{met} of {len(scores)} meet, worst {100 * worst:5.1f} %")
        print(f"{setting[:40]:<40} {state:<5} {cells[0]:>22}   {cells[1]:>18}")
    for name, (met, total) in totals.items():
        print(f"{name}: {met} of {total} (setting, state) scores meet both targets")


if __name__ == "__main__":
    main()
