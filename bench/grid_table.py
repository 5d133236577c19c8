#!/usr/bin/env python3
"""Words each rank receives per execution, 1-D against the grids and the lower bound.

For P = 4, 64, 512 and 4096 ranks and three shapes (square; large k, k = 64 m = 64 n; flat,
m = n = 64 k) it dry-runs (`distmm --dry-run --report`, no data moved) fsdp, the squarest 2-D
grid, the 2.5-D grid with c = 2 layers (the squarest 2-D grid of P/2 ranks, two deep; c = 4 at
P = 4096, whose P/4 is a square), the 3-D cube where P is one, and `--grid auto` with no memory limit and with a rank's
memory limited to what the squarest 2-D grid holds, in both layouts (--layout root and
distributed), and reads each rank's received bytes from the report: the largest over the ranks
(in the root layout those other than the root, which receives all of C), and the most words of
B (the parameter) a rank holds at once: its peak_param_bytes, its part and B's panels. Beside them, the
lower bound (grid.hpp: Al Daas et al., SPAA 2022) for data that starts and ends evenly
distributed: the distributed layout's. Writes bench/results/grid_words.csv and prints a Markdown
table (docs/grid.md). Usage: grid_table.py [--distmm build/distmm]"""
import argparse
import csv
import json
import math
import os
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--distmm", default=os.path.join(ROOT, "build", "distmm"))
args = parser.parse_args()

SHAPES = {  # name: (m, k, n)
    "square": (32768, 32768, 32768),
    "large k": (4096, 262144, 4096),
    "flat": (262144, 4096, 262144),
}
RANKS = [4, 64, 512, 4096]


def bound(m, k, n, p):
    d = sorted([m, n, k], reverse=True)
    if p <= d[0] / d[1]:
        accessed = d[1] * d[2] + (d[0] * d[1] + d[0] * d[2]) / p
    elif p <= d[0] * d[1] / (d[2] * d[2]):
        accessed = 2 * math.sqrt(d[0] * d[1] * d[2] * d[2] / p) + d[0] * d[1] / p
    else:
        accessed = 3 * (d[0] * d[1] * d[2] / p) ** (2 / 3)
    return max(0.0, accessed - (m * n + m * k + n * k) / p)


def squarest_2d(p):
    pm = int(math.isqrt(p))
    while p % pm:
        pm -= 1
    return f"{pm}x{p // pm}x1"


def two_and_a_half_d(p):
    c = 4 if p == 4096 else 2
    two = squarest_2d(p // c)
    return two[:-1] + str(c)


def cube(p):
    c = round(p ** (1 / 3))
    return f"{c}x{c}x{c}" if c ** 3 == p else None


def dry(m, k, n, p, strategy, extra, layout, tmp):
    report = os.path.join(tmp, "r.json")
    subprocess.run([args.distmm, "--dry-run", "--ranks", str(p), "--m", str(m), "--k", str(k),
                    "--n", str(n), "--strategy", strategy, "--layout", layout, "--report",
                    report] + extra, check=True, capture_output=True, text=True)
    run = json.load(open(report))["runs"][0]
    words = max(r["bytes_received"] for r in run["per_rank"]
                if layout == "distributed" or r["rank"] != 0) / 8
    held = max(r["peak_param_bytes"] for r in run["per_rank"]) / 8
    return words, held, run.get("grid", "")


def main():
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (m, k, n) in SHAPES.items():
            for p in RANKS:
                b = bound(m, k, n, p)
                two_d = squarest_2d(p)
                # The memory the squarest 2-D grid holds: its parts of A and B, its C block and
                # two panels of each (256 wide).
                pm, pn = map(int, two_d.split("x")[:2])
                mi, nj = math.ceil(m / pm), math.ceil(n / pn)
                held = 8 * (mi * math.ceil(k / pn) + nj * math.ceil(k / pm) + mi * nj +
                            2 * 256 * ((mi if pn > 1 else 0) + (nj if pm > 1 else 0)))
                half = two_and_a_half_d(p)
                cases = [("fsdp (1-D)", "fsdp", []), (f"grid {two_d} (2-D)", "grid", ["--grid", two_d]),
                         (f"grid {half} (2.5-D)", "grid", ["--grid", half])]
                if cube(p):
                    cases.append((f"grid {cube(p)} (3-D)", "grid", ["--grid", cube(p)]))
                cases += [("grid auto", "grid", []),
                          ("grid auto, memory of the 2-D grid", "grid",
                           ["--memory-per-rank", str(held)])]
                for layout in ("root", "distributed"):
                    for label, strategy, extra in cases:
                        words, most, grid = dry(m, k, n, p, strategy, extra, layout, tmp)
                        rows.append([name, m, k, n, p, layout, label, grid, int(words), int(b),
                                     words / b if b else float("nan"), int(most)])
                        print(f"{name:8} P={p:5} {layout:11} {label:38} {grid:10} "
                              f"{words:14.4g} words, bound {b:12.4g}, x{words / b:6.2f}",
                              flush=True)
    out = os.path.join(ROOT, "bench", "results", "grid_words.csv")
    with open(out, "w", newline="") as f:
        csv.writer(f).writerows([["shape", "m", "k", "n", "ranks", "layout", "case", "grid",
                                  "words_received", "lower_bound", "ratio", "b_words_held_peak"]] + rows)
    print("\n| shape | P | layout | case | grid | words received (largest rank) | lower bound "
          "| ratio | B words held (peak, largest rank) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[4]} | {r[5]} | {r[6]} | {r[7]} | {r[8]:.3g} | {r[9]:.3g} | "
              f"{r[10]:.2f} | {r[11]:.3g} |")


if __name__ == "__main__":
    main()
