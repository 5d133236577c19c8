#!/usr/bin/env python3
"""bench/validate_model.py's held-out draws, fair floor, interval coverage and auto scoring on
made-up validation runs, and bench/ablate_model.py's placements and term transforms.

Usage: bench_tools_test.py SOURCE_DIR"""
import json
import os
import sys
import unittest

SOURCE = sys.argv.pop(1)
def validate_model():
    """bench/validate_model.py as a module (it parses its own command line when imported)."""
    sys.path.insert(0, os.path.join(SOURCE, "bench"))
    argv, sys.argv = sys.argv, ["validate_model.py", "--seed", "7"]
    try:
        import validate_model as module
    finally:
        sys.argv = argv
        sys.path.pop(0)
    return module


class HeldOut(unittest.TestCase):
    """bench/validate_model.py's drawn cases and its fair noise floor."""

    def test_drawn_shapes_span_three_decades_within_their_bounds(self):
        import math
        import random
        vm = validate_model()
        rng = random.Random(1)
        shapes = [vm.draw_shape(rng, 1e8, 1e11, 3e7) for _ in range(500)]
        flops = [2 * m * k * n for m, k, n in shapes]
        for m, k, n in shapes:
            self.assertLessEqual(max(m, k, n), 256 * min(m, k, n))
            self.assertLessEqual(m * k + k * n + m * n, 3e7)
        # Rounding moves a draw a little beyond the range's ends.
        self.assertGreater(min(flops), 0.8e8)
        self.assertLess(max(flops), 1.2e11)
        self.assertLess(min(flops), 1e9)   # both ends of the three decades are drawn
        self.assertGreater(max(flops), 1e10)
        ratios = [max(s) / min(s) for s in shapes]
        self.assertGreater(max(ratios), 64)  # narrow shapes too
        # The same seed draws the same cases.
        self.assertEqual(vm.drawn_cases(random.Random(5), True, 3),
                         vm.drawn_cases(random.Random(5), True, 3))
        rates = vm.drawn_rates(random.Random(2))
        self.assertTrue(all(100 <= int(r[:-4]) <= 2000 and r.endswith("mbit") for r in rates))

    def test_floor_predicts_a_run_by_the_median_of_the_others(self):
        vm = validate_model()
        # [setting, kind, shape, strategy, state, predicted, measured, error, again, run, seed]
        rows = [["s", "matmul", "8x8x8", "dp", "warm", 1.0, m, 0, None, run, 7]
                for run, m in enumerate((1.0, 1.1, 1.3))]
        errors = sorted(vm.floor_errors(rows, "s", "warm"))
        expected = sorted([abs(1.2 - 1.0) / 1.0, abs(1.15 - 1.1) / 1.1, abs(1.05 - 1.3) / 1.3])
        for got, want in zip(errors, expected):
            self.assertAlmostEqual(got, want)
        self.assertEqual(vm.floor_errors(rows[:1], "s", "warm"), [])

    def test_a_noisy_setting_is_judged_against_its_floor(self):
        vm = validate_model()

        def rows(measured_by_run, predicted):
            out = []
            for run, measured in enumerate(measured_by_run):
                for case, m in enumerate(measured):
                    out.append(["s", "matmul", f"{case}x1x1", "dp", "warm", predicted[case], m,
                                (predicted[case] - m) / m, None, run, 7])
            return out

        # Runs 40 % apart: the floor misses 25 %; a model 30 % off one case is within 5 points.
        noisy = rows([(1.0, 1.0, 1.0), (1.0, 1.0, 1.4)], (1.0, 1.0, 1.0))
        lines, ok = vm.summary(noisy)
        self.assertIn("judged against it", lines[0])
        self.assertTrue(ok, lines)
        # A quiet setting: the model's 30 % miss is a miss.
        quiet = rows([(1.0, 1.0, 1.0), (1.0, 1.0, 1.01)], (1.0, 1.0, 1.3))
        lines, ok = vm.summary(quiet)
        self.assertFalse(ok, lines)

    def test_auto_pick_is_scored_against_the_measured_fastest(self):
        vm = validate_model()
        # One case, three strategies: predicted fastest "b" measured 5 % off the fastest "a".
        rows = [["s", "matmul", "8x8x8", name, "warm", p, m, 0, None, 0, 7]
                for name, p, m in (("a", 2.0, 1.00), ("b", 1.0, 1.05), ("c", 3.0, 2.0))]
        self.assertEqual(vm.auto_picks(rows)[:2], (1, 1))
        rows[1][6] = 1.2  # now 20 % off
        self.assertEqual(vm.auto_picks(rows)[:2], (0, 1))

    def test_coverage_counts_measurements_inside_their_interval(self):
        vm = validate_model()
        # [.., predicted, measured, error, again, run, seed, model, low, high]
        rows = [["s", "matmul", f"{i}x1x1", "dp", "cold", 1.0, m, 0, None, 0, 7, "m.json", 0.8,
                 1.25] for i, m in enumerate((0.7, 0.9, 1.0, 1.1, 1.2, 1.3, 1.0, 1.0, 1.0, 1.0))]
        lines, ok = vm.coverage(rows)
        self.assertIn("holds 8 of 10 (80 %; 1 below it, 1 above)", lines[0])
        self.assertTrue(ok, lines)
        for r in rows[:4]:
            r[6] = 2.0  # 4 of 10 inside: too narrow
        lines, ok = vm.coverage(rows)
        self.assertIn("holds 5 of 10", lines[-1])
        self.assertFalse(ok, lines)


class ExtraGrids(unittest.TestCase):
    """validate_model.py --grid: each grid runs in the settings of as many ranks."""

    def test_grids_by_rank_count(self):
        vm = validate_model()
        grids, vm.ARGS.grid = vm.ARGS.grid, ["2x2x1", "1x2x1", "1x2x2"]
        try:
            four = vm.Setting("mpi 4 ranks", [], 4).strategies()
            two = vm.Setting("simulator 2 ranks", [], 2).strategies()
        finally:
            vm.ARGS.grid = grids
        self.assertEqual(four["grid 2x2x1"], ["--strategy", "grid", "--grid", "2x2x1"])
        self.assertIn("grid 1x2x2", four)
        self.assertNotIn("grid 1x2x1", four)
        self.assertEqual([k for k in two if k.startswith("grid ")], ["grid 1x2x1"])
        self.assertEqual(four["dp"], ["--strategy", "dp"])


class Ablation(unittest.TestCase):
    """bench/ablate_model.py: where a setting's runs are placed, and what a term's removal does
    to a model."""

    def test_placement_and_terms(self):
        sys.path.insert(0, os.path.join(SOURCE, "bench"))
        try:
            import ablate_model as am
        finally:
            sys.path.pop(0)
        self.assertEqual(am.placement("mpi 4 ranks"), (4, 4))
        self.assertEqual(am.placement("simulator 2 ranks"), (2, 2))
        self.assertEqual(am.placement("2 hosts, 1183mbit/s, 2 rank(s) per host"), (4, 2))
        self.assertEqual(am.placement("2 hosts, 200mbit/s, 1 rank(s) per host"), (2, 1))
        model = {"collectives": [{"op": "scatterv", "points": [{"first_use_pages": 3}]},
                                 {"op": "scatterv_then_compute", "points": []}],
                 "revisit_s_per_page": 1e-6, "links": {"intra": {"exchange_slowdown": 2.0}},
                 "gemm": [{"first_call_s": 0.1, "narrow": [{"dim": 4}]}]}
        terms = dict(am.TERMS + am.RETIRED_TERMS)
        for name, check in (
                ("members-multiply-next curves",
                 lambda m: [c["op"] for c in m["collectives"]] == ["scatterv"]),
                ("measured collective curves (all)", lambda m: m["collectives"] == []),
                ("collective first-call pages",
                 lambda m: "first_use_pages" not in m["collectives"][0]["points"][0]),
                ("revisit", lambda m: "revisit_s_per_page" not in m),
                ("exchange slowdown", lambda m: m["links"]["intra"]["exchange_slowdown"] == 1),
                ("BLAS first call", lambda m: m["gemm"][0]["first_call_s"] == 0),
                ("narrow-shape table", lambda m: "narrow" not in m["gemm"][0])):
            changed = json.loads(json.dumps(model))
            terms[name](changed)
            self.assertTrue(check(changed), name)
            self.assertNotEqual(changed, model, name)
        # The groups dividing the world go from a model of one host; across hosts a curve of
        # several groups is hsdp's own (its shard groups), kept.
        one_host = {"links": {"intra": {}},
                    "collectives": [{"op": "broadcast", "groups": 1}, {"op": "reduce", "groups": 2}]}
        divided = terms["curves of groups dividing the world (one host)"]
        divided(one_host)
        self.assertEqual([c["op"] for c in one_host["collectives"]], ["broadcast"])
        across = {"links": {"intra": {}, "inter": {}},
                  "collectives": [{"op": "broadcast", "groups": 1}, {"op": "reduce", "groups": 2}]}
        divided(across)
        self.assertEqual(len(across["collectives"]), 2)


if __name__ == "__main__":
    unittest.main()
