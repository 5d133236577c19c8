#!/usr/bin/env python3
"""Turns bench/results/results.csv into summary.md (table and targets) and gflops.png (gnuplot)."""
import csv
import os
import subprocess
import sys
from collections import defaultdict

csv_path, out = sys.argv[1], sys.argv[2]
rows = list(csv.DictReader(open(csv_path)))
by = {}
for r in rows:
    key = (r["method"] if r["backend"] in ("single",) or r["method"].startswith("pdgemm")
           else f'{r["method"]} ({r["backend"]})')
    by[(key, int(r["ranks"]), int(r["n"]))] = r
methods = sorted({k[0] for k in by}, key=lambda m: (m.startswith("pdgemm"), m.startswith("openblas"), m))
sizes = sorted({k[2] for k in by})
ranks = sorted({k[1] for k in by})


def g(method, p, n):
    r = by.get((method, p, n))
    return float(r["gflops"]) if r else None


lines = ["| method | ranks | " + " | ".join(f"n = {n}: GFLOP/s median [min–max], cold s" for n in sizes) + " |",
         "|---|---|" + "---|" * len(sizes)]
for m in methods:
    for p in ranks:
        cells = []
        for n in sizes:
            r = by.get((m, p, n))
            cells.append("–" if not r else f'{float(r["gflops"]):.1f} [{float(r["gflops_min"]):.1f}–{float(r["gflops_max"]):.1f}], {float(r["cold_s"]):.3f}')
        lines.append(f"| {m} | {p} | " + " | ".join(cells) + " |")

targets = []


def target(text, value, threshold, higher=True):
    if value is None:
        targets.append(f"| {text} | not measured | |")
        return
    met = value >= threshold if higher else value <= threshold
    targets.append(f"| {text} | {value:.3f} | {'met' if met else 'MISSED'} |")


strategies = ["dp", "fsdp", "fsdp-overlap"]
for n, need in ((4096, 0.97), (1024, 0.90)):
    ideal = g("openblas", 2, n)
    for s in strategies:
        v = g(f"{s} (mpi)", 2, n)
        target(f"n={n}, 2 ranks, MPI: {s} / OpenBLAS 2 threads ≥ {need}", v / ideal if v and ideal else None, need)
best_pdgemm = {}
for n in sizes:
    for p in ranks:
        vals = [g(f"pdgemm-nb{nb}", p, n) for nb in (64, 128)]
        vals = [v for v in vals if v]
        best_pdgemm[(p, n)] = max(vals) if vals else None
for s in strategies:
    v, ref = g(f"{s} (mpi)", 2, 4096), best_pdgemm.get((2, 4096))
    target(f"n=4096, 2 ranks, MPI: {s} / best PDGEMM ≥ 1.10", v / ref if v and ref else None, 1.10)
for n in sizes:
    for s in strategies:
        sim, mpi = g(f"{s} (simulator)", 2, n), g(f"{s} (mpi)", 2, n)
        target(f"n={n}, 2 ranks: {s} simulator / MPI ≥ 1", sim / mpi if sim and mpi else None, 1.0)
r = by.get(("fsdp-overlap (mpi)", 2, 4096))
if r:
    target("n=4096, 2 ranks, MPI: fsdp-overlap time outside the multiply ≤ 0.01", float(r["outside_gemm"]), 0.01, higher=False)
    target("n=4096, 2 ranks: fsdp-overlap peak parameter memory / shard ≤ 2",
           float(r["peak_param_bytes"]) / float(r["shard_bytes"]), 2.0, higher=False)
for n in sizes:
    for s in strategies:
        for backend in ("mpi", "simulator"):
            v, ref = g(f"{s} ({backend})", 4, n), best_pdgemm.get((4, n))
            target(f"n={n}, 4 ranks: {s} ({backend}) / best PDGEMM ≥ 1", v / ref if v and ref else None, 1.0)

with open(os.path.join(out, "summary.md"), "w") as f:
    f.write("\n".join(lines) + "\n\n| target | measured ratio | |\n|---|---|---|\n" + "\n".join(targets) + "\n")

# gnuplot: GFLOP/s against ranks, one line per method, one panel per n.
data = os.path.join(out, "gflops.dat")
with open(data, "w") as f:
    for m in methods:
        f.write(f'"{m}"\n')
        for p in ranks:
            f.write(f"{p} " + " ".join(str(g(m, p, n) or "NaN") for n in sizes) + "\n")
        f.write("\n\n")
script = [f'set terminal pngcairo size {520 * len(sizes)},520 font ",10"',
          f'set output "{os.path.join(out, "gflops.png")}"',
          f"set multiplot layout 1,{len(sizes)}",
          'set xlabel "ranks"', 'set ylabel "GFLOP/s (median)"', "set xtics (1, 2, 4)",
          "set key bottom right font \",8\"", "set grid", "set yrange [0:*]"]
for i, n in enumerate(sizes):
    plots = ", ".join(f'"{data}" index {j} using 1:{i + 2} with linespoints title columnheader(1)'
                      for j in range(len(methods)))
    script += [f'set title "n = {n}"', f"plot {plots}"]
script.append("unset multiplot")
subprocess.run(["gnuplot"], input="\n".join(script), text=True, check=True)
