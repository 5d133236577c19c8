#!/usr/bin/env python3
"""The benchmark sweep (see run_bench.sh). Usage: run_bench.py N [N ...]"""
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "bench", "results")
DISTMM = os.path.join(ROOT, "build", "distmm")
BENCH = os.path.join(ROOT, "build", "bench")
MPIRUN = ["mpirun", "-q"]  # mpirun's default binding, as users run it
STRATEGIES = ["dp", "fsdp", "fsdp-overlap"]
rows = []


def sh(cmd, env=None):
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    if done.returncode != 0:
        sys.exit(f"run_bench: {' '.join(cmd)} exited {done.returncode}: {done.stderr}")
    return done.stdout


def distmm(n, strategy, launch, extra):
    """Runs the program once; returns its report's run."""
    with tempfile.TemporaryDirectory() as d:
        report = os.path.join(d, "r.json")
        sh(launch + [DISTMM, "--no-verify", "--strategy", strategy, "--m", str(n), "--k", str(n),
                     "--n", str(n), "--report", report] + extra)
        return json.load(open(report))["runs"][0]


def add(method, backend, ranks, n, seconds, cold_s=None, setup_s=None, faults=None, note=""):
    flops = 2.0 * n ** 3
    rows.append({"method": method, "backend": backend, "ranks": ranks, "n": n,
                 "seconds": f"{seconds:.6f}", "gflops": f"{flops / seconds / 1e9:.2f}",
                 "cold_s": "" if cold_s is None else f"{cold_s:.6f}",
                 "setup_s": "" if setup_s is None else f"{setup_s:.6f}",
                 "page_faults": "" if faults is None else str(faults), "note": note})
    print(f"{method:28s} {backend:10s} {ranks} n={n:5d} {seconds:9.4f} s "
          f"{flops / seconds / 1e9:7.2f} GFLOP/s {note}", file=sys.stderr)


def csv_row(text):
    f = text.strip().split(",")
    return float(f[4]), float(f[5])  # cold, median


for n in map(int, sys.argv[1:]):
    for s in STRATEGIES:
        # Cold: one execution in a fresh process, what `mpirun -np 2 build/distmm` shows.
        cold = distmm(n, s, MPIRUN + ["-np", "2"], [])
        faults = max(r["setup_page_faults"] + r["first_page_faults"] for r in cold["per_rank"])
        add(f"distmm {s} cold", "mpi", 2, n, cold["time_s"], cold["time_s"], cold["setup_s"],
            faults, "first execution; setup_s apart")
        add(f"distmm {s} cold+setup", "mpi", 2, n, cold["time_s"] + cold["setup_s"],
            note="setup (placing B) + first execution")
        for backend, launch in (("mpi", MPIRUN + ["-np", "2"]), ("simulator", [])):
            extra = ["--warmup", "1", "--repeat", "3"] + (["--ranks", "2"] if not launch else [])
            warm = distmm(n, s, launch, extra)
            faults = max(r["page_faults"] for r in warm["per_rank"]) // 3
            add(f"distmm {s} warm", backend, 2, n, warm["time_s"], faults=faults,
                note="median of 3 after 1 warm-up; page_faults per execution")
    # One rank: mpirun's default binding (one core) against --bind-to none.
    for binding, flags in (("default", []), ("none", ["--bind-to", "none"])):
        r = distmm(n, "dp", MPIRUN + ["-np", "1"] + flags, ["--warmup", "1", "--repeat", "3"])
        add(f"distmm dp 1 rank bind-{binding}", "mpi", 1, n, r["time_s"],
            note=f"BLAS threads {r['per_rank'][0]['blas_threads']}")
    # The baselines.
    env1 = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    for s in ("dp", "fsdp"):
        cold, med = csv_row(sh(MPIRUN + ["-np", "2", "-x", "OPENBLAS_NUM_THREADS=1",
                                         os.path.join(BENCH, "raw_mpi_bench"), s, str(n), "3"],
                               env=env1))
        add(f"raw-mpi {s} warm", "mpi", 2, n, med, cold_s=cold, note="median of 3 after a cold run")
    best = None
    for grid in ("1 2", "2 1"):
        for nb in (64, 128, 256):
            cold, med = csv_row(sh(MPIRUN + ["-np", "2", os.path.join(BENCH, "pdgemm_bench"),
                                             str(n), str(nb), *grid.split(), "3"]))
            add(f"pdgemm {grid.replace(' ', 'x')} nb{nb}", "mpi", 2, n, med, cold_s=cold)
            best = med if best is None else min(best, med)
    add("pdgemm best", "mpi", 2, n, best, note="best grid and block")
    cold, med = csv_row(sh([os.path.join(BENCH, "openblas_bench"), str(n), "2", "3"]))
    add("openblas 2 threads warm", "single", 1, n, med)
    add("openblas 2 threads cold", "single", 1, n, cold, note="fresh C + one dgemm")

os.makedirs(OUT, exist_ok=True)
with open(os.path.join(OUT, "results.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
    w.writeheader()
    w.writerows(rows)


def sec(method, backend, n):
    for r in rows:
        if r["method"] == method and r["backend"] == backend and r["n"] == n:
            return float(r["seconds"])
    return None


def faults(method, backend, n):
    for r in rows:
        if r["method"] == method and r["backend"] == backend and r["n"] == n:
            return int(r["page_faults"])
    return None


lines = ["# Benchmark results", "", "Made by `bench/run_bench.sh` (one run; GFLOP/s from the median "
         "where repeated). Seconds per multiply of n x n x n doubles.", "",
         "| method | backend | ranks | n | seconds | GFLOP/s | setup_s | page faults | note |",
         "|---|---|---|---|---|---|---|---|---|"]
for r in rows:
    lines.append(f"| {r['method']} | {r['backend']} | {r['ranks']} | {r['n']} | {r['seconds']} | "
                 f"{r['gflops']} | {r['setup_s']} | {r['page_faults']} | {r['note']} |")
targets = ["", "## Targets (ratios of speeds measured in this run; >= 1 is met unless noted)", "",
           "| target | n | figure | need | met |", "|---|---|---|---|---|"]


def target(text, n, value, need, higher=True):
    if value is None:
        return
    met = value >= need if higher else value <= need
    targets.append(f"| {text} | {n} | {value:.3f} | {'>=' if higher else '<='} {need} | "
                   f"{'yes' if met else '**no**'} |")


for n in map(int, sys.argv[1:]):
    for s, raw in (("dp", "dp"), ("fsdp", "fsdp")):
        target(f"{s} warm vs raw-MPI {raw} (speed)", n,
               sec(f"raw-mpi {raw} warm", "mpi", n) / sec(f"distmm {s} warm", "mpi", n), 0.97)
    target("fsdp-overlap vs fsdp, warm (speed)", n,
           sec("distmm fsdp warm", "mpi", n) / sec("distmm fsdp-overlap warm", "mpi", n), 1.0)
    for s in STRATEGIES:
        target(f"{s} warm vs best PDGEMM (speed){'' if n >= 4096 else ' (target at 4096 only)'}",
               n, sec("pdgemm best", "mpi", n) / sec(f"distmm {s} warm", "mpi", n), 1.0)
        target(f"{s} simulator vs MPI backend, warm (speed)", n,
               sec(f"distmm {s} warm", "mpi", n) / sec(f"distmm {s} warm", "simulator", n), 0.97)
        cold_note = "" if n >= 4096 else " (target at 4096 only)"
        target(f"{s} cold execution / OpenBLAS cold (time){cold_note}", n,
               sec(f"distmm {s} cold", "mpi", n) / sec("openblas 2 threads cold", "single", n),
               1.3, higher=False)
        target(f"{s} cold setup+execution / OpenBLAS cold (time){cold_note}", n,
               sec(f"distmm {s} cold+setup", "mpi", n) / sec("openblas 2 threads cold", "single", n),
               1.3, higher=False)
        for backend in ("mpi", "simulator"):
            cold_faults = faults(f"distmm {s} cold", "mpi", n)
            target(f"{s} warm page faults / cold ({backend}) ", n,
                   faults(f"distmm {s} warm", backend, n) / max(1, cold_faults), 0.01, higher=False)
    target("1 rank default binding vs --bind-to none (speed)", n,
           sec("distmm dp 1 rank bind-none", "mpi", n) / sec("distmm dp 1 rank bind-default", "mpi", n),
           0.95)
with open(os.path.join(OUT, "summary.md"), "w") as f:
    f.write("\n".join(lines + targets) + "\n")

# The plot: GFLOP/s of every warm method per n (gnuplot, histogram).
plot_rows = [r for r in rows if "cold" not in r["method"] and r["method"] != "pdgemm best"]
methods = list(dict.fromkeys(f"{r['method']} ({r['backend']})" for r in plot_rows))
sizes = sorted({r["n"] for r in plot_rows})
data = os.path.join(OUT, "gflops.dat")
with open(data, "w") as f:
    for m in methods:
        vals = []
        for n in sizes:
            v = [r["gflops"] for r in plot_rows if f"{r['method']} ({r['backend']})" == m and r["n"] == n]
            vals.append(v[0] if v else "0")
        f.write(f"\"{m}\" " + " ".join(vals) + "\n")
script = f"""set terminal png size 1200,700
set output '{os.path.join(OUT, 'gflops.png')}'
set style data histograms
set style fill solid border -1
set ylabel 'GFLOP/s (warm median)'
set yrange [0:*]
set xtics rotate by -40 font ',8'
set key top left
set title 'C = A B, n x n x n doubles, 2 ranks / 2 threads on 2 cores'
plot {', '.join(f"'{data}' using {i + 2}:xtic(1) title 'n = {n}'" for i, n in enumerate(sizes))}
"""
subprocess.run(["gnuplot"], input=script, text=True, check=True)
os.remove(data)
print("\n".join(lines + targets))
