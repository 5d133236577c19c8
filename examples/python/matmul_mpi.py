"""C = A @ B by every strategy on mpi4py's world, then a plan called again and again.

    mpirun -np 4 --oversubscribe python3 examples/python/matmul_mpi.py   (PYTHONPATH=build/python)
"""
import numpy as np
from mpi4py import MPI

import distmm

comm = MPI.COMM_WORLD
root = comm.rank == 0
rng = np.random.default_rng(0)
A = rng.standard_normal((512, 256)) if root else None  # rank 0's data; the others pass None
B = rng.standard_normal((256, 128)) if root else None
for s in distmm.strategies():
    C = distmm.matmul(A, B, strategy=s["name"], comm=comm)
    if root:
        print(f"{s['name']:13} max |C - A @ B| = {np.abs(C - A @ B).max():.2e}")

p = distmm.plan("fsdp", np.asfortranarray(B) if root else None, m=512, comm=comm)
for _ in range(3):
    C = p(A)
report = p.report()  # collective: rank 0 gets every rank's figures
if root:
    for r in report["per_rank"]:
        print(f"rank {r['rank']}: received {r['bytes_received']} bytes in the last call")
    print("copies made on the way in:", p.python_copies)
