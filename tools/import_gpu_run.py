#!/usr/bin/env python3
"""Files one GPU run of `.gpu/measure` as a dated measurement set under testdata/gpu/.

    tools/import_gpu_run.py RESULTS [--sweep SWEEP ...] [--commit SHA] [--data testdata/gpu]

RESULTS is the folder a `.gpu/measure suite kernels steps [memcheck]` call wrote (its
results.tar.gz and summary.txt, as the device tool brings them back); SWEEP, the folder of the
same session's `.gpu/measure suite -- --mappings` call (default: RESULTS/m where it exists).
A sweep run in parts (`-- --mappings --only IDS` in calls of their own, when one call's time
does not hold all rows) is given as one --sweep per part: the parts must come from one device,
with the same CSV header and no row in two parts, and are joined in the order given (their
rows, their device.json's ids, their gpu_bench.txt reports).
The set goes to <data>/<device slug>/<date>_<commit>/, named by the run's device.json (slug and
date) and the commit whose build was measured (default: this checkout's HEAD), under the names
the calibration test, tools/gpu_table.py and tools/fit_cost_model.py read
(testdata/gpu/README.md):

  run/device.json, run/stitch.csv     -> device.json, gpu_bench.csv (gpu_bench --out-dir
                                          names its CSV stitch.csv)
  stitch_kernels.tsv (Nsight Compute)  -> stitch_kernels_ncu.tsv, where it has every row run;
                                          else stitch_kernels_cupti.tsv, from gpu_bench.csv's
                                          kernel times (CUPTI), one decimal
  stitch_ncu.csv                       -> stitch_kernels_ncu_raw.csv
  inductor_kernels.tsv, jax_kernels.tsv -> torch_compile_kernels.tsv, jax_jit_kernels.tsv
  steps.json, steps.txt                -> torch_steps.json, torch_steps.txt
  ncu.csv (an ncu=IDS part)            -> ncu_rows.csv
  gpu_bench.txt, loader_check.txt, memcheck_*.txt, summary.txt: as they are
  SWEEP's run/mappings.csv, gpu_bench.txt -> mappings.csv, mappings.txt

and writes comparison.tsv: per row, stitch's kernel time, torch.compile's and jax.jit's, and
the two speedups, from the one-decimal times of those files. An existing set is never
replaced, a sweep measured on another device is refused, and a file over 2 MB (the checkout
travels to GPU machines under a size limit) is left out and named. Exit status: 0 filed, 1 the
run cannot be filed as asked (a line says why).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import pathlib
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
MAX_FILE_BYTES = 2 * 1024 * 1024

# (name in the measure script's results, name in the set), copied as they are where present.
RENAMES = (
    ("run/device.json", "device.json"),
    ("run/stitch.csv", "gpu_bench.csv"),
    ("gpu_bench.txt", "gpu_bench.txt"),
    ("loader_check.txt", "loader_check.txt"),
    ("summary.txt", "summary.txt"),
    ("stitch_ncu.csv", "stitch_kernels_ncu_raw.csv"),
    ("inductor_kernels.tsv", "torch_compile_kernels.tsv"),
    ("jax_kernels.tsv", "jax_jit_kernels.tsv"),
    ("steps.json", "torch_steps.json"),
    ("steps.txt", "torch_steps.txt"),
    ("memcheck_suite.txt", "memcheck_suite.txt"),
    ("memcheck_steps.txt", "memcheck_steps.txt"),
    ("ncu.csv", "ncu_rows.csv"),
)
SWEEP_RENAMES = (("run/mappings.csv", "mappings.csv"), ("gpu_bench.txt", "mappings.txt"))

# The plans' kernel-time columns, as the calibration reads them, and gpu_bench.csv's CUPTI
# columns they come from where Nsight Compute measured nothing.
KERNEL_COLUMNS = (("stitch_us", "stitch_kernel_us"), ("xla_model_plan_us", "baseline_kernel_us"),
                  ("inductor_model_plan_us", "inductor_kernel_us"))


class ImportError_(Exception):
    """Why the run cannot be filed; printed as one line."""


def unpack(folder: pathlib.Path, into: pathlib.Path) -> None:
    """Unpacks folder/results.tar.gz into `into`, with folder/summary.txt beside it."""
    archive = folder / "results.tar.gz"
    if not archive.is_file():
        raise ImportError_(f"{folder}: no results.tar.gz (the measure script's results)")
    try:
        with tarfile.open(archive) as tar:
            members = tar.getmembers()
            for m in members:
                # Only plain files and folders inside `into`: the archive came from another
                # machine.
                if not (m.isfile() or m.isdir()) or m.name.startswith("/") or \
                        ".." in pathlib.PurePosixPath(m.name).parts:
                    raise ImportError_(f"{archive}: refusing member {m.name!r}")
            # The checks above are what the "data" filter does where this Python has it.
            safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            tar.extractall(into, members=members, **safe)
    except (tarfile.TarError, OSError) as e:
        raise ImportError_(f"{archive}: cannot unpack: {e}") from None
    summary = folder / "summary.txt"
    if summary.is_file():
        (into / "summary.txt").write_bytes(summary.read_bytes())


def read_device(results: pathlib.Path) -> dict:
    path = results / "run" / "device.json"
    try:
        device = json.loads(path.read_text(encoding="utf-8"))
    except OSError:
        raise ImportError_(f"no run/device.json in the results: the suite part did not run "
                           "on a GPU") from None
    except ValueError as e:
        raise ImportError_(f"run/device.json: not JSON ({e})") from None
    if not isinstance(device, dict) or not re.fullmatch(r"[a-z0-9_]+", str(device.get("slug"))):
        raise ImportError_("run/device.json: no device slug")
    if not re.match(r"\d{4}-\d{2}-\d{2}", str(device.get("date", ""))):
        raise ImportError_("run/device.json: no date (YYYY-MM-DD ...)")
    return device


def join_sweeps(parts: list[tuple[pathlib.Path, pathlib.Path]], into: pathlib.Path) -> None:
    """Writes into/run/{device.json,mappings.csv} and into/gpu_bench.txt, the sweep the parts
    make together (see the module's text). Each part is (the folder given, where it was
    unpacked); refusals name the folder given."""
    devices = []
    for given, part in parts:
        try:
            devices.append(read_device(part))
        except ImportError_ as e:
            raise ImportError_(f"sweep part {given}: {e}") from None
    for (given, _), device in zip(parts[1:], devices[1:]):
        if device["slug"] != devices[0]["slug"]:
            raise ImportError_(f"sweep part {given} ran on {device['slug']}, the first part "
                               f"on {devices[0]['slug']}")
    header, rows, ids = None, [], []
    for (given, part), device in zip(parts, devices):
        path = part / "run" / "mappings.csv"
        if not path.is_file():
            raise ImportError_(f"sweep part {given} holds no run/mappings.csv")
        lines = path.read_text(encoding="utf-8").splitlines()
        if not lines:
            raise ImportError_(f"sweep part {given}: run/mappings.csv is empty")
        if header is not None and lines[0] != header:
            raise ImportError_(f"sweep part {given}: run/mappings.csv has another header")
        header = lines[0]
        part_ids = [i for i in device.get("ids", []) if isinstance(i, int)]
        overlap = sorted(set(part_ids) & set(ids))
        if overlap:
            raise ImportError_(f"sweep part {given} swept row {overlap[0]} again")
        ids += part_ids
        rows += [line for line in lines[1:] if line.strip()]
    (into / "run").mkdir(parents=True)
    joined = dict(devices[0], ids=ids)
    (into / "run" / "device.json").write_text(json.dumps(joined, indent=1) + "\n",
                                              encoding="utf-8")
    (into / "run" / "mappings.csv").write_text("\n".join([header] + rows) + "\n",
                                               encoding="utf-8")
    reports = [(part / "gpu_bench.txt").read_bytes() for _, part in parts
               if (part / "gpu_bench.txt").is_file()]
    (into / "gpu_bench.txt").write_bytes(b"".join(reports))


def head_commit() -> str:
    result = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "--short=7", "HEAD"],
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise ImportError_("--commit not given and this checkout's HEAD is unknown")
    return result.stdout.strip()


def tsv_rows(path: pathlib.Path, header: bool) -> list[list[str]]:
    lines = [line.rstrip("\r").split("\t")
             for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return lines[1:] if header else lines


def ncu_covers(results: pathlib.Path, ids: set[int]) -> bool:
    """Whether Nsight Compute's per-plan times (stitch_kernels.tsv) hold every row run."""
    path = results / "stitch_kernels.tsv"
    if not path.is_file():
        return False
    found = set()
    for fields in tsv_rows(path, header=True):
        try:
            if all(float(v) > 0 for v in fields[1:4]):
                found.add(int(fields[0]))
        except (ValueError, IndexError):
            return False
    return bool(ids) and ids <= found


def cupti_kernel_times(gpu_bench_csv: pathlib.Path) -> str:
    """stitch_kernels_cupti.tsv from gpu_bench.csv's kernel times (CUPTI), one decimal."""
    if not gpu_bench_csv.is_file():
        raise ImportError_("no run/stitch.csv in the results: gpu_bench did not finish")
    out = io.StringIO()
    out.write("id\t" + "\t".join(name for name, _ in KERNEL_COLUMNS) + "\tstitch_kernel_count\n")
    with gpu_bench_csv.open(encoding="utf-8", newline="") as f:
        for number, row in enumerate(csv.DictReader(f), start=2):
            try:
                times = [float(row[column]) for _, column in KERNEL_COLUMNS]
                out.write(f"{int(row['id'])}\t" + "\t".join(f"{t:.1f}" for t in times) +
                          f"\t{int(row['stitch_kernels'])}\n")
            except (KeyError, TypeError, ValueError):
                raise ImportError_(f"run/stitch.csv line {number}: no kernel times (CUPTI "
                                   "did not record this run)") from None
    return out.getvalue()


def one_decimal(path: pathlib.Path, header: bool) -> dict[int, float]:
    """id -> the time in the second column, as its file writes it."""
    times = {}
    for fields in tsv_rows(path, header):
        try:
            times[int(fields[0])] = float(fields[1])
        except (ValueError, IndexError):
            continue
    return times


def comparison(set_dir: pathlib.Path, stitch_file: str) -> str | None:
    """comparison.tsv: stitch's, torch.compile's and jax.jit's kernel times and the speedups,
    or None without the frameworks' times."""
    torch_file, jax_file = set_dir / "torch_compile_kernels.tsv", set_dir / "jax_jit_kernels.tsv"
    if not torch_file.is_file() or not jax_file.is_file():
        return None
    stitch = one_decimal(set_dir / stitch_file, header=True)
    torch, jax = one_decimal(torch_file, header=False), one_decimal(jax_file, header=False)
    def shown(us: float | None) -> str:
        return f"{us:.1f}" if us else "-"

    def speedup(other: float | None, s: float) -> str:
        return f"{other / s:.2f}" if other and s > 0 else "-"

    out = io.StringIO()
    out.write("id\tstitch_us\ttorch_compile_us\tjax_jit_us\tvs_torch_compile\tvs_jax_jit\n")
    for row_id, s in sorted(stitch.items()):
        t, j = torch.get(row_id), jax.get(row_id)
        out.write(f"{row_id}\t{shown(s)}\t{shown(t)}\t{shown(j)}\t{speedup(t, s)}\t"
                  f"{speedup(j, s)}\n")
    return out.getvalue()


def copy(source: pathlib.Path, target: pathlib.Path, left_out: list[str]) -> bool:
    if not source.is_file():
        return False
    if source.stat().st_size > MAX_FILE_BYTES:
        left_out.append(f"{source.name} ({source.stat().st_size} bytes, over 2 MB)")
        return False
    target.write_bytes(source.read_bytes())
    return True


def file_run(results: pathlib.Path, sweep: pathlib.Path | None, commit: str,
             data: pathlib.Path) -> pathlib.Path:
    device = read_device(results)
    set_dir = data / device["slug"] / f"{device['date'][:10]}_{commit[:7]}"
    if set_dir.exists():
        raise ImportError_(f"{set_dir} exists: a set is never replaced")
    if sweep is not None:
        sweep_device = read_device(sweep)
        if sweep_device["slug"] != device["slug"]:
            raise ImportError_(f"the sweep ran on {sweep_device['slug']}, the suite on "
                               f"{device['slug']}")
        if not (sweep / "run" / "mappings.csv").is_file():
            raise ImportError_("the sweep's results hold no run/mappings.csv")
    # Written aside and moved into place whole, so a run that cannot be filed leaves nothing.
    stage = results.parent / "set"
    stage.mkdir()
    left_out: list[str] = []
    for source, target in RENAMES:
        copy(results / source, stage / target, left_out)
    ids = {i for i in device.get("ids", []) if isinstance(i, int)}
    if ncu_covers(results, ids):
        stitch_file = "stitch_kernels_ncu.tsv"
        copy(results / "stitch_kernels.tsv", stage / stitch_file, left_out)
    else:
        stitch_file = "stitch_kernels_cupti.tsv"
        times = cupti_kernel_times(results / "run" / "stitch.csv")
        (stage / stitch_file).write_text(times, encoding="utf-8")
    table = comparison(stage, stitch_file)
    if table is not None:
        (stage / "comparison.tsv").write_text(table, encoding="utf-8")
    for source, target in SWEEP_RENAMES if sweep is not None else ():
        copy(sweep / source, stage / target, left_out)
    swept = (stage / "mappings.csv").exists()
    set_dir.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(stage), str(set_dir))
    print(f"filed {set_dir} ({stitch_file}" + (", with the mapping sweep" if swept else "") + ")")
    for name in left_out:
        print(f"  left out: {name}")
    return set_dir


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("results", type=pathlib.Path)
    parser.add_argument("--sweep", type=pathlib.Path, action="append", default=None,
                        help="the sweep's results folder (default: RESULTS/m where it exists); "
                             "once per part of a sweep run in parts")
    parser.add_argument("--commit", default=None,
                        help="the commit whose build was measured (default: HEAD)")
    parser.add_argument("--data", type=pathlib.Path, default=REPO_ROOT / "testdata" / "gpu")
    args = parser.parse_args()
    try:
        commit = args.commit or head_commit()
        if not re.fullmatch(r"[0-9a-f]{7,40}", commit):
            raise ImportError_(f"--commit {commit!r} is not a commit hash")
        sweep_folders = args.sweep or []
        if not sweep_folders and (args.results / "m" / "results.tar.gz").is_file():
            sweep_folders = [args.results / "m"]
        with tempfile.TemporaryDirectory(prefix="import_gpu_run.") as tmp:
            results = pathlib.Path(tmp) / "results"
            unpack(args.results, results)
            sweep = None
            if sweep_folders:
                parts = [pathlib.Path(tmp) / f"sweep_part{n + 1}"
                         for n in range(len(sweep_folders))]
                for folder, part in zip(sweep_folders, parts):
                    unpack(folder, part)
                sweep = pathlib.Path(tmp) / "sweep"
                join_sweeps(list(zip(sweep_folders, parts)), sweep)
            file_run(results, sweep, commit, args.data)
    except ImportError_ as e:
        print(f"import_gpu_run: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
