#!/usr/bin/env python3
"""tools/import_gpu_run.py on measure-script results rebuilt from committed sets.

  python3 tests/bench/import_gpu_run_test.py

The H200 set 2026-11-28_afdf996 was filed by hand from `.gpu/measure suite kernels steps
memcheck`, in which Nsight Compute measured nothing. Its files are packed back under the names
the measure script gives them (results.tar.gz, summary.txt beside it), with a mapping sweep's
results in m/, and imported again: every file must come back byte for byte under the set's
names, including the two the tool writes itself (stitch_kernels_cupti.tsv from gpu_bench.csv's
CUPTI times, comparison.tsv from the three kernel-time files), tools/gpu_table.py must print
the same table from both, and the sweep must sit beside them. The H100 set 2026-11-27_5526c12,
whose Nsight Compute times cover every row, must be filed with stitch_kernels_ncu.tsv instead.
Bad runs are refused with one line and nothing filed: a set that exists, a sweep from another
device, results without device.json, an archive member outside its folder, sweep parts that
sweep a row twice; a file over 2 MB is left out and named. A sweep in two parts is filed as
one.
"""

from __future__ import annotations

import io
import json
import pathlib
import subprocess
import sys
import tarfile
import tempfile

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
TOOL = REPO_ROOT / "tools" / "import_gpu_run.py"
TABLE = REPO_ROOT / "tools" / "gpu_table.py"
H200_SET = REPO_ROOT / "testdata" / "gpu" / "h200" / "2026-11-28_afdf996"
H100_SET = REPO_ROOT / "testdata" / "gpu" / "h100_80gb_hbm3" / "2026-11-27_5526c12"

# The set's name of each file, and the measure script's.
MEASURE_NAMES = {
    "device.json": "run/device.json",
    "gpu_bench.csv": "run/stitch.csv",  # gpu_bench --out-dir's name
    "gpu_bench.txt": "gpu_bench.txt",
    "loader_check.txt": "loader_check.txt",
    "torch_compile_kernels.tsv": "inductor_kernels.tsv",
    "jax_jit_kernels.tsv": "jax_kernels.tsv",
    "torch_steps.json": "steps.json",
    "torch_steps.txt": "steps.txt",
    "memcheck_suite.txt": "memcheck_suite.txt",
    "memcheck_steps.txt": "memcheck_steps.txt",
}
# Copied back as they are; the tool writes the last two itself.
FILED_AS_IS = tuple(MEASURE_NAMES) + ("summary.txt",)
WRITTEN = ("stitch_kernels_cupti.tsv", "comparison.tsv")
SWEEP_CSV = ("id,kernel,kernel_name,candidate,shipped,mapping,blocks,vector_width,waves,stretch,"
             "registers_planned,registers,instructions,planning_us,model_us,"
             "model_unstretched_us,kernel_us,matches,code,error\n"
             '16,0,stitch_k0_loop,-1,1,"128x1 x 18912, vector 4",18912,4,9.0,1.005,28,28,120,'
             '15.1,13.0,13.0,13.4,-,a9c7bb79d8fa228b,""\n')


def fail(message: str) -> None:
    print(f"FAIL: {message}")
    sys.exit(1)


def pack(folder: pathlib.Path, files: dict[str, bytes], summary: bytes | None = None,
         extra_member: str | None = None) -> None:
    """Writes folder/results.tar.gz holding `files` (measure-script names), as the device
    tool brings a run back, and summary.txt beside it."""
    folder.mkdir(parents=True)
    with tarfile.open(folder / "results.tar.gz", "w:gz") as tar:
        for name, data in list(files.items()) + ([(extra_member, b"x")] if extra_member else []):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    if summary is not None:
        (folder / "summary.txt").write_bytes(summary)


def measure_files(source: pathlib.Path, ncu_tsv: bytes) -> dict[str, bytes]:
    files = {MEASURE_NAMES[name]: (source / name).read_bytes()
             for name in MEASURE_NAMES if (source / name).exists()}
    files["stitch_kernels.tsv"] = ncu_tsv
    files["stitchd.log"] = b"not filed\n"
    files["kernels.err"] = b"not filed\n"
    return files


def sweep_files(device: bytes) -> dict[str, bytes]:
    return {"run/device.json": device, "run/mappings.csv": SWEEP_CSV.encode(),
            "gpu_bench.txt": b"| id | kernel | mapping |\n"}


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True)


def expect_refused(result: subprocess.CompletedProcess, message: str, data: pathlib.Path) -> None:
    if result.returncode != 1 or message not in result.stderr:
        fail(f"expected a refusal naming {message!r}, got rc {result.returncode}: "
             f"{result.stdout}{result.stderr}")
    filed = [p for p in data.rglob("*") if p.is_file()] if data.exists() else []
    if filed:
        fail(f"a refused run filed {filed}")


def check_schedule_bounds(tmp: pathlib.Path) -> None:
    """gpu_table.py --bounds: a row whose schedule must move more than its lower bound is named
    with those bytes, and the 80%-of-peak count uses them (the set predates the column)."""
    bounds = tmp / "bounds.csv"
    # #5 (76% of peak on its lower bound) as though it had to move 10% more: 83%.
    lower = {5: 402653184, 9: 541065216}
    bounds.write_text("id,lower_bound_bytes,schedule_bound_bytes\n"
                      f"5,{lower[5]},{int(lower[5] * 1.1)}\n9,{lower[9]},{lower[9]}\n")
    plain, bounded = (subprocess.run([sys.executable, str(TABLE), str(H200_SET), *extra],
                                     capture_output=True, text=True, check=True).stdout
                      for extra in ([], ["--bounds", str(bounds)]))
    if "Rows above 64 MB at ≥ 80% of peak: 3 of 16." not in plain or "again" in plain:
        fail(f"gpu_table.py without bounds: {plain[-400:]}")
    if "Rows above 64 MB at ≥ 80% of peak: 4 of 16." not in bounded or \
            "#5 442.9 MB (83% of peak)" not in bounded or "#9 " in bounded.split("again")[-1]:
        fail(f"gpu_table.py --bounds: {bounded[-400:]}")
    bad = tmp / "bad_bounds.csv"
    bad.write_text("id,schedule_bound_bytes\n5,many\n")
    refused = subprocess.run([sys.executable, str(TABLE), str(H200_SET), "--bounds", str(bad)],
                             capture_output=True, text=True)
    if refused.returncode != 1 or f"{bad}:2: expected an id" not in refused.stderr:
        fail(f"gpu_table.py took a malformed --bounds file: {refused.stderr!r}")


def check_sweep_in_parts(tmp: pathlib.Path, out: pathlib.Path, device: bytes) -> None:
    """A sweep run in two calls (rows 16, then 24) is filed as one: its rows and reports in
    the order given; parts that sweep a row twice are refused, naming the folder given."""
    header, row16 = SWEEP_CSV.splitlines()
    row24 = row16.replace("16,0,", "24,0,", 1)

    def part(name: str, ids: list[int], rows: list[str], report: bytes) -> pathlib.Path:
        folder = tmp / name
        part_device = dict(json.loads(device), ids=ids)
        pack(folder, {"run/device.json": json.dumps(part_device).encode(),
                      "run/mappings.csv": "\n".join([header] + rows + [""]).encode(),
                      "gpu_bench.txt": report})
        return folder

    first = part("sweep_16", [16], [row16], b"#16 done\n")
    second = part("sweep_24", [24], [row24], b"#24 done\n")
    data = tmp / "d_parts"
    result = run(str(out), "--sweep", str(first), "--sweep", str(second), "--commit", "afdf996",
                 "--data", str(data))
    filed = data / "h200" / "2026-11-28_afdf996"
    if result.returncode != 0:
        fail(f"a sweep in two parts was not filed: {result.stderr!r}")
    if (filed / "mappings.csv").read_text() != "\n".join([header, row16, row24, ""]):
        fail(f"the parts' rows were not joined: {(filed / 'mappings.csv').read_text()!r}")
    if (filed / "mappings.txt").read_bytes() != b"#16 done\n#24 done\n":
        fail("the parts' reports were not joined in order")
    again = part("sweep_16_again", [16], [row16], b"#16 again\n")
    expect_refused(run(str(out), "--sweep", str(first), "--sweep", str(again), "--commit",
                       "afdf996", "--data", str(tmp / "d_overlap")),
                   f"sweep part {again} swept row 16 again", tmp / "d_overlap")


def main() -> int:
    no_ncu = b"id\tstitch_us\txla_model_plan_us\tinductor_model_plan_us\tstitch_kernels\n"
    with tempfile.TemporaryDirectory(prefix="import_gpu_run_test.") as tmp_name:
        tmp = pathlib.Path(tmp_name)
        device = (H200_SET / "device.json").read_bytes()
        out = tmp / "out"
        pack(out, measure_files(H200_SET, no_ncu), (H200_SET / "summary.txt").read_bytes())
        pack(out / "m", sweep_files(device))

        data = tmp / "data"
        result = run(str(out), "--commit", "afdf996", "--data", str(data))
        print(result.stdout, result.stderr)
        if result.returncode != 0:
            fail(f"the import exited with {result.returncode}")
        filed = data / "h200" / "2026-11-28_afdf996"
        names = sorted(p.name for p in filed.iterdir())
        expected = sorted(FILED_AS_IS + WRITTEN + ("mappings.csv", "mappings.txt"))
        if names != expected:
            fail(f"filed {names}, expected {expected}")
        for name in FILED_AS_IS + WRITTEN:
            if (filed / name).read_bytes() != (H200_SET / name).read_bytes():
                fail(f"{name} differs from the committed set's")
        if (filed / "mappings.csv").read_text() != SWEEP_CSV:
            fail("mappings.csv differs from the sweep's")
        tables = [subprocess.run([sys.executable, str(TABLE), str(d)], capture_output=True,
                                 text=True, check=True).stdout for d in (filed, H200_SET)]
        if tables[0] != tables[1] or "| 24 |" not in tables[0]:
            fail("gpu_table.py prints another table from the imported set")
        check_schedule_bounds(tmp)

        # The same run again, and runs that cannot be filed: nothing is written.
        before = sorted((p.name, p.read_bytes()) for p in filed.iterdir())
        again = run(str(out), "--commit", "afdf996", "--data", str(data))
        if again.returncode != 1 or "exists: a set is never replaced" not in again.stderr:
            fail(f"a second import was not refused: {again.stderr!r}")
        if sorted((p.name, p.read_bytes()) for p in filed.iterdir()) != before:
            fail("a refused import changed the set")
        other = json.loads(device)
        other["slug"] = "h100_80gb_hbm3"
        pack(tmp / "other_sweep", sweep_files(json.dumps(other).encode()))
        expect_refused(run(str(out), "--sweep", str(tmp / "other_sweep"), "--commit", "afdf996",
                           "--data", str(tmp / "d1")),
                       "the sweep ran on h100_80gb_hbm3, the suite on h200", tmp / "d1")
        check_sweep_in_parts(tmp, out, device)
        files = measure_files(H200_SET, no_ncu)
        del files["run/device.json"]
        pack(tmp / "no_device", files)
        expect_refused(run(str(tmp / "no_device"), "--commit", "afdf996", "--data",
                           str(tmp / "d2")), "no run/device.json", tmp / "d2")
        pack(tmp / "escape", measure_files(H200_SET, no_ncu), extra_member="../escaped.txt")
        expect_refused(run(str(tmp / "escape"), "--commit", "afdf996", "--data",
                           str(tmp / "d3")), "refusing member '../escaped.txt'", tmp / "d3")
        if (tmp / "escaped.txt").exists():
            fail("an archive member was written outside its folder")

        # Nsight Compute's times for every row: filed as stitch_kernels_ncu.tsv; a file over
        # 2 MB is left out and named.
        files = measure_files(H100_SET, (H100_SET / "stitch_kernels_ncu.tsv").read_bytes())
        files["steps.txt"] = b"x" * (3 * 1024 * 1024)
        pack(tmp / "h100", files)
        result = run(str(tmp / "h100"), "--commit", "5526c12", "--data", str(tmp / "d4"))
        print(result.stdout, result.stderr)
        filed = tmp / "d4" / "h100_80gb_hbm3" / "2026-11-27_5526c12"
        if result.returncode != 0 or "left out: steps.txt" not in result.stdout:
            fail("the H100 run was not filed, or its 3 MB steps.txt not named as left out")
        if (filed / "stitch_kernels_ncu.tsv").read_bytes() != \
                (H100_SET / "stitch_kernels_ncu.tsv").read_bytes():
            fail("stitch_kernels_ncu.tsv differs from the committed set's")
        if (filed / "stitch_kernels_cupti.tsv").exists() or (filed / "torch_steps.txt").exists():
            fail("the H100 run was filed with CUPTI times or with the oversized file")
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
