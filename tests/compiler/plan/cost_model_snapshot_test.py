#!/usr/bin/env python3
"""The calibration test's snapshot of prices (modelled_while_unchanged.csv), on a made-up set.

  python3 tests/compiler/plan/cost_model_snapshot_test.py

A plan whose code changed since a set measured it keeps its place in the set's figures at the
price a snapshot gave the measured code, and only while the snapshot still holds. The test
builds a set of two suite rows (gpu_bench.csv with the measured code digests) and a model of
this checkout where row 2's stitched plan has new code, then checks that:
- the snapshot's price is used for the changed plan, and the errors come out of it;
- a snapshot whose price for a plan still unchanged differs from the model's (the model
  changed since) is stale, and the changed plan is left out;
- a snapshot line whose code digest is not the one the set measured is not used;
- --snapshot's writer keeps the changed plan's line and prices the unchanged ones anew, and
  a malformed snapshot file is refused with its path and line.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import pathlib
import sys
import tempfile
import unittest
from unittest import mock

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def load_calibration():
    spec = importlib.util.spec_from_file_location(
        "cost_model_calibration_test", HERE / "cost_model_calibration_test.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["cost_model_calibration_test"] = module
    spec.loader.exec_module(module)
    return module


cal = load_calibration()

BENCH_HEADER = "id,stitch_code,baseline_code,inductor_code\n"
BENCH_ROWS = "1,s1,x1,i1\n2,s2old,x2,i2\n"


def model_of(prices: dict[tuple[int, str], float]) -> dict:
    rows: dict = {}
    for (row_id, plan), us in prices.items():
        rows.setdefault(row_id, cal.ModelRow(0, {})).us[plan] = us
    return rows


PRICES = {(1, "stitch"): 10.0, (1, "xla_model"): 12.0, (1, "inductor_model"): 11.0,
          (2, "stitch"): 20.0, (2, "xla_model"): 25.0, (2, "inductor_model"): 22.0}
CHANGED = {(2, "stitch"): "code s2old measured, s2new now"}


class SnapshotTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="cost_model_snapshot.")
        self.path = pathlib.Path(self.tmp.name) / "2026-01-01_abcdef0"
        self.path.mkdir()
        (self.path / "gpu_bench.csv").write_text(BENCH_HEADER + BENCH_ROWS, encoding="utf-8")
        self.entry = cal.MeasuredSet(self.path, "h200", "2026-01-01", "abcdef0")

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, lines: list[str]) -> None:
        text = ",".join(cal.SNAPSHOT_COLUMNS) + "\n" + "".join(line + "\n" for line in lines)
        (self.path / cal.SNAPSHOT_FILE).write_text(text, encoding="utf-8")

    def snapshot_lines(self, stitch2: float = 18.0, stitch1: float = 10.0,
                       code2: str = "s2old") -> list[str]:
        return [f"current,1,stitch,s1,{stitch1},aaaaaaa",
                "current,1,xla_model,x1,12,aaaaaaa",
                f"current,2,stitch,{code2},{stitch2},aaaaaaa",
                "current,2,xla_model,x2,25,aaaaaaa"]

    def test_a_changed_plan_keeps_its_place_at_the_snapshots_price(self):
        self.write(self.snapshot_lines())
        priced, note = cal.priced_while_unchanged(self.entry, model_of(PRICES), "current",
                                                  CHANGED)
        self.assertEqual(set(priced), {(2, "stitch")})
        self.assertEqual(priced[(2, "stitch")]["modelled_us"], 18.0)
        self.assertIn("1 changed plan(s)", note)
        # Another version's lines are not this one's.
        priced, _ = cal.priced_while_unchanged(self.entry, model_of(PRICES), "fit-4", CHANGED)
        self.assertEqual(priced, {})

    def test_a_stale_snapshot_leaves_the_changed_plan_out(self):
        self.write(self.snapshot_lines(stitch1=9.0))
        priced, note = cal.priced_while_unchanged(self.entry, model_of(PRICES), "current",
                                                  CHANGED)
        self.assertEqual(priced, {})
        self.assertIn("stale", note)
        self.assertIn("#1 stitch", note)

    def test_a_line_of_other_code_than_the_set_measured_is_not_used(self):
        self.write(self.snapshot_lines(code2="s2other"))
        priced, _ = cal.priced_while_unchanged(self.entry, model_of(PRICES), "current",
                                               CHANGED)
        self.assertEqual(priced, {})

    def test_the_figures_count_the_snapshots_price(self):
        self.write(self.snapshot_lines())
        measured = {1: (1, {"stitch": 10.0, "xla_model": 12.0, "inductor_model": 11.0}),
                    2: (2, {"stitch": 27.0, "xla_model": 25.0, "inductor_model": 22.0})}
        with mock.patch.object(cal, "read_measured", lambda _path: measured), \
                mock.patch.object(cal, "check_ids", lambda *_args: None), \
                mock.patch.object(cal, "report_frameworks", lambda *_args: None), \
                contextlib.redirect_stdout(io.StringIO()) as out:
            figures = cal.report_set(self.entry, model_of(PRICES), "model", CHANGED, "current")
        # Six plans, one of them (row 2's stitched, 27 us against the snapshot's 18) 50% over
        # its price: p90 interpolates half way between 0 and 0.5. Left out, it would be 0.
        self.assertIn("all 6 plans", out.getvalue())
        self.assertAlmostEqual(figures["p90_abs"], 0.25)
        self.assertIn("as priced at aaaaaaa", out.getvalue())

    def test_the_writer_keeps_changed_lines_and_reprices_the_rest(self):
        self.write(self.snapshot_lines())
        prices = dict(PRICES)
        written = cal.write_snapshot(self.entry, {"current": model_of(prices)}, CHANGED,
                                     "bbbbbbb")
        lines = cal.read_snapshot(self.entry)
        self.assertEqual(written, len(lines))
        by_key = {(r["id"], r["plan"]): r for r in lines}
        self.assertEqual(by_key[(2, "stitch")]["priced_at"], "aaaaaaa")
        self.assertEqual(by_key[(2, "stitch")]["modelled_us"], 18.0)
        self.assertEqual(by_key[(1, "inductor_model")]["priced_at"], "bbbbbbb")
        self.assertEqual(by_key[(1, "inductor_model")]["code"], "i1")
        self.assertEqual(len(lines), 6)

    def test_a_malformed_snapshot_is_refused(self):
        self.write(["current,1,stitch,s1,not-a-time,aaaaaaa"])
        with self.assertRaises(cal.DataError) as raised:
            cal.read_snapshot(self.entry)
        self.assertIn(cal.SNAPSHOT_FILE, str(raised.exception))
        self.assertIn("line 2", str(raised.exception))


if __name__ == "__main__":
    unittest.main(verbosity=2)
