#!/usr/bin/env python3
"""One side of bench/python_race.py: under `mpirun -np P`, a distmm plan called from Python
with --warmup/--repeat as the program runs it (a barrier, then rank 0's clock around the call),
with out= (the C++ plan's own C, written in place) and with a fresh C each call.
Prints one JSON line on rank 0: the plan's label, the median seconds of each, the fastest
call with out=.
Usage: mpirun -np P python3 bench/python_plan_call.py STRATEGY M K N WARMUP REPEAT"""
import json
import statistics
import sys
import time

import numpy as np
from mpi4py import MPI

import distmm


def timed(comm, call, warmup, repeat):
    times = []
    for i in range(warmup + repeat):
        comm.Barrier()
        start = time.perf_counter()
        call()
        seconds = time.perf_counter() - start
        if i >= warmup:
            times.append(seconds)
    return statistics.median(times), min(times)


def main():
    strategy, m, k, n, warmup, repeat = sys.argv[1], *map(int, sys.argv[2:7])
    comm = MPI.COMM_WORLD
    root = comm.rank == 0
    rng = np.random.default_rng(42)
    # The program's operands: A row-major (C-contiguous), B column-major (Fortran-ordered).
    A = rng.uniform(-1, 1, (m, k)) if root else None
    B = np.asfortranarray(rng.uniform(-1, 1, (k, n))) if root else None
    C = np.empty((m, n)) if root else None
    p = distmm.plan(strategy, B, m=m, comm=comm)
    out_s, out_best_s = timed(comm, lambda: p(A, out=C), warmup, repeat)
    fresh_s, _ = timed(comm, lambda: p(A), warmup, repeat)
    if root:
        print(json.dumps({"label": p.label, "out_s": out_s, "out_best_s": out_best_s,
                          "fresh_s": fresh_s,
                          "python_copies": p.python_copies}))


if __name__ == "__main__":
    main()
