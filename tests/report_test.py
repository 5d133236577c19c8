#!/usr/bin/env python3
"""--report, --trace and --dry-run through the distmm program, on both backends.

Usage: report_test.py DISTMM MPIEXEC [MPIEXEC_PREFLAGS...]
Checks that the report validates against docs/report.schema.json, that a dry run predicts
exactly the bytes, messages and memory a real run counts, and that the trace is a valid
Chrome trace with a process per rank and a span for every collective and multiply.
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

import jsonschema

DISTMM, MPIEXEC, PREFLAGS = sys.argv[1], sys.argv[2], sys.argv[3:]


def load_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def cpu_set(text):
    """The CPUs of a list such as "0-2,5"."""
    cpus = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


SCHEMA = load_json(os.path.join(os.path.dirname(__file__), "..", "docs", "report.schema.json"))
SHAPE = ["--m", "11", "--k", "7", "--n", "3"]  # uneven: empty parameter shards beyond 3 ranks
# Setup (placing B), then each execution after a barrier.
# (hsdp on one host: R = 1, so no broadcast across replicas; its splits make the mesh.)
SETUP = {"dp": ["broadcast"], "fsdp": ["scatterv"], "fsdp-overlap": ["scatterv"],
         "hsdp": ["split", "split", "scatterv"], "tp-col": ["scatterv"], "tp-row": ["scatterv"]}
EXECUTION = {"dp": ["barrier", "scatterv", "gatherv"],
             "fsdp": ["barrier", "scatterv", "allgatherv", "gatherv"],
             "fsdp-overlap": ["barrier", "scatterv", "sendrecv", "sendrecv", "gatherv"],
             "hsdp": ["barrier", "scatterv", "allgatherv", "gatherv"],
             "tp-col": ["barrier", "broadcast", "gatherv"],
             "tp-row": ["barrier", "scatterv", "reduce"]}
STRATEGIES = ["dp", "fsdp", "fsdp-overlap", "hsdp", "tp-col", "tp-row", "grid"]
COUNTED = ["a_rows", "param_elements", "bytes_sent", "bytes_received", "messages_sent",
           "messages_received", "persistent_param_bytes", "peak_param_bytes"]


def run(backend, ranks, args):
    if backend == "mpi":
        cmd = [MPIEXEC, "-q", "-np", str(ranks), *PREFLAGS, DISTMM, *args]
    else:
        cmd = [DISTMM, "--ranks", str(ranks), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise AssertionError(f"{cmd} exited {done.returncode}: {done.stderr}")
    return done


class Report(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def path(self, name):
        return os.path.join(self.dir.name, name)

    def test_report_validates_and_dry_run_predicts_the_counters(self):
        for backend in ("simulator", "mpi"):
            for ranks in (1, 2, 4, 5):
                with self.subTest(backend=backend, ranks=ranks):
                    run(backend, ranks, SHAPE + ["--report", self.path("real.json")])
                    real = load_json(self.path("real.json"))
                    jsonschema.validate(real, SCHEMA)
                    run("simulator", ranks, SHAPE + ["--dry-run", "--report", self.path("dry.json")])
                    dry = load_json(self.path("dry.json"))
                    jsonschema.validate(dry, SCHEMA)
                    self.assertEqual([r["strategy"] for r in real["runs"]], STRATEGIES)
                    self.assertEqual(real["runs"][3]["replicas"], 1)  # one host
                    for real_run, dry_run in zip(real["runs"], dry["runs"]):
                        self.assertEqual(real_run["backend"], backend)
                        self.assertFalse(real_run["dry_run"])
                        self.assertTrue(dry_run["dry_run"])
                        self.assertIsNone(dry_run["time_s"])
                        self.assertEqual(len(real_run["per_rank"]), ranks)
                        self.assertLessEqual(real_run["max_abs_error"], 1e-12)
                        for got, want in zip(real_run["per_rank"], dry_run["per_rank"]):
                            self.assertEqual({k: got[k] for k in COUNTED},
                                             {k: want[k] for k in COUNTED},
                                             f"{real_run['strategy']} rank {got['rank']}")
                            self.assertGreaterEqual(got["compute_s"], 0)
                            # The per-communicator breakdown adds up to the rank's counters.
                            by = got["communicators"]
                            self.assertEqual(by[0]["communicator"], "world")
                            self.assertEqual(sum(c["bytes_sent"] for c in by), got["bytes_sent"])
                            self.assertEqual(sum(c["bytes_received"] for c in by),
                                             got["bytes_received"])
                        sent = sum(r["bytes_sent"] for r in real_run["per_rank"])
                        received = sum(r["bytes_received"] for r in real_run["per_rank"])
                        self.assertEqual(sent, received)

    def test_hsdp_meshes_counted_as_predicted(self):
        for backend in ("simulator", "mpi"):
            for ranks, replicas in ((4, 2), (4, 4), (6, 3)):
                with self.subTest(backend=backend, ranks=ranks, replicas=replicas):
                    args = SHAPE + ["--strategy", "hsdp", "--replicas", str(replicas)]
                    run(backend, ranks, args + ["--report", self.path("real.json")])
                    run("simulator", ranks, args + ["--dry-run", "--report", self.path("dry.json")])
                    real = load_json(self.path("real.json"))
                    dry = load_json(self.path("dry.json"))
                    jsonschema.validate(real, SCHEMA)
                    self.assertEqual(real["runs"][0]["replicas"], replicas)
                    self.assertEqual(dry["runs"][0]["replicas"], replicas)
                    shards = ranks // replicas
                    for got, want in zip(real["runs"][0]["per_rank"], dry["runs"][0]["per_rank"]):
                        self.assertEqual({k: got[k] for k in COUNTED}, {k: want[k] for k in COUNTED})
                        # Which group moved what: the execution's all-gather stays within the
                        # rank's shard group; the broadcast of the shards crosses the replicas.
                        rank = got["rank"]
                        group = ",".join(str(r) for r in range(rank - rank % shards,
                                                                rank - rank % shards + shards))
                        across = ",".join(str(rank % shards + g * shards) for g in range(replicas))
                        names = [c["communicator"] for c in got["communicators"]]
                        # A group of one rank moves nothing, so it is not listed.
                        self.assertEqual(names, ["world"] +
                                         ([f"ranks {group} of world"] if shards > 1 else []) +
                                         ([f"ranks {across} of world"] if replicas > 1 else []))
                        by = {c["communicator"]: c for c in got["communicators"]}
                        self.assertEqual(sum(c["bytes_received"] for c in by.values()),
                                         got["bytes_received"])
                        if shards > 1:
                            self.assertGreater(by[f"ranks {group} of world"]["bytes_received"], 0)

    def test_dry_run_handles_shapes_far_beyond_memory(self):
        out = run("simulator", 1024, ["--dry-run", "--m", "1000000", "--k", "1000000", "--n",
                                      "1000000", "--report", self.path("big.json")])
        self.assertIn("dry-run", out.stdout)
        big = load_json(self.path("big.json"))
        jsonschema.validate(big, SCHEMA)
        dp, fsdp = big["runs"][:2]
        self.assertEqual(len(dp["per_rank"]), 1024)
        # DP replicates B (10^12 doubles); FSDP holds 1/1024 of its columns persistently.
        self.assertEqual(dp["per_rank"][5]["persistent_param_bytes"], 8 * 10**12)
        self.assertEqual(fsdp["per_rank"][5]["param_elements"], 10**6 * 977)
        self.assertEqual(fsdp["per_rank"][1023]["param_elements"], 10**6 * 976)

    def test_float32_halves_every_byte_count_and_the_dry_run_predicts_it(self):
        for backend in ("simulator", "mpi"):
            with self.subTest(backend=backend):
                docs = {}
                for dtype in ("f64", "f32"):
                    run(backend, 3, SHAPE + ["--dtype", dtype, "--report", self.path(dtype)])
                    docs[dtype] = load_json(self.path(dtype))
                    jsonschema.validate(docs[dtype], SCHEMA)
                run("simulator", 3, SHAPE + ["--dtype", "f32", "--dry-run", "--report",
                                             self.path("dry")])
                dry = load_json(self.path("dry"))
                for r64, r32, rdry in zip(docs["f64"]["runs"], docs["f32"]["runs"], dry["runs"]):
                    self.assertEqual((r64["dtype"], r32["dtype"], rdry["dtype"]), ("f64", "f32", "f32"))
                    self.assertLessEqual(r32["max_abs_error"], 8 * 2.0 ** -23 * 100)
                    for a, b, c in zip(r64["per_rank"], r32["per_rank"], rdry["per_rank"]):
                        for key in ("bytes_sent", "bytes_received", "persistent_param_bytes",
                                    "peak_param_bytes"):
                            self.assertEqual(a[key], 2 * b[key], f"{r32['strategy']} {key}")
                        self.assertEqual({k: b[k] for k in COUNTED}, {k: c[k] for k in COUNTED})

    def test_warmup_and_repeat_are_reported(self):
        for backend in ("simulator", "mpi"):
            with self.subTest(backend=backend):
                run(backend, 2, SHAPE + ["--warmup", "2", "--repeat", "3", "--report",
                                         self.path("r.json")])
                doc = load_json(self.path("r.json"))
                jsonschema.validate(doc, SCHEMA)
                for r in doc["runs"]:
                    self.assertEqual(r["warmup"], 2)
                    self.assertEqual(len(r["times_s"]), 3)
                    self.assertEqual(r["time_s"], sorted(r["times_s"])[1])
                    self.assertAlmostEqual(r["gflops"], 2 * 11 * 7 * 3 / r["time_s"] / 1e9)
                    self.assertGreaterEqual(r["setup_s"], 0)
                    for rank in r["per_rank"]:
                        self.assertGreaterEqual(rank["blas_threads"], 1)
                        self.assertRegex(rank["cpus"], r"^[0-9][0-9,-]*$")
                        self.assertGreater(rank["allocated_bytes"], 0)

    def test_simulator_ranks_share_the_cpus_evenly(self):
        # Rank threads left to the scheduler shared one core for a whole multiply in about
        # half the processes (a cold 1000x1500x700 dp multiply took 50 ms instead of 27 ms on
        # both ranks): each rank gets its own share, as mpirun binds its processes.
        allowed = sorted(os.sched_getaffinity(0))
        if len(allowed) < 2:
            self.skipTest(f"one CPU allowed ({allowed}): nothing to share")
        for ranks in (2, len(allowed), 2 * len(allowed) + 1):
            with self.subTest(ranks=ranks):
                run("simulator", ranks, SHAPE + ["--strategy", "dp", "--report", self.path("r.json")])
                per_rank = load_json(self.path("r.json"))["runs"][0]["per_rank"]
                held = [cpu_set(rank["cpus"]) for rank in per_rank]
                self.assertEqual(len(held), ranks)
                uses = {c: sum(c in h for h in held) for c in allowed}
                self.assertEqual(set().union(*held), set(allowed), held)
                if ranks <= len(allowed):  # disjoint, sizes differing by at most one
                    self.assertEqual(max(uses.values()), 1, held)
                    self.assertLessEqual(max(map(len, held)) - min(map(len, held)), 1, held)
                else:  # one CPU each, as many ranks on each CPU give or take one
                    self.assertEqual({len(h) for h in held}, {1}, held)
                    self.assertLessEqual(max(uses.values()) - min(uses.values()), 1, held)

    def test_trace_has_a_span_for_every_rank_and_collective(self):
        for backend in ("simulator", "mpi"):
            with self.subTest(backend=backend):
                run(backend, 3, SHAPE + ["--warmup", "1", "--trace", self.path("trace.json")])
                trace = load_json(self.path("trace.json"))
                events = trace["traceEvents"]
                names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
                self.assertEqual(names, {0: "rank 0", 1: "rank 1", 2: "rank 2"})
                spans = [e for e in events if e["ph"] == "X"]
                for e in spans:
                    self.assertGreaterEqual(e["dur"], 0)
                    self.assertIn("ts", e)
                for rank in range(3):
                    for strategy in SETUP:
                        expected = SETUP[strategy] + 2 * EXECUTION[strategy]
                        run_span = [e for e in spans if e["pid"] == rank and e["name"] == strategy]
                        self.assertEqual(len(run_span), 1)
                        start = run_span[0]["ts"]
                        end = start + run_span[0]["dur"]
                        inside = [e for e in spans if e["pid"] == rank and e.get("cat") != "strategy"
                                  and start <= e["ts"] <= end]
                        self.assertEqual([e["name"] for e in inside if e["cat"] == "communication"],
                                         expected, f"rank {rank} {strategy}")
                        multiplies = [e for e in inside if e["name"] == "multiply"]
                        self.assertEqual(len(multiplies), 2 * (3 if strategy == "fsdp-overlap" else 1))
                        self.assertIn("shape", multiplies[0]["args"])
                        for e in inside:
                            if e["cat"] == "communication":
                                self.assertIn("bytes_received", e["args"])
                        # hsdp places and gathers B within its shard group (all 3 ranks at R = 1).
                        group = "ranks 0,1,2 of world"
                        comms = (["world", "world", group] + 2 * ["world", "world", group, "world"]
                                 if strategy == "hsdp" else ["world"] * len(expected))
                        self.assertEqual([e["args"]["communicator"] for e in inside
                                          if e["cat"] == "communication"], comms)


class Model(unittest.TestCase):
    """The machine model's format: what calibrate writes, and the hand-written example, both
    follow docs/model.schema.json, and distmm reads each back."""

    def test_calibrated_and_example_models_follow_the_schema(self):
        schema = load_json(os.path.join(os.path.dirname(__file__), "..", "docs",
                                        "model.schema.json"))
        with tempfile.TemporaryDirectory() as tmp:
            for backend in ("simulator", "mpi"):
                path = os.path.join(tmp, backend + ".json")
                run(backend, 2, ["calibrate", "--quick", "--out", path])
                jsonschema.validate(load_json(path), schema)
                out = run("simulator", 2, SHAPE + ["--model", path, "--dry-run"]).stdout
                self.assertIn("predicted_s", out)
        example = os.path.join(os.path.dirname(__file__), "..", "docs", "models",
                               "example-cluster.json")
        jsonschema.validate(load_json(example), schema)
        out = run("simulator", 64, SHAPE + ["--model", example, "--dry-run",
                                            "--ranks-per-host", "8"]).stdout
        self.assertIn("predicted_s", out)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "-v"])
