#!/usr/bin/env python3
"""Checkpoints through the distmm program: runs killed at random moments and in the middle of
saves, on both backends, then resumed with 1 to 4 ranks and either strategy or a 2-D grid, end with the W of
a run that never stopped (bitwise with the same rank count and strategy, within 1e-12
otherwise); bad checkpoints end in exit code 2 with one line naming the file.

Usage: checkpoint_test.py DISTMM MPIEXEC [MPIEXEC_PREFLAGS...]
"""
import json
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import unittest

DISTMM, MPIEXEC, PREFLAGS = sys.argv[1], sys.argv[2], sys.argv[3:]
SEED = int(os.environ.get("DISTMM_TEST_SEED", str(int(time.time()))))
print(f"checkpoint_test.py: random seed {SEED} (DISTMM_TEST_SEED={SEED} repeats this run)",
      flush=True)
RNG = random.Random(SEED)
# Crashes and kills at random moments per test: each trial resumes four ways. Under the
# sanitizers (DISTMM_TEST_TRIALS=1, set by tests/CMakeLists.txt) one trial proves the paths
# memory-safe; the Release pass tries the moments.
TRIALS = int(os.environ.get("DISTMM_TEST_TRIALS", "0")) or None
# Steps of the run killed under mpirun: long enough to kill it mid-run (fewer under the
# sanitizers, which run each step many times slower).
KILL_STEPS = 200 if TRIALS else 600
SMALL = ["train", "--optimizer", "adam", "--m", "200", "--k", "24", "--n", "10", "--lr", "0.01",
         "--print-every", "1000"]
LONG = ["train", "--optimizer", "adam", "--m", "2000", "--k", "64", "--n", "32", "--lr", "0.01",
        "--print-every", "1000"]


def command(backend, ranks, args):
    if backend == "mpi":
        return [MPIEXEC, "-q", "-np", str(ranks), *PREFLAGS, DISTMM, *args]
    return [DISTMM, "--ranks", str(ranks), *args]


def run(backend, ranks, args, expect=0, env=None):
    cmd = command(backend, ranks, args)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})
    if expect is not None and done.returncode != expect:
        raise AssertionError(f"{' '.join(cmd)} exited {done.returncode}, expected {expect}:\n"
                             f"{done.stdout}\n{done.stderr}")
    return done


def load_w(path):
    """An Armadillo binary matrix file (--out *.bin): its doubles, column-major."""
    with open(path, "rb") as f:
        assert f.readline() == b"ARMA_MAT_BIN_FN008\n", path
        rows, cols = map(int, f.readline().split())
        return struct.unpack(f"<{rows * cols}d", f.read(8 * rows * cols))


def relative_difference(a, b):
    return max(abs(x - y) for x, y in zip(a, b)) / max(abs(y) for y in b)


def committed(d):
    return sorted(int(n[5:]) for n in os.listdir(d) if n.startswith("step-")) if os.path.isdir(d) else []


class Checkpoints(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="distmm-checkpoint-")

    def tearDown(self):
        shutil.rmtree(self.dir)

    def path(self, *names):
        return os.path.join(self.dir, *names)

    def resume_everywhere(self, backend, ck, args, steps, same, reference, strategy="fsdp"):
        """Resumes copies of the crashed run's directory: with its own rank count and strategy
        (bitwise equal to `reference`), with 1, 3 and 4 ranks and either strategy, and with
        a 2-D grid of 4 ranks (its blocks of W: rows and columns)."""
        os.makedirs(ck, exist_ok=True)  # a crash before the first save leaves nothing
        variants = [(same, strategy), (1, "dp"), (3, "dp" if strategy == "fsdp" else "fsdp"),
                    (4, strategy), (4, "grid")]
        for ranks, s in variants:
            with self.subTest(backend=backend, ranks=ranks, strategy=s):
                copy = ck + f"-{ranks}{s}"
                shutil.copytree(ck, copy)
                out = copy + ".bin"
                resume = ["--resume", copy] if committed(copy) else []
                run(backend, ranks, args + ["--strategy", s, "--steps", str(steps), *resume,
                                            "--checkpoint-dir", copy, "--out", out])
                w = load_w(out)
                if (ranks, s) == (same, strategy):
                    self.assertEqual(w, reference, f"resumed from {committed(ck)}: not bitwise")
                else:
                    self.assertLessEqual(relative_difference(w, reference), 1e-12)
                # The leftovers of the crash are gone after the next save.
                self.assertEqual([n for n in os.listdir(copy) if n.startswith(".")], [])

    def test_simulator_crash_at_random_calls(self):
        ref = self.path("ref.bin")
        run("simulator", 2, SMALL + ["--strategy", "fsdp", "--steps", "30", "--out", ref])
        reference = load_w(ref)
        # Rank 1 of fsdp on 2 ranks makes about 160 communication calls in 30 steps and 8 saves.
        for trial, call in enumerate(sorted(RNG.sample(range(5, 150), TRIALS or 4))):
            ck = self.path(f"sim-{trial}")
            crash = run("simulator", 2, SMALL + ["--strategy", "fsdp", "--steps", "30",
                                                 "--checkpoint-dir", ck, "--checkpoint-every", "4",
                                                 "--fault", f"crash:{trial % 2}:{call}"],
                        expect=3)
            self.assertIn("injected fault", crash.stderr)
            self.resume_everywhere("simulator", ck, SMALL, 30, 2, reference)

    def test_mpirun_kill_9_of_one_rank_at_random_moments(self):
        ref = self.path("ref.bin")
        args = LONG + ["--strategy", "fsdp", "--steps", str(KILL_STEPS)]
        run("mpi", 2, args + ["--out", ref])
        reference = load_w(ref)
        for trial in range(TRIALS or 3):
            ck = self.path(f"mpi-{trial}")
            proc = subprocess.Popen(command("mpi", 2, args + ["--checkpoint-dir", ck,
                                                              "--checkpoint-every", "10"]),
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            # Wait for a random number of committed saves, then kill a rank a random moment
            # later: between saves or in the middle of one.
            target = 10 * RNG.randint(1, KILL_STEPS * 2 // 30)
            deadline = time.monotonic() + 60
            while proc.poll() is None and time.monotonic() < deadline and \
                    (committed(ck) or [0])[-1] < target:
                time.sleep(0.002)
            time.sleep(RNG.uniform(0, 0.05))
            ranks = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True,
                                   text=True).stdout.split()
            if ranks:
                os.kill(int(RNG.choice(ranks)), signal.SIGKILL)
            code = proc.wait(timeout=60)
            print(f"trial {trial}: killed {'a rank' if ranks else 'nothing'} after step {target}, "
                  f"mpirun exited {code}, newest committed {committed(ck)[-1:]}", flush=True)
            self.assertNotEqual(code, 0, "the run ended before the kill")
            self.resume_everywhere("mpi", ck, LONG, KILL_STEPS, 2, reference)

    def test_crash_in_the_middle_of_a_save(self):
        for backend in ("mpi", "simulator"):
            ref = self.path(f"ref-{backend}.bin")
            args = SMALL + ["--strategy", "dp", "--steps", "12"]
            run(backend, 2, args + ["--out", ref])
            reference = load_w(ref)
            # rank 1's shard on disk, rank 0's manifest written, the directory renamed into
            # place: what was committed, and what `latest` says, after each.
            for stage, rank, newest, latest in (("shard", 1, 4, "step-4"),
                                                ("manifest", 0, 4, "step-4"),
                                                ("renamed", 0, 8, "step-4")):
                with self.subTest(backend=backend, stage=stage):
                    ck = self.path(f"{backend}-{stage}")
                    run(backend, 2, args + ["--checkpoint-dir", ck, "--checkpoint-every", "4"],
                        expect=None, env={"DISTMM_TEST_CHECKPOINT_CRASH": f"{stage}:{rank}:8"})
                    self.assertEqual(committed(ck)[-1], newest)
                    with open(os.path.join(ck, "latest")) as f:
                        self.assertEqual(f.read(), latest + "\n")
                    self.resume_everywhere(backend, ck, SMALL, 12, 2, reference, strategy="dp")

    def test_dry_run_predicts_what_steps_saves_and_resumes_move(self):
        same = ["bytes_sent_per_step", "bytes_received_per_step", "persistent_param_grad_bytes",
                "peak_param_grad_bytes", "optimizer_state_bytes"]
        for backend in ("simulator", "mpi"):
            for ranks, strategy in ((1, "dp"), (3, "fsdp"), (4, "dp"), (4, "grid")):
                with self.subTest(backend=backend, ranks=ranks, strategy=strategy):
                    ck = self.path(f"dry-{backend}-{ranks}{strategy}")
                    args = SMALL[:-6] + ["--n", "3", "--lr", "0.01", "--print-every", "1000",
                                         "--strategy", strategy]  # empty shards at 4 ranks
                    saving = args + ["--steps", "7", "--checkpoint-dir", ck,
                                     "--checkpoint-every", "3"]
                    run(backend, ranks, saving + ["--report", ck + "-saved.json"])
                    run(backend, ranks, args + ["--steps", "9", "--resume", ck,
                                                "--report", ck + "-resumed.json"])
                    run("simulator", ranks, saving + ["--dry-run", "--report", ck + "-dry.json"])
                    with open(ck + "-dry.json") as f:
                        dry = json.load(f)
                    self.assertEqual(dry["checkpoint_saves"], 3)
                    predicted = dry["runs"][0]["per_rank"]
                    with open(ck + "-saved.json") as f:
                        saved = json.load(f)["runs"][0]
                    with open(ck + "-resumed.json") as f:
                        resumed = json.load(f)["runs"][0]
                    self.assertEqual(resumed["first_step"], 7)
                    self.assertEqual(len(saved["checkpoints_saved"]), 3)
                    for p, s_, r in zip(predicted, saved["per_rank"], resumed["per_rank"]):
                        for key in same:
                            self.assertEqual(s_[key], p[key], key)
                            self.assertEqual(r[key], p[key], key)
                        self.assertEqual(s_["checkpoint_bytes_written"],
                                         3 * p["checkpoint_bytes_written_per_save"])
                        self.assertEqual(r["checkpoint_bytes_read"], p["checkpoint_bytes_read"])
                        self.assertEqual(s_["checkpoint_bytes_read"], 0)

    def test_bad_checkpoints_exit_2_with_one_line(self):
        ck = self.path("good")
        run("simulator", 3, SMALL + ["--strategy", "fsdp", "--steps", "4", "--checkpoint-dir", ck])
        shard = os.path.join(ck, "step-4", "shard-00001.bin")
        with open(shard, "r+b") as f:
            f.seek(17)
            byte = f.read(1)
            f.seek(17)
            f.write(bytes([byte[0] ^ 1]))
        for backend, ranks in (("simulator", 2), ("mpi", 3)):
            with self.subTest(backend=backend):
                done = run(backend, ranks, SMALL + ["--strategy", "dp", "--steps", "8",
                                                    "--resume", ck], expect=2)
                lines = done.stderr.strip().splitlines()
                self.assertEqual(len(lines), 1, done.stderr)
                self.assertIn("shard-00001.bin: checksum mismatch", lines[0])
        os.truncate(shard, 100)
        done = run("mpi", 2, SMALL + ["--strategy", "fsdp", "--steps", "8", "--resume", ck],
                   expect=2)
        self.assertIn("shard-00001.bin: truncated", done.stderr)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
