#!/usr/bin/env python3
"""Predicted scaling of the strategies on a machine model (see bench/scaling.sh)."""
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DISTMM = os.path.join(ROOT, "build", "distmm")
MODEL = sys.argv[1]
OUT = os.path.join(ROOT, "bench", "results")
PER_HOST = 8
RANKS = [2 ** i for i in range(13)]  # 1 .. 4096
K = N = 8192  # a 8192 x 8192 layer: 512 MiB of parameters in double
# (kind, name, batch rows m as a function of the ranks)
CASES = [("train", "weak: 64 rows per rank", lambda p: 64 * p),
         ("train", "strong: 65536 rows", lambda p: 65536),
         ("matmul", "strong: 65536 rows", lambda p: 65536)]


def predict(kind, p, m, tmp):
    report = os.path.join(tmp, "r.json")
    cmd = [DISTMM] + (["train"] if kind == "train" else []) + [
        "--dry-run", "--ranks", str(p), "--m", str(m), "--k", str(K), "--n", str(N),
        "--model", MODEL, "--ranks-per-host", str(min(p, PER_HOST)), "--report", report]
    if kind == "train":
        cmd += ["--strategy", "all", "--replicas", str(max(1, p // PER_HOST))]
    else:
        cmd += ["--strategy", "all"]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    rows = []
    for r in json.load(open(report))["runs"]:
        s = r["strategy"]
        if kind == "matmul" and s not in ("dp", "fsdp", "fsdp-overlap"):
            continue
        if kind == "train":
            peak = max(x["peak_param_grad_bytes"] + x["optimizer_state_bytes"] for x in r["per_rank"])
            t = r["predicted_warm_s"]
        else:
            peak = max(x["peak_param_bytes"] for x in r["per_rank"])
            t = r["predicted_warm_s"]
        rows.append([kind, s, p, m, t, peak])
    return rows


def main():
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind, name, m_of in CASES:
            for p in RANKS:
                for r in predict(kind, p, m_of(p), tmp):
                    rows.append([name] + r)
    os.makedirs(OUT, exist_ok=True)
    header = ["case", "kind", "strategy", "ranks", "m", "predicted_s", "peak_param_bytes"]
    with open(os.path.join(OUT, "scaling.csv"), "w", newline="") as f:
        csv.writer(f).writerows([header] + rows)
    for case in dict.fromkeys((r[0], r[1]) for r in rows):
        print(f"\n== {case[1]} {case[0]} (k = n = {K}; model {MODEL})")
        strategies = list(dict.fromkeys(r[2] for r in rows if (r[0], r[1]) == case))
        print(f"{'ranks':>6} " + " ".join(f"{s + ' s':>14} {'peak MiB':>9}" for s in strategies))
        for p in RANKS:
            cells = []
            for s in strategies:
                r = [x for x in rows if (x[0], x[1]) == case and x[2] == s and x[3] == p][0]
                cells.append(f"{r[5]:14.5f} {r[6] / 2**20:9.1f}")
            print(f"{p:6d} " + " ".join(cells))
    plot(rows)


def plot(rows):
    if not shutil.which("gnuplot"):
        return
    data = os.path.join(OUT, "scaling.dat")
    blocks = []
    with open(data, "w") as f:
        for case in dict.fromkeys((r[0], r[1]) for r in rows):
            for s in dict.fromkeys(r[2] for r in rows if (r[0], r[1]) == case):
                f.write(f"# {case[1]} {case[0]} {s}\n")
                for r in rows:
                    if (r[0], r[1]) == case and r[2] == s:
                        f.write(f"{r[3]} {r[5]} {r[6] / 2**20}\n")
                f.write("\n\n")
                blocks.append((case, s))
    plots_t, plots_m = [], []
    for i, (case, s) in enumerate(blocks):
        title = f"{s}, {case[1]} {case[0]}".replace("_", "-")
        plots_t.append(f"'{data}' index {i} using 1:2 with linespoints title '{title}'")
        plots_m.append(f"'{data}' index {i} using 1:3 with linespoints title '{title}'")
    script = f"""set terminal png size 1400,600
set output '{os.path.join(OUT, "scaling.png")}'
set multiplot layout 1,2
set logscale xy
set xlabel 'ranks (8 per host)'
set key bottom left font ',8'
set ylabel 'predicted time (s)'
set title 'time of a training step or a forward multiply'
plot {", ".join(plots_t)}
set ylabel 'peak parameter memory per rank (MiB)'
set title 'per-rank peak parameter memory'
plot {", ".join(plots_m)}
unset multiplot
"""
    subprocess.run(["gnuplot"], input=script, text=True, check=False)
    os.remove(data)


if __name__ == "__main__":
    main()
