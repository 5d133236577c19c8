#!/usr/bin/env python3
"""The grid strategy raced against ScaLAPACK PDGEMM and distmm's fsdp, in one run.

For each n and rank count: `mpirun -np P build/distmm --layout distributed` (each rank starts
with its blocks of A and B and ends with its block of C, as PDGEMM's operands do) with
--strategy grid on every 2-D grid of P ranks and auto, and fsdp; warm (median of --repeat 5
after 1 warm-up); and build/bench/pdgemm_bench on every P1 x P2 grid with blocks 64/128/256
(median of 5 after a cold call). The best of each is kept, and the whole race runs --rounds
times (default 3), interleaved, so that each ratio is of figures taken close in time.
Writes bench/results/grid_race.csv (every round) and prints the median ratio per case.
Usage: bench/grid_race.py [--rounds R] [N ...]   (default 2048 4096; needs build/ with the
benchmarks)"""
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
        sh(MPIRUN + ["-np", str(ranks), DISTMM, "--no-verify", "--layout", "distributed",
                     "--strategy", strategy, "--m", str(n), "--k", str(n), "--n", str(n),
                     "--warmup", "1", "--repeat", "5", "--report", report, *extra])
        run = json.load(open(report))["runs"][0]
        return run["time_s"], run.get("grid", "")


def grids(ranks):
    return [(p, ranks // p) for p in range(1, ranks + 1) if ranks % p == 0]


def pdgemm_best(n, ranks):
    best = None
    for pr, pc in grids(ranks):
        for nb in (64, 128, 256):
            row = sh(MPIRUN + ["-np", str(ranks), PDGEMM, str(n), str(nb), str(pr), str(pc), "5"])
            median = float(row.strip().split(",")[5])
            if best is None or median < best[0]:
                best = (median, f"{pr}x{pc} nb{nb}")
    return best


def grid_best(n, ranks):
    best = None
    for pm, pn in grids(ranks):
        seconds, _ = distmm(n, ranks, "grid", ["--grid", f"{pm}x{pn}x1"])
        if best is None or seconds < best[0]:
            best = (seconds, f"{pm}x{pn}x1")
    return best


def main():
    args = sys.argv[1:]
    rounds = 3
    if args[:1] == ["--rounds"]:
        rounds, args = int(args[1]), args[2:]
    sizes = list(map(int, args or ["2048", "4096"]))
    rows = []
    for rnd in range(rounds):
        for n in sizes:
            for ranks in (2, 4):
                flops = 2.0 * n ** 3
                pd_s, pd_how = pdgemm_best(n, ranks)
                best_s, best_how = grid_best(n, ranks)
                auto_s, auto_grid = distmm(n, ranks, "grid")
                fsdp_s, _ = distmm(n, ranks, "fsdp")
                for method, seconds in ((f"pdgemm best ({pd_how})", pd_s),
                                        (f"distmm grid best ({best_how})", best_s),
                                        (f"distmm grid auto ({auto_grid})", auto_s),
                                        ("distmm fsdp", fsdp_s)):
                    rows.append({"round": rnd, "n": n, "ranks": ranks, "method": method,
                                 "seconds": f"{seconds:.6f}",
                                 "gflops": f"{flops / seconds / 1e9:.2f}",
                                 "speed_vs_pdgemm": f"{pd_s / seconds:.3f}"})
                    print(f"round {rnd} n={n:5d} P={ranks} {method:34s} {seconds:10.6f} s "
                          f"{flops / seconds / 1e9:7.2f} GFLOP/s  speed vs PDGEMM "
                          f"{pd_s / seconds:.3f}", flush=True)
    out = os.path.join(ROOT, "bench", "results", "grid_race.csv")
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    print("\nmedian over the rounds of each round's speed against that round's best PDGEMM:")
    for n in sizes:
        for ranks in (2, 4):
            for kind in ("distmm grid best", "distmm grid auto", "distmm fsdp"):
                ratios = sorted(float(r["speed_vs_pdgemm"]) for r in rows
                                if r["n"] == n and r["ranks"] == ranks
                                and r["method"].startswith(kind))
                print(f"  n={n:5d} P={ranks} {kind:18s} {ratios[len(ratios) // 2]:.3f} "
                      f"(rounds: {', '.join(f'{x:.3f}' for x in ratios)})")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
