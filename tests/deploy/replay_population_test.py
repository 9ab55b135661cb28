#!/usr/bin/env python3
"""Tests of the PAI task population sampler, deploy/replay/population.py.

  python3 tests/deploy/replay_population_test.py      (from anywhere; finds the repository root)

- the same seed gives the same tasks and a different seed gives different ones;
- over 20,000 draws the quantiles of run time and GPU request, and the shares of GPU types,
  workloads and arrival rate, match the cited parameters in deploy/replay/PARAMETERS.md within
  the tolerances stated beside each check;
- the machine table in deploy/replay/trace loads as 1,897 machines and 6,742 GPUs with the
  published per-type counts;
- truncated or garbled machine tables raise ValueError naming the problem.

Needs numpy (Debian's python3-numpy). If the python3 that runs this lacks it but the system
one has it, the test re-runs itself with /usr/bin/python3 rather than failing for the
environment; a missing numpy everywhere is a failure.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import sys

SYSTEM_PYTHON = "/usr/bin/python3"
if importlib.util.find_spec("numpy") is None:
    if os.path.exists(SYSTEM_PYTHON) and os.path.realpath(sys.executable) != os.path.realpath(SYSTEM_PYTHON):
        print(f"numpy is missing from {sys.executable}; re-running with {SYSTEM_PYTHON}", flush=True)
        os.execv(SYSTEM_PYTHON, [SYSTEM_PYTHON, *sys.argv])
    sys.exit("numpy is required (Debian package python3-numpy)")

import gzip
import io
import tarfile
import tempfile
import unittest

import numpy as np

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "deploy" / "replay"))
import population  # noqa: E402  (needs the path above)

SEED = 20200701  # fixed, so a failure reproduces; logged below
N = 20_000
TRACE_DIR = REPO_ROOT / "deploy" / "replay" / "trace"


class SamplerTest(unittest.TestCase):
    tasks: list[population.Task]

    @classmethod
    def setUpClass(cls) -> None:
        print(f"seed {SEED}, {N} tasks", flush=True)
        cls.tasks = population.sample_tasks(N, SEED)

    def test_same_seed_same_tasks(self) -> None:
        self.assertEqual(population.sample_tasks(500, SEED), population.sample_tasks(500, SEED))

    def test_different_seed_different_tasks(self) -> None:
        a, b = population.sample_tasks(500, SEED), population.sample_tasks(500, SEED + 1)
        self.assertNotEqual([t.duration_seconds for t in a], [t.duration_seconds for t in b])
        self.assertNotEqual([t.submit_seconds for t in a], [t.submit_seconds for t in b])

    def test_fields(self) -> None:
        submits = [t.submit_seconds for t in self.tasks]
        self.assertEqual(submits, sorted(submits), "tasks must be sorted by submit time")
        self.assertEqual([t.task_id for t in self.tasks], list(range(N)))
        allowed_workloads = set(population.WORKLOAD_CLASSES) | {population.OTHER_WORKLOAD}
        for t in self.tasks:
            self.assertGreater(t.duration_seconds, 0)
            self.assertGreaterEqual(t.instances, 1)
            self.assertAlmostEqual(t.gpus, t.instances * t.plan_gpu_percent / 100, places=9)
            self.assertIn(t.gpu_type, population.GPU_TYPES)
            self.assertIn(t.workload, allowed_workloads)
            self.assertEqual(t.framework, population.FRAMEWORK_BY_WORKLOAD[t.workload])
            self.assertTrue(0.0 <= t.gpu_utilization <= 1.0)

    def test_duration_quantiles(self) -> None:
        # Published (read off NB In[14]): p10 26 s, p25 84 s, p50 500 s, p75 3,100 s, p90 11,000 s.
        # Tolerance 10% in value: the sampling error at n=20,000 is about 3%.
        durations = np.array([t.duration_seconds for t in self.tasks])
        for q, published in ((0.10, 26), (0.25, 84), (0.50, 500), (0.75, 3100), (0.90, 11000)):
            got = float(np.quantile(durations, q))
            self.assertLess(abs(got / published - 1), 0.10, f"duration p{q * 100:.0f}: {got:.0f} s vs {published} s")

    def test_gpu_request_cdf(self) -> None:
        # Published steps of the task GPU request CDF (read off NB In[21]); tolerance 1.5
        # points (sampling error about 0.35 points).
        gpus = np.array([t.gpus for t in self.tasks])
        for limit, published in ((0.10, 0.131), (0.25, 0.350), (0.50, 0.443), (1.0, 0.819),
                                 (2.0, 0.866), (4.0, 0.906), (6.0, 0.929)):
            got = float(np.mean(gpus <= limit + 1e-9))
            self.assertLess(abs(got - published), 0.015, f"P(GPUs <= {limit}) = {got:.3f} vs {published}")
        self.assertEqual(float(np.quantile(gpus, 0.5)), 1.0, "the median task asks for one GPU")

    def test_plan_gpu_above_one_share(self) -> None:
        # NB In[18]: 2.9% of tasks have instances asking for more than one GPU each.
        share = np.mean([t.plan_gpu_percent > 100 + 1e-9 for t in self.tasks])
        self.assertLess(abs(share - population.PLAN_GPU_ABOVE_ONE_SHARE), 0.006)

    def test_gpu_type_shares(self) -> None:
        total = sum(population.GPU_TYPE_TASK_SHARES.values())
        for gpu_type, published in population.GPU_TYPE_TASK_SHARES.items():
            got = np.mean([t.gpu_type == gpu_type for t in self.tasks])
            self.assertLess(abs(got - published / total), 0.012, f"{gpu_type}: {got:.3f}")

    def test_workload_shares(self) -> None:
        # README: about 9% tagged; the rest "other". Each class gets an equal share (assumption).
        other = np.mean([t.workload == population.OTHER_WORKLOAD for t in self.tasks])
        self.assertLess(abs(other - (1 - population.WORKLOAD_TAGGED_SHARE)), 0.01)
        each = population.WORKLOAD_TAGGED_SHARE / len(population.WORKLOAD_CLASSES)
        for w in population.WORKLOAD_CLASSES:
            got = np.mean([t.workload == w for t in self.tasks])
            self.assertLess(abs(got - each), 0.004, f"{w}: {got:.4f}")

    def test_utilization_below_request(self) -> None:
        # NB In[24] prints that 98.02% of tasks request more GPU than they use; the median
        # task uses a few percent of what it asks for.
        util = np.array([t.gpu_utilization for t in self.tasks])
        self.assertGreater(np.mean(util < 1.0), 0.98)
        self.assertLess(float(np.median(util)), 0.10)

    def test_arrival_rate(self) -> None:
        # The rate varies by hour and day, so count whole weeks: two weeks' worth of tasks at
        # 115,400 a week (NB In[9]); the Poisson error on one week's count is about 0.3%.
        hourly = population.weekly_hourly_rate()
        self.assertEqual(hourly.shape, (168,))
        self.assertAlmostEqual(float(hourly.sum()), population.TASKS_PER_WEEK, places=6)
        submits = population.sample_submit_seconds(np.random.Generator(np.random.PCG64(SEED)),
                                                   int(2.2 * population.TASKS_PER_WEEK))
        first_week = int(np.sum(submits < population.SECONDS_PER_WEEK))
        self.assertLess(abs(first_week / population.tasks_per_week() - 1), 0.02, f"{first_week} in week 1")
        # Hours 10-11 (a published peak) get clearly more tasks than hours 3-4 (the trough),
        # and weekdays more than the weekend, as in NB In[9] and In[10].
        hours = (submits[submits < 2 * population.SECONDS_PER_WEEK] // 3600).astype(int)
        hour_of_day, day = hours % 24, (hours // 24) % 7
        peak, trough = np.sum((hour_of_day == 10) | (hour_of_day == 11)), np.sum((hour_of_day == 3) | (hour_of_day == 4))
        self.assertGreater(peak / trough, 1.8, f"peak {peak} vs trough {trough}")
        self.assertGreater(np.sum(day == 2), 1.2 * np.sum(day == 6), "Tuesday vs Saturday")


def write_tar_gz(directory: pathlib.Path, csv_text: str) -> pathlib.Path:
    path = directory / "spec.tar.gz"
    data = csv_text.encode()
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo("pai_machine_spec.csv")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return path


class MachineSpecTest(unittest.TestCase):
    def test_real_spec(self) -> None:
        machines = population.load_machine_spec(TRACE_DIR / "pai_machine_spec.tar.gz")
        self.assertEqual(len(machines), 1897)
        self.assertEqual(sum(m.cap_gpu for m in machines), 6742)
        self.assertEqual(population.gpus_by_type(machines),
                         {"MISC": 2240, "P100": 1596, "V100M32": 1080, "T4": 994, "V100": 832})
        self.assertEqual(population.machines_by_type(machines)["CPU"], 83)

    def test_header_matches_columns(self) -> None:
        header = (TRACE_DIR / "pai_machine_spec.header").read_text().strip().split(",")
        self.assertEqual(tuple(header), population.MACHINE_SPEC_COLUMNS)

    def assert_rejected(self, csv_text: str, *words: str) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            for path in (write_tar_gz(pathlib.Path(tmp), csv_text), pathlib.Path(tmp) / "spec.csv"):
                if path.suffix == ".csv":
                    path.write_text(csv_text)
                with self.assertRaises(ValueError) as caught:
                    population.load_machine_spec(path)
                for word in words:
                    self.assertIn(word, str(caught.exception))

    def test_wrong_column_count(self) -> None:
        self.assert_rejected("m1,T4,96,512,2\nm2,T4,96,512\n", "line 2", "expected 5 columns", "found 4")

    def test_negative_gpus(self) -> None:
        self.assert_rejected("m1,T4,96,512,-2\n", "line 1", "cap_gpu", "negative")

    def test_not_a_number(self) -> None:
        self.assert_rejected("m1,V100,ninety-six,512,8\n", "cap_cpu", "not a number")

    def test_unknown_gpu_type(self) -> None:
        self.assert_rejected("m1,A100,96,512,8\n", "unknown gpu_type", "A100")

    def test_duplicate_machine(self) -> None:
        self.assert_rejected("m1,T4,96,512,2\nm1,T4,96,512,2\n", "m1", "twice")

    def test_empty(self) -> None:
        self.assert_rejected("", "no machines")

    def test_truncated_archive(self) -> None:
        real = (TRACE_DIR / "pai_machine_spec.tar.gz").read_bytes()
        with tempfile.TemporaryDirectory() as tmp:
            path = pathlib.Path(tmp) / "cut.tar.gz"
            path.write_bytes(real[: len(real) // 2])
            with self.assertRaises(ValueError) as caught:
                population.load_machine_spec(path)
            self.assertIn("cut.tar.gz", str(caught.exception))

    def test_garbled_archive(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = pathlib.Path(tmp) / "garbled.tar.gz"
            path.write_bytes(gzip.compress(b"\x00\xffnot a tar archive at all" * 40))
            with self.assertRaises(ValueError) as caught:
                population.load_machine_spec(path)
            self.assertIn("not a readable tar archive", str(caught.exception))

    def test_missing_file(self) -> None:
        with self.assertRaises(ValueError) as caught:
            population.load_machine_spec(TRACE_DIR / "no_such_spec.tar.gz")
        self.assertIn("no such file", str(caught.exception))


if __name__ == "__main__":
    unittest.main(verbosity=2)
