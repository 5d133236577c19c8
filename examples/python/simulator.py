"""The simulator from one Python process: the strategies side by side, a dry run of a cluster
you do not have, and a picture of the grid's sharding.

    python3 examples/python/simulator.py            (PYTHONPATH=build/python)
"""
import numpy as np

import distmm

A = np.arange(12.0).reshape(4, 3)
B = np.ones((3, 5))
print(distmm.matmul(A, B, strategy="grid", ranks=4))

for s in ("dp", "fsdp", "grid"):
    d = distmm.dry_run(s, 100_000, 100_000, 100_000, ranks=4096)
    print(f"{d['label']:16} rank 1 receives {d['per_rank'][1]['bytes_received'] / 1e9:8.2f} GB "
          f"per multiply at 1e5^3 on 4096 ranks")

print("wrote", distmm.draw("grid", (64, 48, 32), 4, out="sharding.svg"))
