#!/usr/bin/env python3
"""A distmm plan called from Python against the same plan run by the program, in one run.

For each strategy (default: every one in the registry), `mpirun -np P build/distmm --strategy S
--m N --k N --n N --warmup W --repeat R --no-verify` (its table's time_s: the median of rank 0's
execute() after a barrier) and `mpirun -np P python3 bench/python_plan_call.py` (the same plan
from Python, timed the same way, with out= and with a fresh C each call), the order alternating,
--rounds times interleaved so each ratio is of figures taken close in time.
GFLOP/s ratio = C++ time / Python time; the target (issue 19) is at least 0.97 with out=.
Writes bench/results/python_race.csv (every round) and prints each strategy's median ratio over the rounds, of the medians and of
the fastest calls (the overhead of Python, least blurred by the machine's noise).
Usage: bench/python_race.py [--rounds R] [--np P] [--n N] [STRATEGY ...]  (needs build/)"""
import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DISTMM = os.path.join(ROOT, "build", "distmm")
CALL = os.path.join(ROOT, "bench", "python_plan_call.py")
MPIRUN = ["mpirun", "-q", "--oversubscribe"]
WARMUP, REPEAT = 2, 9


def sh(cmd):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "build", "python"))
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    if done.returncode != 0:
        sys.exit(f"python_race: {' '.join(cmd)} exited {done.returncode}: {done.stderr}")
    return done.stdout


def program(strategy, n, ranks):
    with tempfile.TemporaryDirectory() as d:
        report = os.path.join(d, "r.json")
        sh(MPIRUN + ["-np", str(ranks), DISTMM, "--no-verify", "--strategy", strategy,
                     "--m", str(n), "--k", str(n), "--n", str(n), "--warmup", str(WARMUP),
                     "--repeat", str(REPEAT), "--report", report])
        run = json.load(open(report))["runs"][0]
        return run["time_s"], min(run["times_s"])


def python(strategy, n, ranks):
    out = sh(MPIRUN + ["-np", str(ranks), "/usr/bin/python3", CALL, strategy, str(n), str(n),
                       str(n), str(WARMUP), str(REPEAT)])
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("strategies", nargs="*")
    args = ap.parse_args()
    names = args.strategies or [line.split()[0] for line in sh(
        ["/usr/bin/python3", "-c",
         "import distmm; print('\\n'.join(s['name'] for s in distmm.strategies()))"]).split()]
    rows = []
    for r in range(args.rounds):
        for i, s in enumerate(names):
            first_cpp = (r + i) % 2 == 0
            if first_cpp:
                cpp, cpp_best = program(s, args.n, args.np)
            py = python(s, args.n, args.np)
            if not first_cpp:
                cpp, cpp_best = program(s, args.n, args.np)
            rows.append({"round": r, "strategy": s, "label": py["label"], "ranks": args.np,
                         "n": args.n, "cpp_s": cpp, "cpp_best_s": cpp_best,
                         "python_out_s": py["out_s"], "python_out_best_s": py["out_best_s"],
                         "python_fresh_s": py["fresh_s"], "python_copies": py["python_copies"],
                         "ratio_out": cpp / py["out_s"], "ratio_fresh": cpp / py["fresh_s"],
                         "ratio_best": cpp_best / py["out_best_s"]})
            print(json.dumps(rows[-1]), flush=True)
    path = os.path.join(ROOT, "bench", "results", "python_race.csv")
    with open(path + ".tmp", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    os.replace(path + ".tmp", path)
    print(f"\nmpirun -np {args.np}, {args.n}^3 f64, warm (median of {REPEAT} after {WARMUP}), "
          f"{args.rounds} interleaved rounds: median GFLOP/s of Python / C++")
    for s in names:
        mine = [x for x in rows if x["strategy"] == s]
        print(f"{mine[0]['label']:<14} out= {statistics.median(x['ratio_out'] for x in mine):.3f}"
              f"   fresh C {statistics.median(x['ratio_fresh'] for x in mine):.3f}"
              f"   fastest call, out= {statistics.median(x['ratio_best'] for x in mine):.3f}")


if __name__ == "__main__":
    main()
