"""The Python module against numpy's @: every strategy on the simulator and, under
`mpirun -np N python3 -m pytest`, on mpi4py's world and a communicator Python split; plans,
copies, the report, the dry run, the prediction, training with a checkpoint, errors, draw().
Every rank runs every test in the same order (the collectives match)."""
import os
import tracemalloc
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from mpi4py import MPI

import distmm

WORLD = MPI.COMM_WORLD
ROOT = WORLD.rank == 0
HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = os.path.join(HERE, "..", "..", "docs", "models", "example-cluster.json")
NAMES = [s["name"] for s in distmm.strategies()]


def problem(m, k, n, dtype=np.float64, seed=7):
    """Small integers: every strategy's sums are exact in either type."""
    rng = np.random.default_rng(seed)
    return (rng.integers(-4, 5, (m, k)).astype(dtype), rng.integers(-4, 5, (k, n)).astype(dtype))


def on_root(x):
    return x if ROOT else None


def given(backend, x):
    """What a rank passes: under a communicator rank 0's data only; on the simulator (a world
    of this process's own) all of it."""
    return x if backend == "simulator" else on_root(x)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", NAMES)
def test_simulator_matches_numpy(name, dtype):
    for ranks in (1, 2, 3, 5):
        for m, k, n in ((37, 11, 7), (3, 5, 2), (64, 16, 1)):
            A, B = problem(m, k, n, dtype)
            C = distmm.matmul(A, B, strategy=name, ranks=ranks)
            assert C.dtype == dtype and C.flags.c_contiguous
            np.testing.assert_array_equal(C, A @ B, err_msg=f"{name} on {ranks} ranks")


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", NAMES)
def test_communicator_matches_numpy(name, dtype):
    A, B = problem(29, 13, 6, dtype)
    C = distmm.matmul(on_root(A), on_root(B), strategy=name, comm=WORLD)
    if ROOT:
        np.testing.assert_array_equal(C, A @ B)
    else:
        assert C is None


def test_a_communicator_python_split():
    # Even and odd ranks at once, each group its own multiply.
    sub = WORLD.Split(WORLD.rank % 2, WORLD.rank)
    A, B = problem(17, 9, 5, seed=WORLD.rank % 2)
    first = sub.rank == 0
    C = distmm.matmul(A if first else None, B if first else None, strategy="grid", comm=sub)
    if first:
        np.testing.assert_array_equal(C, A @ B)
    sub.Free()


@pytest.mark.parametrize("backend", ["simulator", "mpi"])
def test_plan_reads_a_and_writes_c_in_place(backend):
    A, B = problem(40, 24, 12)
    where = {"ranks": 3} if backend == "simulator" else {"comm": WORLD}
    p = distmm.plan("fsdp", given(backend, np.asfortranarray(B)), m=40, **where)
    for _ in range(3):
        C = p(given(backend, A))
        if C is not None:
            np.testing.assert_array_equal(C, A @ B)
    assert (C is None) == (backend == "mpi" and not ROOT)
    assert p.python_copies == 0  # C-contiguous A, Fortran-ordered B, both float64
    ranks = 3 if backend == "simulator" else WORLD.size
    dry = distmm.dry_run("fsdp", 40, 24, 12, ranks)
    # What this process's rank allocated (on the simulator, rank 0's): the C++ plan's.
    me = 0 if backend == "simulator" else WORLD.rank
    assert p.allocated_bytes == dry["per_rank"][me]["allocated_bytes"]
    report = p.report()
    if ROOT or backend == "simulator":
        assert report["ranks"] == ranks and len(report["per_rank"]) == ranks
        for got, want in zip(report["per_rank"], dry["per_rank"]):
            # One execution's counters; the dry run's are setup and one execution.
            assert got["bytes_received"] <= want["bytes_received"]
    # A C-ordered B is copied once at setup; an A of another type on each call.
    q = distmm.plan("dp", B, m=40, ranks=2)
    q(A.astype(np.float32))
    assert q.python_copies == 2


@pytest.mark.parametrize("backend", ["simulator", "mpi"])
def test_plan_writes_c_into_out_and_allocates_nothing_for_it(backend):
    A, B = problem(300, 24, 50)
    where = {"ranks": 3} if backend == "simulator" else {"comm": WORLD}
    for name in ("fsdp", "grid"):
        p = distmm.plan(name, given(backend, np.asfortranarray(B)), m=300, **where)
        out = given(backend, np.full((300, 50), np.nan))
        p(given(backend, A), out=out)  # first call: the plan's own first touches
        tracemalloc.start()
        got = p(given(backend, A), out=out)
        _, with_out = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        fresh = p(given(backend, A))
        _, without = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        if ROOT or backend == "simulator":
            assert got is out
            np.testing.assert_array_equal(out, A @ B, err_msg=name)
            np.testing.assert_array_equal(fresh, A @ B, err_msg=name)
            # numpy reports its arrays to tracemalloc: a fresh C is 120,000 bytes.
            assert without >= 300 * 50 * 8 > 10 * with_out, (name, with_out, without)
        assert p.python_copies == 0
    # A wrong out on rank 0: every rank raises its message, none waits; an out that is A is
    # refused (the plans read A while they write C).
    p = distmm.plan("dp", given(backend, B), m=300, **where)
    for bad, message in ((np.empty((300, 50), np.float32), "is 300x50 float32"),
                         (np.empty((50, 300)).T, "is 300x50 float64, not C-contiguous"),
                         ([1.0], "not a numpy array")):
        with pytest.raises(distmm.InputError, match="out: " + message):
            p(given(backend, A), out=given(backend, bad))
    square = distmm.plan("fsdp", given(backend, B[:, :24].copy()), m=300, **where)
    A2 = A.copy()
    with pytest.raises(ValueError, match="out: shares memory with A"):
        square(given(backend, A2), out=given(backend, A2))
    np.testing.assert_array_equal(A2, A)


def test_options_and_bad_input_raise_valueerror_on_every_rank():
    A, B = problem(8, 4, 3)
    with pytest.raises(ValueError, match="no such strategy"):
        distmm.matmul(A, B, strategy="nope", ranks=2)
    with pytest.raises(ValueError, match="no option 'replicas'"):
        distmm.matmul(A, B, strategy="dp", ranks=2, replicas=2)
    with pytest.raises(ValueError, match="--grid 3x3x1: needs 9 ranks"):
        distmm.matmul(A, B, strategy="grid", ranks=4, grid="3x3x1")
    with pytest.raises(distmm.InputError, match="expected a 2-D array"):
        distmm.matmul(A, B.ravel(), strategy="dp", ranks=2)
    # Rank 0's bad A: every rank raises its message, no rank waits.
    with pytest.raises(ValueError, match="A is 8x3; the plan multiplies an 8x4 A"):
        distmm.matmul(on_root(A[:, :3]), on_root(B), strategy="fsdp", comm=WORLD)
    assert issubclass(distmm.InputError, distmm.Error)


def test_hsdp_and_grid_options():
    A, B = problem(21, 10, 9)
    np.testing.assert_array_equal(distmm.matmul(A, B, strategy="hsdp", ranks=4, replicas=2),
                                  A @ B)
    p = distmm.plan("grid", B, m=21, ranks=6, grid="2x3", panel=3)
    assert p.label.startswith("grid 2x3x1")
    np.testing.assert_array_equal(p(A), A @ B)


def test_dry_run_of_a_cluster():
    d = distmm.dry_run("grid", 100000, 100000, 100000, 4096)
    assert len(d["per_rank"]) == 4096 and d["label"].startswith("grid ")
    fsdp = distmm.dry_run("fsdp", 100000, 100000, 100000, 4096)
    assert 10 * d["per_rank"][1]["bytes_received"] < fsdp["per_rank"][1]["bytes_received"]
    step = distmm.dry_run("tp-col", 64, 8, 4, 2, train=True)
    assert step["per_rank"][1]["bytes_received"] == 64 * 8 * 8 + 8  # dX's all-reduce, the loss


def test_predict_on_a_model():
    p = distmm.predict("fsdp", 4096, 4096, 4096, 8, MODEL, ranks_per_host=4)
    assert 0 < p["warm_s"] <= p["cold_s"] and len(p["comm_s"]) == 8
    with pytest.raises(ValueError):
        distmm.predict("fsdp", 64, 64, 64, 2, os.path.join(HERE, "no-such-model.json"))


@pytest.mark.parametrize("backend", ["simulator", "mpi"])
def test_train_with_a_checkpoint_resumed_by_another_strategy(backend, tmp_path_factory):
    rng = np.random.default_rng(3)
    X, T = rng.standard_normal((48, 6)), rng.standard_normal((48, 4))
    where = {"ranks": 4} if backend == "simulator" else {"comm": WORLD}
    folder = WORLD.bcast(str(tmp_path_factory.mktemp("ck")) if ROOT else None)
    ck = os.path.join(folder, f"{backend}-{WORLD.rank if backend == 'simulator' else 0}")
    x, t = given(backend, X), given(backend, T)
    full = distmm.train(x, t, strategy="grid", steps=6, optimizer="adam", lr=0.05, **where)
    saved = distmm.train(x, t, strategy="grid", steps=3, optimizer="adam", lr=0.05,
                         checkpoint_dir=ck, **where)
    resumed = distmm.train(x, t, strategy="fsdp", steps=6, optimizer="adam", lr=0.05,
                           resume=ck, **where)
    assert saved["saved"] and resumed["first_step"] == 3
    assert resumed["losses"][0] < saved["losses"][0]
    if full["W"] is not None:
        np.testing.assert_allclose(resumed["W"], full["W"], rtol=1e-12, atol=1e-14)
        # Single-process Adam, written out here.
        W, M, V = np.zeros((6, 4)), np.zeros((6, 4)), np.zeros((6, 4))
        for t in range(1, 7):
            G = X.T @ (X @ W - T) / 48
            M, V = 0.9 * M + 0.1 * G, 0.999 * V + 0.001 * G * G
            W = W - 0.05 * (M / (1 - 0.9 ** t)) / (np.sqrt(V / (1 - 0.999 ** t)) + 1e-8)
        np.testing.assert_allclose(full["W"], W, rtol=1e-10, atol=1e-12)


def test_draw_colours_each_block_by_its_rank(tmp_path):
    out = distmm.draw("grid", (64, 48, 32), 4, out=str(tmp_path / "g.svg"), grid="2x2")
    svg = ET.parse(out).getroot()
    titles = [t.text for t in svg.iter("{http://www.w3.org/2000/svg}title")]
    # A, B and C in 4 blocks each, every block saying whose it is.
    assert len(titles) == 12 and all(t.startswith("rank ") for t in titles)
    assert sum("broadcast" in (t.text or "") for t in svg.iter("{http://www.w3.org/2000/svg}text"))
    with pytest.raises(ValueError):
        distmm.draw("grid", (64, 48, 32), 4, out=str(tmp_path / "bad.svg"), grid="3x3")
    assert not os.path.exists(tmp_path / "bad.svg")


@pytest.mark.parametrize("backend", ["simulator", "mpi"])
@pytest.mark.parametrize("name", ["dp", "fsdp", "grid"])
def test_a_failure_mid_run_raises_on_every_rank_and_the_next_call_works(backend, name):
    """A rank failing mid-run (an injected crash at its third communication call) raises a
    CommError naming it and the call; under mpirun every other rank raises PeerFailure naming
    the failed rank instead of waiting for it (no timeout set). Nothing is kept broken: the
    next call on the same world gives numpy's product."""
    A, B = problem(30, 20, 10)
    where = {"ranks": 3} if backend == "simulator" else {"comm": WORLD}
    failing = 2 if backend == "simulator" else WORLD.size - 1
    # A world of one rank makes one call (the plan's own check of A): its first.
    call = 1 if backend == "mpi" and WORLD.size == 1 else 3
    with pytest.raises(distmm.CommError) as raised:
        distmm.matmul(given(backend, A), given(backend, B), strategy=name,
                      fault=f"crash:{failing}:{call}", **where)
    text = str(raised.value)
    if backend == "simulator" or WORLD.rank == failing:
        assert f"rank {failing}: injected fault crash:{failing}:{call}: crashed at " in text
    else:
        assert isinstance(raised.value, distmm.PeerFailure)
        assert f"rank {WORLD.rank}: " in text and " abandoned: rank " in text
        assert f"rank {failing} failed: rank {failing}: injected fault" in text
    C = distmm.matmul(given(backend, A), given(backend, B), strategy=name, **where)
    if backend == "simulator" or ROOT:
        np.testing.assert_array_equal(C, A @ B)


@pytest.mark.parametrize("backend", ["simulator", "mpi"])
def test_a_failure_in_training_writes_no_checkpoint(backend, tmp_path_factory):
    if backend == "mpi" and WORLD.size == 1:
        pytest.skip("one rank's training step communicates nothing: no call to fail")
    rng = np.random.default_rng(5)
    X, T = rng.standard_normal((24, 6)), rng.standard_normal((24, 4))
    where = {"ranks": 2} if backend == "simulator" else {"comm": WORLD}
    failing = 1 if backend == "simulator" else WORLD.size - 1
    folder = WORLD.bcast(str(tmp_path_factory.mktemp("failed")) if ROOT else None)
    ck = os.path.join(folder, f"{backend}-{WORLD.rank if backend == 'simulator' else 0}")
    with pytest.raises(distmm.CommError, match=f"rank {failing}"):
        distmm.train(given(backend, X), given(backend, T), strategy="fsdp", steps=4,
                     checkpoint_dir=ck, fault=f"crash:{failing}:6", **where)
    WORLD.barrier()
    assert not os.path.exists(ck) or os.listdir(ck) == []
    with pytest.raises(ValueError, match="fault crash:9: rank 9 does not run this call"):
        distmm.matmul(*problem(4, 4, 4), strategy="dp", ranks=2, fault="crash:9")
    with pytest.raises(ValueError, match="fault boom: unknown fault"):
        distmm.matmul(*problem(4, 4, 4), strategy="dp", ranks=2, fault="boom")


@pytest.mark.parametrize("backend", ["simulator", "mpi"])
def test_auto_runs_the_models_pick(backend):
    A, B = problem(40, 24, 12)
    where = {"ranks": 3} if backend == "simulator" else {"comm": WORLD}
    ranks = 3 if backend == "simulator" else WORLD.size
    p = distmm.plan("auto", given(backend, B), m=40, model=MODEL, **where)
    C = p(given(backend, A))
    if backend == "simulator" or ROOT:
        np.testing.assert_array_equal(C, A @ B)
        picked = distmm.choose(40, 24, 12, ranks, MODEL,
                               ranks_per_host=None if backend == "simulator" else ranks)
        assert p.choice["picked"] == picked["picked"] == p.label
        times = [c["predicted_time_s"] for c in picked["candidates"]]
        assert times == sorted(times) and len(times) == len(NAMES)
    if backend == "mpi":  # rank 0's bad input reaches every rank: none waits
        with pytest.raises(ValueError, match="B: needed on rank 0"):
            distmm.plan("auto", None, m=40, model=MODEL, comm=WORLD)
    trained = distmm.train(given(backend, A), given(backend, A[:, :5]), strategy="auto",
                           model=MODEL, steps=2, **where)
    assert trained["strategy"] in [s["name"] for s in distmm.strategies(training=True)]


def test_choose_within_memory_and_its_refusals():
    every = distmm.choose(8192, 8192, 4096, 64, MODEL, ranks_per_host=8)
    sizes = sorted(c["bytes_per_rank"] for c in every["candidates"])
    limit = (sizes[0] + sizes[-1]) // 2
    within = distmm.choose(8192, 8192, 4096, 64, MODEL, ranks_per_host=8, memory_per_rank=limit)
    assert within["candidates"][0]["fits"]
    assert all(c["fits"] == (c["bytes_per_rank"] <= limit) for c in within["candidates"])
    # A candidate's options make it again: the same prediction as that strategy alone.
    for c in every["candidates"]:
        alone = distmm.predict(c["strategy"], 8192, 8192, 4096, 64, MODEL, ranks_per_host=8,
                               **c["options"])
        assert alone["label"] == c["label"] and alone["cold_s"] == pytest.approx(c["cold_s"])
        # Each prediction with its nominal 80 % interval around it.
        low, high = alone["cold_interval_s"]
        assert low < alone["cold_s"] < high
        assert c["interval_s"][0] < c["predicted_time_s"] < c["interval_s"][1]
    with pytest.raises(ValueError, match="no strategy's plan fits"):
        distmm.choose(8192, 8192, 4096, 64, MODEL, memory_per_rank=1024)
    with pytest.raises(ValueError, match="needs model"):
        distmm.matmul(np.ones((2, 2)), np.ones((2, 2)), strategy="auto", ranks=2)
    with pytest.raises(ValueError, match="only with strategy"):
        distmm.matmul(np.ones((2, 2)), np.ones((2, 2)), strategy="dp", ranks=2, model=MODEL)
    # As the program's flag takes it; and still grid's own option.
    assert distmm.choose(8192, 8192, 4096, 64, MODEL, memory_per_rank="1GiB")["candidates"]
    grid = distmm.plan("grid", np.ones((64, 64)), m=64, ranks=4, memory_per_rank="1GiB")
    assert grid.label.startswith("grid ")
