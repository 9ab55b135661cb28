"""Kernel time in bench/gpu/timing.py (`frameworks.py time`) without a GPU.

The per-run sums are checked on random kernel records from a logged seed (STITCH_TEST_SEED
replays one), against sums made as the records were drawn; the reading of jax.profiler's trace
runs on a real trace of a jitted function on the CPU, where it finds every run's annotation and
says that there are no GPU kernel records.

  python frameworks_timing_test.py [unittest flags]
"""

import os
import random
import sys
import time
import unittest

HERE = os.path.dirname(os.path.realpath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench", "gpu"))

import timing  # noqa: E402

SEED = int(os.environ.get("STITCH_TEST_SEED", time.time_ns() % (1 << 32)))
print(f"frameworks_timing_test: seed {SEED} (STITCH_TEST_SEED={SEED} replays it)", file=sys.stderr)


def random_runs(rng, runs, kernels_per_run, separator=None):
    """(spans, per-run sums): each run opens with `separator` where one is given, then its
    kernels, with gaps between every two records."""
    spans, sums, clock = [], [], 0.0
    for _ in range(runs):
        if separator is not None:
            spans.append((clock, clock + 40.0, separator))
            clock += 40.0
        total = 0.0
        for k in range(kernels_per_run):
            clock += rng.uniform(0.5, 10.0)
            duration = rng.uniform(1.0, 500.0)
            spans.append((clock, clock + duration, f"triton_kernel_{k}"))
            total += duration
            clock += duration
        sums.append(total)
        clock += rng.uniform(0.5, 10.0)
    return spans, sums


def is_flush(name):
    return timing.TORCH_SEPARATOR in name


FLUSH = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<unsigned char>>"


class BetweenSeparatorsTest(unittest.TestCase):
    def test_sums_each_runs_kernels_whatever_the_record_order(self):
        rng = random.Random(SEED)
        spans, want = random_runs(rng, 7, rng.randint(1, 5), FLUSH)
        rng.shuffle(spans)
        got = timing.kernel_time_between_separators(spans, 7, is_flush)
        self.assertEqual(len(got), 7)
        for g, w in zip(got, want):
            self.assertAlmostEqual(g, w, places=6)

    def test_a_missing_run_or_a_kernel_before_the_first_is_an_error(self):
        rng = random.Random(SEED + 1)
        spans, _ = random_runs(rng, 3, 2, FLUSH)
        with self.assertRaisesRegex(ValueError, "holds 3 runs, 4 were made"):
            timing.kernel_time_between_separators(spans, 4, is_flush)
        early = [(-100.0, -90.0, "triton_early")] + spans
        with self.assertRaisesRegex(ValueError, "ran before the first run started"):
            timing.kernel_time_between_separators(early, 3, is_flush)


class InWindowsTest(unittest.TestCase):
    def test_kernels_count_for_the_window_they_start_in_and_flushes_for_none(self):
        rng = random.Random(SEED + 2)
        runs = 6
        spans, want = random_runs(rng, runs, rng.randint(1, 4))
        # Each run's window spans its kernels; a flush kernel runs between windows.
        windows, flushes, at = [], [], 0
        per_run = len(spans) // runs
        for r in range(runs):
            mine = spans[at:at + per_run]
            at += per_run
            windows.append((mine[0][0] - 0.25, mine[-1][1] + 0.25))
            flushes.append((mine[-1][1] + 0.3, mine[-1][1] + 0.4, "loop_add_fusion"))
        mixed = spans + flushes
        rng.shuffle(mixed)
        got = timing.kernel_time_in_windows(mixed, windows)
        for g, w in zip(got, want):
            self.assertAlmostEqual(g, w, places=6)

    def test_an_empty_window_is_an_error(self):
        with self.assertRaisesRegex(ValueError, "1 of 2 runs hold no kernel record"):
            timing.kernel_time_in_windows([(1.0, 2.0, "k")], [(0.0, 5.0), (10.0, 20.0)])


class JaxTraceTest(unittest.TestCase):
    def test_a_cpu_trace_has_every_run_but_no_gpu_kernels(self):
        try:
            import jax
            import jax.numpy as jnp
            from jax.profiler import ProfileData  # noqa: F401
        except ImportError as e:
            self.skipTest(f"no jax.profiler.ProfileData here ({e})")
        fn = jax.jit(lambda x: jnp.exp(x) * 2 + 1)
        x = jnp.ones((256, 256))
        fn(x).block_until_ready()
        flushes = []
        with self.assertRaisesRegex(ValueError, "no GPU kernel records"):
            timing.time_jax_kernels(jax, fn, [x], 3, lambda: flushes.append(1))
        self.assertEqual(len(flushes), 3)


if __name__ == "__main__":
    unittest.main()
