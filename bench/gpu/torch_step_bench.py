#!/usr/bin/env python3
"""Training-step time of PyTorch models: eager, torch.compile's default backend (Inductor), and
torch.compile(backend=stitch.torch.backend), on one CUDA GPU, measured side by side.

  torch_step_bench.py --daemon unix:///run/stitchd/stitchd.sock [--repeats 50] [--json OUT]

Needs PyTorch 2.x with CUDA, a running stitchd for the GPU's target, and the stitch package
(with STITCH_CLIENT_LIBRARY in a source checkout). Models: a BERT-base encoder layer (batch
32, sequence 128) and a ResNet BasicBlock at ResNet-50's first stage (batch 32, 64 channels,
56x56), in training mode, forward and backward. Each stitched step's output and gradients are
checked against eager's before timing. Prints a table of median step times (CUDA events)
and the ratios; exits 2 where there is no CUDA device or torch.compile.
"""

import argparse
import copy
import json
import pathlib
import statistics
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "python"))


def models(torch):
    from torch_models import BertLayer, resnet_block
    mask = torch.ones(32, 128, device="cuda")
    bert = BertLayer(hidden=768, heads=12, ffn=3072, dropout=0.0).cuda()
    block = resnet_block(64).cuda()
    return [("bert_base_layer", bert, [torch.randn(32, 128, 768, device="cuda"), mask]),
            ("resnet_basic_block", block, [torch.randn(32, 64, 56, 56, device="cuda")])]


def step(model, inputs):
    out = model(*inputs)
    out.float().sum().backward()
    return out


def time_steps(torch, model, inputs, warmup, repeats):
    for _ in range(warmup):
        step(model, inputs)
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step(model, inputs)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--daemon", default="unix:///run/stitchd/stitchd.sock")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    import torch
    if not torch.cuda.is_available() or not hasattr(torch, "compile"):
        print("torch_step_bench: needs PyTorch 2.x with a CUDA device (torch %s, cuda %s)" %
              (torch.__version__, torch.cuda.is_available()))
        return 2
    import stitch
    import stitch.torch
    backend = stitch.torch.StitchBackend(client=stitch.Client(args.daemon,
                                                              compile_deadline_ms=600000))
    rows = []
    for name, model, inputs in models(torch):
        eager = model
        inductor = torch.compile(copy.deepcopy(model))
        stitched_model = copy.deepcopy(model)
        stitched = torch.compile(stitched_model, backend=backend)
        expected, got = step(eager, inputs), step(stitched, inputs)
        error = float((got - expected).abs().max() / expected.abs().max().clamp(min=1))
        for p in list(eager.parameters()) + list(stitched_model.parameters()):
            p.grad = None
        ms = {mode: time_steps(torch, m, inputs, args.warmup, args.repeats)
              for mode, m in (("eager", eager), ("inductor", inductor), ("stitch", stitched))}
        rows.append({"model": name, "eager_ms": ms["eager"], "inductor_ms": ms["inductor"],
                     "stitch_ms": ms["stitch"], "max_rel_error": error,
                     "stitched_regions": sum(r.stitched for r in backend.report.regions),
                     "fallbacks": dict(backend.report.fallbacks)})
    device = torch.cuda.get_device_name()
    print("device: %s, torch %s, median of %d steps" % (device, torch.__version__, args.repeats))
    print("%-20s %10s %12s %10s %14s %16s" % ("model", "eager ms", "inductor ms", "stitch ms",
                                               "eager/stitch", "inductor/stitch"))
    for r in rows:
        print("%-20s %10.3f %12.3f %10.3f %14.2f %16.2f" % (
            r["model"], r["eager_ms"], r["inductor_ms"], r["stitch_ms"],
            r["eager_ms"] / r["stitch_ms"], r["inductor_ms"] / r["stitch_ms"]))
    print(backend.report.summary())
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"device": device, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
