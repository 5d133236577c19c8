#!/usr/bin/env python3
"""The grid strategy raced against ScaLAPACK PDGEMM and distmm's fsdp, in one run.

For each n and rank count: `mpirun -np P build/distmm --strategy grid` (auto and, on 4 ranks,
2x2x1) and fsdp, warm (median of --repeat 3 after 1 warm-up), and build/bench/pdgemm_bench on
every P1 x P2 grid with blocks 64/128/256 (median of 3 after a cold call; the best kept).
distmm's time is the program's: with the root layout it includes scattering A's blocks and
gathering C on rank 0, which PDGEMM's call does not (its operands start and end distributed).
Writes bench/results/grid_race.csv and prints a table with the ratios.
Usage: bench/grid_race.py [N ...]   (default 2048 4096; needs build/ with the benchmarks)"""
import csv
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DISTMM = os.path.join(ROOT, "build", "distmm")
PDGEMM = os.path.join(ROOT, "build", "bench", "pdgemm_bench")
MPIRUN = ["mpirun", "-q", "--oversubscribe"]


def sh(cmd):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    if done.returncode != 0:
        sys.exit(f"grid_race: {' '.join(cmd)} exited {done.returncode}: {done.stderr}")
    return done.stdout


def distmm(n, ranks, strategy, extra=()):
    with tempfile.TemporaryDirectory() as d:
        report = os.path.join(d, "r.json")
        sh(MPIRUN + ["-np", str(ranks), DISTMM, "--no-verify", "--strategy", strategy,
                     "--m", str(n), "--k", str(n), "--n", str(n), "--warmup", "1", "--repeat",
                     "3", "--report", report, *extra])
        run = json.load(open(report))["runs"][0]
        return run["time_s"], run.get("grid", "")


def pdgemm_best(n, ranks):
    best = None
    grids = [(p, ranks // p) for p in range(1, ranks + 1) if ranks % p == 0]
    for pr, pc in grids:
        for nb in (64, 128, 256):
            row = sh(MPIRUN + ["-np", str(ranks), PDGEMM, str(n), str(nb), str(pr), str(pc), "3"])
            median = float(row.strip().split(",")[5])
            if best is None or median < best[0]:
                best = (median, f"{pr}x{pc} nb{nb}")
    return best


rows = []
for n in map(int, sys.argv[1:] or ["2048", "4096"]):
    for ranks in (2, 4):
        flops = 2.0 * n ** 3
        pd_s, pd_how = pdgemm_best(n, ranks)
        runs = [("grid auto", *distmm(n, ranks, "grid"))]
        if ranks == 4:
            runs.append(("grid 2x2x1", *distmm(n, ranks, "grid", ["--grid", "2x2x1"])))
        runs.append(("fsdp", distmm(n, ranks, "fsdp")[0], ""))
        rows.append({"n": n, "ranks": ranks, "method": f"pdgemm best ({pd_how})",
                     "seconds": f"{pd_s:.6f}", "gflops": f"{flops / pd_s / 1e9:.2f}",
                     "speed_vs_pdgemm": "1.000"})
        for name, seconds, grid in runs:
            label = f"distmm {name}" + (f" ({grid})" if grid and name == "grid auto" else "")
            rows.append({"n": n, "ranks": ranks, "method": label, "seconds": f"{seconds:.6f}",
                         "gflops": f"{flops / seconds / 1e9:.2f}",
                         "speed_vs_pdgemm": f"{pd_s / seconds:.3f}"})
        for r in rows[-len(runs) - 1:]:
            print(f"n={r['n']:5d} P={r['ranks']} {r['method']:32s} {r['seconds']:>10s} s "
                  f"{r['gflops']:>7s} GFLOP/s  speed vs PDGEMM {r['speed_vs_pdgemm']}", flush=True)

out = os.path.join(ROOT, "bench", "results", "grid_race.csv")
with open(out, "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
    w.writeheader()
    w.writerows(rows)
print(f"wrote {out}")
