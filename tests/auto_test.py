#!/usr/bin/env python3
"""--strategy auto through the distmm program: the time model picks the strategy.

Usage: auto_test.py DISTMM MPIEXEC [MPIEXEC_PREFLAGS...]
Checks that auto runs one strategy, the candidate the model predicts fastest among those that
fit the memory per rank; that each candidate's figure is the prediction --model gives that
strategy run alone; that the table and the report say what was picked over what; that the
product is verified on both backends; and the refusals (no --model, nothing fits).
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

import jsonschema

DISTMM, MPIEXEC, PREFLAGS = sys.argv[1], sys.argv[2], sys.argv[3:]
HERE = os.path.dirname(os.path.abspath(__file__))
CLUSTER = os.path.join(HERE, "..", "docs", "models", "example-cluster.json")
with open(os.path.join(HERE, "..", "docs", "report.schema.json"), encoding="utf-8") as f:
    SCHEMA = json.load(f)


def run(args, backend=None, ranks=3, code=0):
    if backend == "mpi":
        cmd = [MPIEXEC, "-q", "-np", str(ranks), *PREFLAGS, DISTMM, *args]
    elif backend == "simulator":
        cmd = [DISTMM, "--ranks", str(ranks), *args]
    else:
        cmd = [DISTMM, *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    if done.returncode != code:
        raise AssertionError(f"{cmd} exited {done.returncode}, not {code}: {done.stderr}")
    return done


def report(args, backend=None, ranks=3):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "r.json")
        done = run([*args, "--report", path], backend, ranks)
        with open(path, encoding="utf-8") as f:
            return json.load(f), done.stdout


class Auto(unittest.TestCase):
    DRY = ["--dry-run", "--ranks", "64", "--ranks-per-host", "8", "--model", CLUSTER,
           "--m", "8192", "--k", "8192", "--n", "4096"]

    def check_ranking(self, auto):
        candidates = auto["candidates"]
        self.assertEqual(auto["picked"], candidates[0]["label"])
        fits = [c["fits"] for c in candidates]
        self.assertEqual(fits, sorted(fits, reverse=True), "those that fit first")
        for group in (True, False):
            times = [c["predicted_time_s"] for c in candidates if c["fits"] == group]
            self.assertEqual(times, sorted(times), "fastest first")
        self.assertTrue(candidates[0]["fits"])
        for c in candidates:  # each with its nominal 80 % interval around it
            self.assertLess(c["predicted_low_s"], c["predicted_time_s"], c["label"])
            self.assertGreater(c["predicted_high_s"], c["predicted_time_s"], c["label"])

    def test_dry_run_picks_the_fastest_each_as_predicted_alone(self):
        # Warm executions only, so that each strategy of `all` is predicted as if run alone
        # (only a cold execution depends on what ran before it).
        doc, out = report([*self.DRY, "--strategy", "auto", "--warmup", "1"])
        jsonschema.validate(doc, SCHEMA)
        self.assertEqual(len(doc["runs"]), 1)
        run_ = doc["runs"][0]
        auto = run_["auto"]
        self.check_ranking(auto)
        self.assertEqual(len(auto["candidates"]), 7)
        self.assertIn("auto: picked " + auto["picked"], out)
        self.assertIn("runner-up " + auto["candidates"][1]["label"], out)
        self.assertAlmostEqual(run_["predicted_time_s"], auto["candidates"][0]["predicted_time_s"])
        self.assertAlmostEqual(run_["predicted_low_s"], auto["candidates"][0]["predicted_low_s"])
        self.assertAlmostEqual(run_["predicted_high_s"], auto["candidates"][0]["predicted_high_s"])
        every, _ = report([*self.DRY, "--strategy", "all", "--warmup", "1"])
        alone = {r["strategy"]: r["predicted_time_s"] for r in every["runs"]}
        for c in auto["candidates"]:
            self.assertAlmostEqual(c["predicted_time_s"], alone[c["strategy"]], delta=1e-9,
                                   msg=c["label"])
        self.assertEqual(run_["strategy"], min(alone, key=alone.get))

    def test_memory_per_rank_leaves_out_what_does_not_fit(self):
        doc, _ = report([*self.DRY, "--strategy", "auto"])
        sizes = sorted(c["bytes_per_rank"] for c in doc["runs"][0]["auto"]["candidates"])
        self.assertLess(sizes[0], sizes[-1])
        limit = (sizes[0] + sizes[-1]) // 2
        doc, out = report([*self.DRY, "--strategy", "auto", "--memory-per-rank", str(limit)])
        auto = doc["runs"][0]["auto"]
        self.check_ranking(auto)
        for c in auto["candidates"]:
            self.assertEqual(c["fits"], c["bytes_per_rank"] <= limit, c["label"])
        self.assertIn("beyond the memory per rank", out)
        # Nothing fits in 1 KiB a rank (grid auto, which chooses its grid within the limit,
        # neither).
        done = run([*self.DRY, "--strategy", "auto", "--memory-per-rank", "1KiB"], code=2)
        self.assertIn("--strategy auto: no strategy's plan fits", done.stderr)
        self.assertEqual(len(done.stderr.strip().splitlines()), 1, done.stderr)

    def test_needs_a_model(self):
        done = run(["--ranks", "2", "--strategy", "auto"], code=2)
        self.assertIn("--strategy auto: needs --model", done.stderr)
        self.assertEqual(len(done.stderr.strip().splitlines()), 1, done.stderr)

    def test_runs_and_verifies_the_pick_on_both_backends(self):
        for backend in ("simulator", "mpi"):
            for layout in ("root", "distributed"):
                with self.subTest(backend=backend, layout=layout):
                    doc, out = report(["--strategy", "auto", "--model", CLUSTER, "--m", "300",
                                       "--k", "200", "--n", "100", "--layout", layout], backend)
                    jsonschema.validate(doc, SCHEMA)
                    self.assertEqual(len(doc["runs"]), 1)
                    run_ = doc["runs"][0]
                    self.check_ranking(run_["auto"])
                    self.assertEqual(run_["strategy"], run_["auto"]["candidates"][0]["strategy"])
                    self.assertIsNotNone(run_["max_abs_error"])  # verified (exit 0)
                    self.assertIn("auto: picked", out)

    def test_train_picks_a_training_strategy(self):
        for backend in ("simulator", "mpi"):
            with self.subTest(backend=backend):
                doc, out = report(["train", "--strategy", "auto", "--model", CLUSTER, "--steps",
                                   "4", "--m", "64", "--k", "16", "--n", "8"], backend)
                self.assertEqual(len(doc["runs"]), 1)
                auto = doc["runs"][0]["auto"]
                self.check_ranking(auto)
                self.assertEqual(doc["runs"][0]["strategy"], auto["candidates"][0]["strategy"])
                self.assertNotIn("fsdp-overlap", [c["strategy"] for c in auto["candidates"]])
                self.assertIn("for 4 steps", out)
        doc, _ = report(["train", "--dry-run", "--ranks", "16", "--strategy", "auto", "--model",
                         CLUSTER])
        self.assertEqual(len(doc["runs"]), 1)
        self.check_ranking(doc["runs"][0]["auto"])


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
