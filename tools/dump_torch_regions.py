#!/usr/bin/env python3
"""Write the HLO of every region backend="stitch" compiles for a model of the GPU step bench,
at the benchmark's sizes, on the CPU.

  dump_torch_regions.py --daemon ADDRESS --model NAME --out DIR [--target sm_90] [--small]

The model (bench/gpu/torch_step_bench.py's table) takes one training step under
torch.compile with stitch.torch.InductorStitchBackend, Inductor compiling for the CPU with
its layout optimization on, as on a GPU when a graph has convolutions: every region is
lowered and compiled by the daemon at ADDRESS, row-major, and over channels-last storage
where Inductor lays its tensors out so. Each compiled HLO module is written to DIR as
NN_<module name>.hlo, in the order compiled. No stitched kernel runs: the executor refuses
every launch, so every region keeps Inductor's kernels and the step runs as Inductor compiled
it. `stitchctl compile --no-cubin --target TARGET FILE` then prints a region's plan and the
cost model's times; testdata/torch_regions/ holds what this wrote for the GroupNorm block and
the ResNet BasicBlock and Bottleneck.

Needs PyTorch 2.x with Inductor (.venv-torch2/, tools/requirements-torch2.txt) and the stitch
package: installed (`pip install ./python`), or this repository's python/ with
STITCH_CLIENT_LIBRARY naming a built libstitch_client.so.
"""

import argparse
import pathlib
import sys
from typing import Any, List

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "bench" / "gpu"))

import torch  # noqa: E402

import stitch  # noqa: E402
import stitch.torch  # noqa: E402
import torch_step_bench  # noqa: E402  (the benchmark's model table)


class RecordingClient(stitch.Client):
    """A Client that keeps the HLO of every module it is asked to compile."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.modules: List[str] = []

    def compile(self, subgraph: Any, target: Any = None, outer_parameters: Any = ()) -> Any:
        if isinstance(subgraph, str):
            self.modules.append(subgraph)
        return super().compile(subgraph, target, outer_parameters)


class RefusingExecutor(stitch.torch.Executor):
    """Compiles for `target` and launches nothing: every region stays Inductor's."""

    def __init__(self, target: str) -> None:
        self.target = target

    def device_target(self, device: torch.device) -> str:
        return self.target

    def check(self, target: str, device: torch.device) -> None:
        return None

    def run(self, kernels: Any, inputs: Any) -> Any:
        raise RuntimeError("regions are compiled here, not run")


def module_name(hlo: str) -> str:
    first = hlo.split("\n", 1)[0].split()
    return first[1] if len(first) > 1 and first[0] == "HloModule" else "module"


def main(argv: Any = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--daemon", required=True, help="stitchd address (unix:///path)")
    parser.add_argument("--model", required=True, choices=sorted(torch_step_bench.SPEC_BY_NAME))
    parser.add_argument("--out", required=True, help="folder the HLO files are written to")
    parser.add_argument("--target", default="sm_90")
    parser.add_argument("--small", action="store_true", help="the benchmark's small sizes")
    args = parser.parse_args(argv)
    from torch._inductor import config

    module, inputs = torch_step_bench.SPEC_BY_NAME[args.model].build(torch, args.small)
    client = RecordingClient(args.daemon, compile_deadline_ms=600000)
    backend = stitch.torch.InductorStitchBackend(stitch.torch.StitchBackend(
        client=client, fallback="inductor", executors={"cpu": RefusingExecutor(args.target)}))
    torch._dynamo.reset()
    with config.patch(layout_optimization=True):
        compiled = torch.compile(module, backend=backend)
        out = compiled(*inputs)
        out.float().sum().backward()
    out_dir = pathlib.Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    for k, hlo in enumerate(client.modules, 1):
        path = out_dir / ("%02d_%s.hlo" % (k, module_name(hlo)))
        path.write_text(hlo)
        print(path)
    reasons = {"%s (%s)" % (c.winner, c.reason) for c in backend.report.choices}
    print("%d modules; the regions' choices: %s" % (
        len(client.modules), ", ".join(sorted(reasons))), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
