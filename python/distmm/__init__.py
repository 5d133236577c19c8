"""distmm from Python: the sharding strategies of distributed training on C = A @ B and on
a linear layer, run on an mpi4py communicator (under mpirun) or on the in-process simulator.

    import numpy as np, distmm
    C = distmm.matmul(A, B, strategy="fsdp", ranks=4)            # four simulated ranks
    from mpi4py import MPI                                        # mpirun -np 4 python3 prog.py
    C = distmm.matmul(A, B, strategy="grid", comm=MPI.COMM_WORLD)  # C on rank 0, None elsewhere
    p = distmm.plan("fsdp", B, m=A.shape[0], comm=MPI.COMM_WORLD)  # set up once
    C = p(A); p.report()                                          # called many times

Arrays are float64 or float32 (the plan's dtype is B's). A C-contiguous A of the plan's dtype
is read in place and C is written straight into the array returned; B is read in place when
Fortran-ordered, else copied once at setup (`plan.python_copies` counts the copies). Under a
communicator every rank calls every function; A, B, X and T are read on rank 0 only.

Errors: bad input raises distmm.InputError, which is a ValueError, on every rank (rank 0 checks
its arrays and tells the others); failures during a run raise a distmm.Error subclass
(CommError, PeerFailure, TimeoutError, ...) whose message names the rank and the operation,
on every rank. `fault="crash:1"` (the program's --fault: crash:R[:N], skip:R, delay:MS[:SEED])
provokes one, for tests and teaching.
"""
from . import _distmm
from ._distmm import (CommError, DeadlockError, Error, InputError, MismatchError,  # noqa: F401
                      PeerFailure, TimeoutError, VerificationError)
from .draw import draw  # noqa: F401

__all__ = ["strategies", "matmul", "plan", "Plan", "dry_run", "predict", "train", "draw",
           "Error", "InputError", "CommError", "PeerFailure", "DeadlockError", "MismatchError",
           "TimeoutError", "VerificationError"]


def strategies(training=False):
    """The registry's strategies: name, description, whether it trains, its options."""
    return _distmm.strategies(training)


def _dtype_name(dtype):
    """None (rank 0's array decides), or float64/float32 by any name numpy knows."""
    if dtype is None:
        return ""
    import numpy
    name = numpy.dtype(dtype).name
    if name not in ("float64", "float32"):
        raise InputError(f"dtype {name}: expected float64 or float32")
    return name


def choose(m, k, n, ranks, model, ranks_per_host=None, blas_threads=1, dtype="float64",
           train=False, memory_per_rank=None, layout="root", warmup=0, repeat=1, steps=20,
           **options):
    """`--strategy auto`: every strategy predicted on the time model (a file `distmm
    calibrate` wrote) for this run, each as its only strategy and timed as the program times
    it (the median of `repeat` calls after `warmup`; train: `steps` steps), fastest first among
    those whose plan fits in `memory_per_rank` (bytes, or text as "2GiB"; None: no limit).
    Returns a dict: the picked `strategy`, its `label` and the `options` that make it again,
    and `candidates` (strategy, label, options, predicted_time_s and its nominal 80 %
    interval_s as (low, high), cold_s, warm_s, bytes_per_rank, fits)."""
    if layout not in ("root", "distributed"):
        raise InputError(f"layout {layout}: expected root or distributed")
    return _distmm.choose(int(m), int(k), int(n), int(ranks), str(model),
                          int(ranks_per_host or 0), int(blas_threads), _dtype_name(dtype) or
                          "float64", bool(train), memory_per_rank or 0,
                          layout == "distributed", int(warmup), int(repeat), int(steps), options)


def _ranks_per_host(comm):
    """The most ranks of `comm` on one host (collective)."""
    from mpi4py import MPI
    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        return comm.allreduce(local.Get_size(), op=MPI.MAX)
    finally:
        local.Free()


def _auto(comm, ranks, model, shape_of, train=False, memory_per_rank=None, dtype=None,
          steps=20, options=None):
    """strategy="auto": the model's pick as (strategy, options, choose()'s dict: rank 0's,
    None on the others); under a communicator rank 0 chooses and tells the others, who raise
    what it raised."""
    if model is None:
        raise InputError("strategy auto: needs model=FILE, the machine model that predicts each "
                         "strategy's time (distmm calibrate writes one)")
    if comm is None:
        m, k, n = shape_of()
        picked = choose(m, k, n, ranks, model, dtype=dtype or "float64", train=train,
                        memory_per_rank=memory_per_rank, steps=steps, **(options or {}))
        return picked["strategy"], picked["options"], picked
    per_host = _ranks_per_host(comm)
    answer, picked = None, None
    if comm.rank == 0:
        try:
            m, k, n = shape_of()
            picked = choose(m, k, n, comm.size, model, ranks_per_host=per_host,
                            dtype=dtype or "float64", train=train,
                            memory_per_rank=memory_per_rank, steps=steps, **(options or {}))
            answer = ("ok", picked["strategy"], picked["options"])
        except Exception as e:  # any: the other ranks wait for rank 0's word
            answer = ("error", str(e), None)
    answer = comm.bcast(answer, root=0)
    if answer[0] == "error":
        raise InputError(answer[1])
    return answer[1], answer[2], picked


class Plan:
    """A strategy's plan for C = A @ B with B fixed: set up once, called with each A.

    Under a communicator every rank makes it and calls it (A on rank 0; C returned there,
    None elsewhere); on the simulator (`ranks`) its ranks are threads kept between calls."""

    def __init__(self, strategy, B, m=None, comm=None, ranks=None, timeout=0.0, dtype=None,
                 fault=None, model=None, memory_per_rank=None, **options):
        if comm is None and ranks is None:
            ranks = 1
        m = 0 if m is None else int(m)
        if m < 0:
            raise InputError(f"m: {m} is not a row count")
        if strategy == "auto":
            def shape_of():
                if B is None:
                    raise InputError("B: needed on rank 0")
                rows, cols = B.shape
                return m, rows, cols
            strategy, options, self.choice = _auto(
                comm, ranks, model, shape_of, memory_per_rank=memory_per_rank,
                dtype=dtype or _dtype_name(getattr(B, "dtype", None)), options=options)
        else:
            if model is not None:
                raise InputError("model: only with strategy=\"auto\"")
            if memory_per_rank is not None:  # grid's own option (--grid auto's limit)
                options["memory_per_rank"] = memory_per_rank
            self.choice = None
        self._plan = _distmm.Plan(strategy, B, m, comm, int(ranks or 0), _dtype_name(dtype),
                                  float(timeout), options, str(fault or ""))

    # strategy="auto": what choose() said (on rank 0; None elsewhere and without auto).
    choice = None

    def __call__(self, A, out=None):
        """C = A @ B (rank 0; None elsewhere). With out= (rank 0), a C-contiguous m x n array
        of the plan's dtype, C is written into it and it is returned: a call then allocates
        nothing, as the C++ plan's execute() does."""
        return self._plan(A, out)

    def report(self):
        """The last call's figures per rank (bytes and messages sent and received, parameter
        memory, seconds): a dict. Under a communicator collective: rank 0 gets every rank's."""
        return self._plan.report()

    @property
    def allocated_bytes(self):
        """What the plan allocated at setup on this process's rank (on the simulator, rank
        0's): the C++ plan's allocated_bytes()."""
        return self._plan.allocated_bytes

    @property
    def python_copies(self):
        """Arrays copied on their way in (a B not Fortran-ordered; an A of another dtype or
        layout)."""
        return self._plan.python_copies

    @property
    def label(self):
        return self._plan.label


def plan(strategy, B, m=None, comm=None, ranks=None, timeout=0.0, dtype=None, fault=None,
         **options):
    """`Plan(strategy, B, m=A's rows, comm=... or ranks=N, **strategy options)`; the options
    are the program's (replicas=2, grid="2x2", panel=128). The dtype is rank 0's B's (float32,
    else float64) unless given. `timeout` (seconds, under a communicator) bounds each wait in
    a communication call; `fault` injects one (the program's --fault), armed before set-up."""
    return Plan(strategy, B, m=m, comm=comm, ranks=ranks, timeout=timeout, dtype=dtype,
                fault=fault, **options)


def matmul(A, B, strategy="fsdp", comm=None, ranks=None, timeout=0.0, dtype=None, fault=None,
           **options):
    """C = A @ B by `strategy`, once: on `comm` (C on rank 0, None elsewhere) or on `ranks`
    simulated ranks (default 1)."""
    m = None if A is None else A.shape[0]
    return Plan(strategy, B, m=m, comm=comm, ranks=ranks, timeout=timeout, dtype=dtype,
                fault=fault, **options)(A)


def dry_run(strategy, m, k, n, ranks, dtype="float64", train=False, **options):
    """What each rank would send, receive, hold and allocate, moving no data: any shape and
    rank count. `train`: one training step of X (m x k) W (k x n) instead of a multiply."""
    return _distmm.dry_run(strategy, m, k, n, ranks, dtype, train, options)


def predict(strategy, m, k, n, ranks, model, ranks_per_host=None, blas_threads=1,
            dtype="float64", train=False, **options):
    """The time model's prediction (a file `distmm calibrate` wrote): seconds of setup, of a
    cold and of a warm execution (or training step), and per rank its comm and compute."""
    return _distmm.predict(strategy, m, k, n, ranks, str(model), int(ranks_per_host or 0),
                           blas_threads, dtype, train, options)


def train(X, T, W0=None, strategy="fsdp", comm=None, ranks=None, steps=20, lr=0.1,
          optimizer="sgd", checkpoint_dir=None, checkpoint_every=0, keep=2, resume=None,
          timeout=0.0, dtype=None, fault=None, model=None, memory_per_rank=None, **options):
    """Trains Y = X W by full-batch SGD or Adam on 1/(2m) ||X W - T||^2, as `distmm train`:
    returns a dict with the losses and W (on rank 0), the checkpoints saved or resumed, and the
    strategy that trained.
    strategy="auto" with model=FILE: the training strategy the model predicts fastest for
    `steps` steps (choose())."""
    if comm is None and ranks is None:
        ranks = 1
    if strategy == "auto":
        def shape_of():
            if X is None or T is None:
                raise InputError("X and T: needed on rank 0")
            m, k = X.shape
            return m, k, T.shape[1]
        strategy, options, _ = _auto(comm, ranks, model, shape_of, train=True,
                                     memory_per_rank=memory_per_rank,
                                     dtype=dtype or _dtype_name(getattr(X, "dtype", None)),
                                     steps=steps, options=options)
    else:
        if model is not None:
            raise InputError("model: only with strategy=\"auto\"")
        if memory_per_rank is not None:  # grid's own option
            options["memory_per_rank"] = memory_per_rank
    result = _distmm.train(strategy, X, T, W0, comm, int(ranks or 0), int(steps), float(lr),
                           optimizer, str(checkpoint_dir or ""), int(checkpoint_every), int(keep),
                           str(resume or ""), _dtype_name(dtype), float(timeout),
                           str(fault or ""), options)
    result["strategy"] = strategy
    return result
