"""Trains a linear layer on a 2 x 2 grid with Adam, saves a checkpoint, and resumes it with
FSDP on another rank count.

    python3 examples/python/train_checkpoint.py     (PYTHONPATH=build/python)
"""
import tempfile

import numpy as np

import distmm

rng = np.random.default_rng(1)
X = rng.standard_normal((256, 32))
T = X @ rng.standard_normal((32, 16)) + 0.01 * rng.standard_normal((256, 16))
with tempfile.TemporaryDirectory() as ck:
    first = distmm.train(X, T, strategy="grid", grid="2x2", ranks=4, steps=10,
                         optimizer="adam", lr=0.05, checkpoint_dir=ck)
    print("saved", first["saved"], "loss", first["losses"][0], "->", first["losses"][-1])
    then = distmm.train(X, T, strategy="fsdp", ranks=3, steps=20, optimizer="adam", lr=0.05,
                        resume=ck)
    print("resumed at step", then["first_step"], "loss now", then["losses"][-1])
    print("W is", then["W"].shape)
