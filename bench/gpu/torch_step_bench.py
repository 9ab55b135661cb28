#!/usr/bin/env python3
"""Training-step time of PyTorch models on one CUDA GPU: eager, Inductor (torch.compile's
default backend) and stitch on Inductor (backend="stitch"), side by side.

  torch_step_bench.py --daemon unix:///run/stitchd/stitchd.sock [--json OUT] [--models a,b]
                      [--dtype f32|bf16] [--repeats 50] [--budget-s 240] [--small]

Needs PyTorch 2.x with CUDA, a running stitchd for the GPU's target, and the stitch package
(with STITCH_CLIENT_LIBRARY in a source checkout); exits 2 where there is no CUDA device or
no torch.compile. Replaced regions launch from C++ (the stitch::launch operator) where
STITCH_TORCH_LAUNCH_LIBRARY names a built libstitch_torch_launch.so (build/loader/), else from
Python; each row's ``launch_paths`` counts the stitched calls by path.

Models (torch_models.py), in the order they run by default, the most wanted first; each is a
training step (forward, then backward of a weighted sum of the output) in training mode, with
the gradient of the block's input as a block inside a network needs it, dropout off:

  bert_base_layer                BERT-base encoder layer: batch 32, sequence 128, hidden 768
  gpt2_block                     GPT-2 small block: batch 8, sequence 1024, hidden 768, 12 heads
  groupnorm_block                GroupNorm, SiLU, 3x3 conv, twice, residual: batch 8, 128
                                 channels, 32 groups, 128x128 (a diffusion VAE decoder's width)
  resnet50_bottleneck            torchvision's Bottleneck at ResNet-50's first stage: batch 32,
                                 256 channels, width 64, 56x56
  bert_base_layer_varying_batch  the BERT-base layer with a batch that varies (below)
  resnet_basic_block             torchvision's BasicBlock: batch 32, 64 channels, 56x56

``--small`` runs the tests' sizes instead (a quick check of the whole run).

For each model, before anything is timed: one eager step gives the reference; the first step
of ``torch.compile(model)`` (Inductor) and of ``torch.compile(model, backend=...)`` with an
``InductorStitchBackend`` whose ``StitchBackend`` talks to ``--daemon`` (what
``backend="stitch"`` is, with this daemon) compiles them, and their output and every gradient
(the input's and each parameter's) must be within the tolerance of eager's: 1e-3 relative in
f32, 5e-2 in bf16 (the measure of compiler/reference/src/tensor_compare.cc: relative to the
larger of |expected|, the expected tensor's RMS and 1). A stitched step that misses is checked
again two ways: against Inductor's step where Inductor's is off eager's too, and against the
same step in float64, which it passes if every tensor is at most twice as far from it as
eager's float32 step is, plus a tenth of the tolerance (relative RMS error: a ReLU input within
rounding of zero goes the other way under another summation order and moves one gradient
element by a whole weight). A stitched step that misses all three fails its row (printed as
FAILED with the worst tensor), not the run; Inductor's own error is reported.

Columns:
  eager ms, inductor ms, stitch ms   GPU time per step: CUDA events around blocks of 10 steps
                                     issued back to back (they overlap as in training), the
                                     block's time / 10, median over the blocks (--repeats
                                     steps in all, after --warmup)
  ind/stitch                         Inductor's time over stitch's: above 1, stitch is faster
  host ind, host stitch              host time per step: perf_counter around one step's call,
                                     issued while the GPU is kept busy (torch.cuda._sleep for
                                     at least 50 ms, and 4x the step, longer where the host
                                     time reaches it) so the CPU never waits on it; the median
                                     of --host-repeats steps. A step that waited anyway (it
                                     synchronizes, or filled the launch queue) shows its host
                                     time with "!", a bound from below
  replaced, kept                     the regions stitch's kernels replaced, and those left to
                                     Inductor, from the backend's report.choices; the lines
                                     under the row list each with its timed gain (Inductor's
                                     time over stitch's for the region), the reason it was
                                     kept, and the sum of the replaced regions' timed savings

bert_base_layer_varying_batch: the stitch-on-Inductor model is stepped once at each of
--warm-batches (two sizes, so Dynamo recompiles with a symbolic batch), then at each size of
--vary-batches (32, 28, 24, 20 by default: one power-of-two bucket, 17..32, so one bundle per
region serves them all); a separate torch.compile(..., dynamic=False) of the same model, with
a backend of its own, compiles each size exactly. Each size's output and gradients are checked
against eager for both; its time is the varying model's step over the fixed-shape model's
(same method as above, fixed and varying alternating), per size and their geometric mean.
"Within 5%" is the target (a geomean of 1.05 or less); it is reported, not enforced. The row
also says whether any size recompiled after the warm steps.

Rows are printed as each model finishes (the header first), and --json is rewritten after
each, so a run stopped by a timeout keeps the rows it finished.

Time: --budget-s (240 by default, 0 for none) bounds the run. A model starts only when its
estimate, scaled by how the models already run compared with theirs, fits in what is left;
one that does not is listed as skipped. The estimates are assumptions, not measurements (this
version has not run on a GPU yet): per model, eager and timing 10 s; Inductor's compile of the
forward and backward 25 s for a Transformer block and 15 s for a conv block; stitch on Inductor
the same again (Inductor's kernels for the regions it keeps come from its kernel cache) plus
2 s a region (the daemon's compile, overlapped, and Inductor's compile of the region alone
for the timing, about 18 regions in a Transformer block, 10 in a conv block): bert_base_layer
and gpt2_block 70 s, groupnorm_block and resnet50_bottleneck 45 s, resnet_basic_block 40 s,
and bert_base_layer_varying_batch 240 s (six stitch compiles of the layer: two warm sizes and
four fixed shapes). The default run therefore fits the first four models in 240 s and reaches
the varying batch only when the compiles go faster than assumed; run it alone with
``--models bert_base_layer_varying_batch``. Each row's JSON has the compile seconds per
backend, to correct these estimates.
"""

import argparse
import contextlib
import copy
import dataclasses
import gc
import json
import math
import pathlib
import statistics
import sys
import time
import traceback
from typing import Any, Callable, List, Tuple

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "python"))

#: Relative error (tensor_compare's measure) a compiled step may have against eager's.
TOLERANCE = {"f32": 1e-3, "bf16": 5e-2}
#: Steps per CUDA-event block in the step timing.
BLOCK = 10
#: The least time the GPU is kept busy while one step's host time is measured, in ms.
HOST_BUSY_MS = 50.0
#: A released model still holding more than this (MiB) gets a note under its row.
HELD_NOTE_MIB = 64.0


# -- the models ----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Spec:
    """One benchmark model: ``build(torch, small, batch)`` returns (module, inputs) on the CPU
    (inputs are made from a seeded generator, so every backend and device sees the same),
    ``grad_inputs`` the inputs whose gradient the step computes, ``estimate_s`` the assumed
    seconds of its row on an H100 (see the module's docstring), ``varying`` for the
    varying-batch row."""

    name: str
    build: Callable[..., Tuple[Any, List[Any]]]
    estimate_s: float
    grad_inputs: Tuple[int, ...] = (0,)
    varying: bool = False


def _generator(torch, seed):
    return torch.Generator().manual_seed(seed)


def build_bert(torch, small, batch=None, seed=0):
    from torch_models import BertLayer
    b, s, h, heads, ffn = (2, 16, 64, 4, 128) if small else (32, 128, 768, 12, 3072)
    b = batch or b
    torch.manual_seed(seed)
    module = BertLayer(hidden=h, heads=heads, ffn=ffn, dropout=0.0)
    g = _generator(torch, seed + 1)
    mask = torch.ones(b, s)
    mask[b // 2:, s - s // 4:] = 0  # padding in the second half of the batch
    return module, [torch.randn(b, s, h, generator=g), mask]


def build_gpt2(torch, small, batch=None, seed=0):
    from torch_models import Gpt2Block
    b, s, h, heads = (2, 16, 64, 4) if small else (8, 1024, 768, 12)
    torch.manual_seed(seed)
    module = Gpt2Block(hidden=h, heads=heads, dropout=0.0)
    return module, [torch.randn(batch or b, s, h, generator=_generator(torch, seed + 1))]


def build_groupnorm(torch, small, batch=None, seed=0):
    from torch_models import GroupNormBlock
    b, c, groups, hw = (2, 32, 8, 8) if small else (8, 128, 32, 128)
    torch.manual_seed(seed)
    module = GroupNormBlock(channels=c, groups=groups)
    return module, [torch.randn(batch or b, c, hw, hw, generator=_generator(torch, seed + 1))]


def build_bottleneck(torch, small, batch=None, seed=0):
    from torch_models import bottleneck_block
    b, c, width, hw = (2, 32, 8, 8) if small else (32, 256, 64, 56)
    torch.manual_seed(seed)
    module = bottleneck_block(c, width)
    return module, [torch.randn(batch or b, c, hw, hw, generator=_generator(torch, seed + 1))]


def build_basic(torch, small, batch=None, seed=0):
    from torch_models import resnet_block
    b, c, hw = (2, 16, 8) if small else (32, 64, 56)
    torch.manual_seed(seed)
    module = resnet_block(c)
    return module, [torch.randn(batch or b, c, hw, hw, generator=_generator(torch, seed + 1))]


SPECS = [
    Spec("bert_base_layer", build_bert, 70),
    Spec("gpt2_block", build_gpt2, 70),
    Spec("groupnorm_block", build_groupnorm, 45),
    Spec("resnet50_bottleneck", build_bottleneck, 45),
    Spec("bert_base_layer_varying_batch", build_bert, 240, varying=True),
    Spec("resnet_basic_block", build_basic, 40),
]
SPEC_BY_NAME = {s.name: s for s in SPECS}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--daemon", default="unix:///run/stitchd/stitchd.sock")
    parser.add_argument("--json", help="rewritten with every row done so far")
    parser.add_argument("--models", default=",".join(s.name for s in SPECS),
                        help="comma-separated, run in this order (default: all, as listed)")
    parser.add_argument("--dtype", choices=sorted(TOLERANCE), default="f32",
                        help="bf16: the forward under torch.autocast('cuda', torch.bfloat16)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=50, help="timed steps per backend")
    parser.add_argument("--host-repeats", type=int, default=10)
    parser.add_argument("--vary-batches", help="default 32,28,24,20 (16,14,12,10 with --small)")
    parser.add_argument("--warm-batches", help="default 30,26 (15,13 with --small)")
    parser.add_argument("--budget-s", type=float, default=240.0)
    parser.add_argument("--small", action="store_true",
                        help="the tests' sizes (and batches 16, 14, 12, 10 after 15, 13)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    names = [n for n in args.models.split(",") if n]
    unknown = [n for n in names if n not in SPEC_BY_NAME]
    if unknown or not names:
        parser.error("unknown model %s; the models are %s" % (
            ", ".join(unknown) or "(none given)", ", ".join(SPEC_BY_NAME)))
    args.specs = [SPEC_BY_NAME[n] for n in names]
    # One power-of-two bucket each (17..32; 9..16 for the small BERT layer).
    vary, warm = ("16,14,12,10", "15,13") if args.small else ("32,28,24,20", "30,26")
    try:
        args.vary = [int(b) for b in (args.vary_batches or vary).split(",")]
        args.warm = [int(b) for b in (args.warm_batches or warm).split(",")]
    except ValueError:
        parser.error("--vary-batches and --warm-batches take comma-separated integers")
    if len(args.warm) != 2 or min(args.vary + args.warm) < 2:
        parser.error("two warm batches, and batches of 2 or more")
    if set(args.warm) & set(args.vary):
        parser.error("the warm batches must differ from the varying ones (a size compiled "
                     "exactly by the warm step would be served by that graph)")
    if args.repeats < 1 or args.host_repeats < 1:
        parser.error("--repeats and --host-repeats of 1 or more")
    return args


# -- one step, and the checks --------------------------------------------------------------------
def _aligned(torch, expected, actual):
    """(expected, actual, its finite elements, the floor) in float64 on the CPU, the floor the
    larger of the expected tensor's RMS and 1; or the error itself where the tensors are not
    compared element by element: inf for another shape or a non-finite value where the other is
    finite, 0 where nothing is finite."""
    e, a = expected.detach().double().cpu(), actual.detach().double().cpu()
    if e.shape != a.shape:
        return math.inf
    finite = torch.isfinite(e)
    if not torch.equal(finite, torch.isfinite(a)):
        return math.inf
    if not finite.any():
        return 0.0
    return e, a, finite, max(1.0, float(e[finite].pow(2).mean().sqrt()))


def max_relative_error(torch, expected, actual):
    """tensor_compare.cc's measure: the largest |actual - expected| relative to the larger of
    |expected|, the expected tensor's RMS and 1; inf for another shape or a non-finite value
    where the other is finite."""
    aligned = _aligned(torch, expected, actual)
    if not isinstance(aligned, tuple):
        return aligned
    e, a, finite, floor = aligned
    return float(((a - e).abs() / e.abs().clamp(min=floor))[finite].max())


def relative_rms_error(torch, expected, actual):
    """The RMS of actual - expected over the finite elements, relative to the larger of the
    expected tensor's RMS and 1 (max_relative_error's floor); inf for another shape or a
    non-finite value where the other is finite."""
    aligned = _aligned(torch, expected, actual)
    if not isinstance(aligned, tuple):
        return aligned
    e, a, finite, floor = aligned
    return float((a - e)[finite].pow(2).mean().sqrt()) / floor


class Step:
    """One training step of ``model`` (a module, or what torch.compile made of it) whose
    parameters are ``module``'s: forward on ``inputs`` (under ``autocast``), backward of the
    output weighted by ``weights``. Gradients are set to None first, as an optimizer's
    zero_grad does."""

    def __init__(self, torch, model, module, inputs, grad_inputs, weights, autocast):
        self.torch, self.model, self.module, self.autocast = torch, model, module, autocast
        self.inputs = [x.detach().clone().requires_grad_(i in grad_inputs)
                       for i, x in enumerate(inputs)]
        self.grad_inputs = [self.inputs[i] for i in grad_inputs]
        self.params = [p for _, p in sorted(module.named_parameters())]
        self.names = (["input %d" % i for i in grad_inputs] +
                      [n for n, _ in sorted(module.named_parameters())])
        self.weights = weights
        self.out = None

    def __call__(self):
        for t in self.params + self.grad_inputs:
            t.grad = None
        with self.autocast():
            out = self.model(*self.inputs)
        (out.to(self.weights.dtype) * self.weights).sum().backward()
        self.out = out

    def results(self):
        """The last step's output and gradients, in the order of ``names``."""
        return self.out.detach(), [t.grad for t in self.grad_inputs + self.params]


def compare(torch, reference, step):
    """(worst relative error, the tensor it is in) of ``step``'s last results against
    ``reference``'s."""
    expected_out, expected_grads = reference.results()
    out, grads = step.results()
    worst = (max_relative_error(torch, expected_out, out), "output")
    for name, e, a in zip(step.names, expected_grads, grads):
        if (e is None) != (a is None):
            return math.inf, "gradient of %s (present in one step only)" % name
        if e is not None:
            worst = max(worst, (max_relative_error(torch, e, a), "gradient of " + name))
    return worst


# Where a stitched step is off eager's beyond the tolerance, it still passes if it is as close
# to the same step in float64 as eager's own float32 step is: its relative RMS error against
# the float64 step at most twice eager's plus a tenth of the tolerance, on every tensor (the
# rule PyTorch's accuracy harness applies to compiled models). A ReLU or a comparison whose
# input lies within rounding of its threshold goes the other way under any other summation
# order, and one such element moves a gradient by a whole weight: the H200 ran
# resnet_basic_block's step with one gradient element off eager's by 0.194 (relative), where
# Inductor's step, another time, was off by the same 0.194. A kernel that computes wrong
# values moves the RMS error by far more than that one element does.
FLOAT64_RMS_FACTOR = 2.0
FLOAT64_RMS_SLACK = 0.1  # of the tolerance


def float64_step(torch, module, inputs, grad_inputs, weights):
    """The reference step in float64: ``module``'s copy and the floating inputs and weights
    converted, without autocast."""
    wide = copy.deepcopy(module).double()
    wide_inputs = [x.double() if x.is_floating_point() else x for x in inputs]
    step = Step(torch, wide, wide, wide_inputs, grad_inputs, weights.double(),
                contextlib.nullcontext)
    step()
    return step


def _results(step):
    out, grads = step.results()
    return [("output", out)] + [("gradient of " + n, g)
                                for n, g in zip(step.names, grads) if g is not None]


def float64_check(torch, wide, eager, stitched, tolerance, worst_name):
    """Whether ``stitched`` is as close to the float64 step ``wide`` as ``eager`` is (the rule
    above), with what the row reports: the tensor nearest its bound, its two RMS errors and
    the bound, and how many elements of ``worst_name`` (the tensor furthest off eager's) are
    off eager's beyond the tolerance."""
    nearest, off = None, None
    for (name, w), (_, e), (_, a) in zip(_results(wide), _results(eager), _results(stitched)):
        eager_rms = relative_rms_error(torch, w, e)
        stitch_rms = relative_rms_error(torch, w, a)
        bound = FLOAT64_RMS_FACTOR * eager_rms + FLOAT64_RMS_SLACK * tolerance
        margin = stitch_rms / bound if bound > 0 else math.inf
        if nearest is None or margin > nearest[0]:
            nearest = (margin, name, stitch_rms, eager_rms, bound)
        aligned = _aligned(torch, e, a) if name == worst_name else None
        if isinstance(aligned, tuple):
            ed, ad, finite, floor = aligned
            off = (int((((ad - ed).abs() / ed.abs().clamp(min=floor))[finite] > tolerance).sum()),
                   ed.numel())
    margin, name, stitch_rms, eager_rms, bound = nearest
    return margin <= 1.0, {"tensor": name, "stitch_rms": stitch_rms, "eager_rms": eager_rms,
                           "bound": bound, "elements_off": off[0] if off else None,
                           "elements": off[1] if off else None}


# -- timing --------------------------------------------------------------------------------------
def _sync(torch, device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def step_ms(torch, step, device, warmup, repeats):
    """Time per step: blocks of BLOCK steps back to back, the block's time / BLOCK, median over
    the blocks; CUDA events on a CUDA device, the host clock after a sync elsewhere. Fewer than
    BLOCK repeats (a run under compute-sanitizer, which checks rather than times) make one
    block of that many steps."""
    block = min(BLOCK, repeats)
    for _ in range(warmup):
        step()
    _sync(torch, device)
    times = []
    for _ in range(max(1, repeats // block)):
        if device.type == "cuda":
            start, end = (torch.cuda.Event(enable_timing=True),
                          torch.cuda.Event(enable_timing=True))
            start.record()
            for _ in range(block):
                step()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / block)
        else:
            begin = time.perf_counter()
            for _ in range(block):
                step()
            times.append((time.perf_counter() - begin) * 1e3 / block)
    return statistics.median(times)


_CYCLES_PER_MS = {}


def _cycles_per_ms(torch, device):
    """torch.cuda._sleep's cycles per ms on ``device``, measured once."""
    if device not in _CYCLES_PER_MS:
        cycles = 10 ** 7
        torch.cuda._sleep(cycles // 10)  # loads the kernel
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        _CYCLES_PER_MS[device] = cycles / max(start.elapsed_time(end), 1e-3)
    return _CYCLES_PER_MS[device]


def host_ms(torch, step, device, repeats, gpu_ms):
    """(host ms per step, whether the host waited): perf_counter around one step's call,
    issued while the GPU is busy with a sleep of max(HOST_BUSY_MS, 4 x gpu_ms), so the CPU
    does not wait for it; the median of ``repeats``. A host time that reaches the sleep's
    length is measured again behind a sleep 4 times as long (twice at most); one that still
    does waited for the GPU (a synchronization, or a full launch queue) and is a bound from
    below. Off CUDA it is the step's wall time."""
    cuda = device.type == "cuda" and hasattr(torch.cuda, "_sleep")
    busy_ms = max(HOST_BUSY_MS, 4 * gpu_ms)
    for attempt in range(3):
        times = []
        for _ in range(repeats):
            _sync(torch, device)
            if cuda:
                torch.cuda._sleep(int(busy_ms * _cycles_per_ms(torch, device)))
            begin = time.perf_counter()
            step()
            times.append((time.perf_counter() - begin) * 1e3)
            _sync(torch, device)
        ms = statistics.median(times)
        waited = bool(cuda and ms >= 0.9 * busy_ms)
        if not waited:
            break
        busy_ms *= 4
    return ms, waited


# -- what the stitch backend chose ---------------------------------------------------------------
def choices(report):
    """``report.choices`` as JSON-able dicts, with each timed region's gain (Inductor's time
    over stitch's)."""
    out = []
    for c in report.choices:
        gain = c.inductor_seconds / c.stitched_seconds if c.stitched_seconds > 0 else None
        out.append({"region": c.region, "winner": c.winner, "reason": c.reason,
                    "decided_by": c.decided_by, "stitched_us": c.stitched_seconds * 1e6,
                    "inductor_us": c.inductor_seconds * 1e6, "gain": gain,
                    "detail": c.detail})
    return out


def choice_lines(chosen):
    """The lines under a row: the regions replaced with their gains, those kept and why."""
    replaced = [c for c in chosen if c["winner"] == "stitch"]
    kept = [c for c in chosen if c["winner"] != "stitch"]

    def gain(c):
        return "%.3gx" % c["gain"] if c["gain"] is not None else "untimed"

    lines = []
    if replaced:
        saved = sum(c["inductor_us"] - c["stitched_us"] for c in replaced)
        lines.append("  replaced (%d, %.1f us timed savings a step): %s" % (
            len(replaced), saved, ", ".join("%s %s" % (c["region"], gain(c)) for c in replaced)))
    if kept:
        lines.append("  kept by Inductor (%d): %s" % (len(kept), ", ".join(
            "%s %s %s" % (c["region"], c["reason"], gain(c)) for c in kept)))
    return lines


# -- the rows ------------------------------------------------------------------------------------
@dataclasses.dataclass
class Backends:
    """How a row compiles its model: ``inductor(module)`` and ``stitch(module, dynamic)``
    return (callable, report or None). The benchmark's are torch.compile's; the tests stand in
    cheaper ones."""

    inductor: Callable[[Any], Tuple[Any, Any]]
    stitch: Callable[..., Tuple[Any, Any]]


def torch_compile_backends(torch, client, executors=None):
    """Inductor, and stitch on Inductor with ``client`` (and ``executors``, StitchBackend's: by
    default the CUDA one): a fresh InductorStitchBackend for each compile, so that Dynamo
    caches no graph of one for another (its backend guard)."""
    import stitch.torch

    def inductor(module):
        return torch.compile(module), None

    def stitched(module, dynamic=None):
        backend = stitch.torch.InductorStitchBackend(
            stitch.torch.StitchBackend(client=client, executors=executors))
        return torch.compile(module, backend=backend, dynamic=dynamic), backend.report

    return Backends(inductor, stitched)


def _autocast(torch, args, device):
    if args.dtype == "bf16":
        return lambda: torch.autocast(device.type, torch.bfloat16)
    return contextlib.nullcontext


def _weights(torch, shape, device, seed):
    return torch.randn(*shape, generator=_generator(torch, seed + 2)).to(device)


def _first_step(step):
    """Runs the step that compiles; returns its seconds."""
    begin = time.perf_counter()
    step()
    return time.perf_counter() - begin


def _matches_inductor(torch, row, steps):
    """Whether a stitched step off eager's is within the tolerance of Inductor's step, which is
    off eager's too. stitch replaces regions of Inductor's graph, so where the two compiled
    steps share a difference from eager (cuDNN picks other convolution algorithms for them, in
    TF32 by default), Inductor's step is the reference for what stitch's kernels computed."""
    if row["inductor_error"] <= row["tolerance"]:
        return False
    error, where = compare(torch, steps["inductor"], steps["stitch"])
    row["stitch_vs_inductor_error"], row["stitch_vs_inductor_worst"] = error, where
    return error <= row["tolerance"]


def run_model(torch, spec, backends, args, device):
    """One model's row: check the compiled steps against eager, then time the three."""
    module, inputs = spec.build(torch, args.small, seed=args.seed)
    module = module.to(device).train()
    inputs = [x.to(device) for x in inputs]
    autocast = _autocast(torch, args, device)
    with torch.no_grad(), autocast():
        shape = module(*inputs).shape
    weights = _weights(torch, shape, device, args.seed)
    # Each backend starts from the same weights (and batch-norm statistics).
    modules = {"eager": module, "inductor": copy.deepcopy(module),
               "stitch": copy.deepcopy(module)}
    inductor, _ = backends.inductor(modules["inductor"])
    stitched, report = backends.stitch(modules["stitch"])
    models = {"eager": module, "inductor": inductor, "stitch": stitched}
    steps = {k: Step(torch, models[k], modules[k], inputs, spec.grad_inputs, weights, autocast)
             for k in models}
    row = {"model": spec.name, "kind": "step", "dtype": args.dtype,
           "shapes": [list(x.shape) for x in inputs], "compile_s": {}}
    for k in ("eager", "inductor", "stitch"):
        row["compile_s"][k] = _first_step(steps[k])
    tolerance = TOLERANCE[args.dtype]
    for k in ("inductor", "stitch"):
        error, where = compare(torch, steps["eager"], steps[k])
        row["%s_error" % k], row["%s_worst" % k] = error, where
    row["tolerance"] = tolerance
    if report is not None:
        row["choices"] = choices(report)
        row["fallbacks"] = dict(report.fallbacks)
        row["layout_copies"] = report.layout_copies
    if not row["stitch_error"] <= tolerance and not _matches_inductor(torch, row, steps):
        wide = float64_step(torch, module, inputs, spec.grad_inputs, weights)
        close, row["float64"] = float64_check(torch, wide, steps["eager"], steps["stitch"],
                                              tolerance, row["stitch_worst"])
        del wide
        if not close:
            row["failed"] = "stitch's %s is off by %.3g (tolerance %.3g)" % (
                row["stitch_worst"], row["stitch_error"], tolerance)
            return row
    calls = report.stitched_calls if report is not None else 0
    steps["stitch"]()
    row["stitched_calls_per_step"] = (report.stitched_calls - calls) if report is not None else 0
    for k in ("eager", "inductor", "stitch"):
        row["%s_ms" % k] = step_ms(torch, steps[k], device, args.warmup, args.repeats)
    for k in ("eager", "inductor", "stitch"):
        row["host_%s_ms" % k], row["host_%s_waited" % k] = host_ms(
            torch, steps[k], device, args.host_repeats, row["%s_ms" % k])
    if report is not None:
        row["fallbacks"] = dict(report.fallbacks)  # with any that a timed step counted
        row["layout_copies"] = report.layout_copies
        row["launch_paths"] = report.launch_paths
    return row


def geomean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def run_varying(torch, spec, backends, args, device):
    """The varying-batch row: the stitch-on-Inductor model over --vary-batches after the warm
    steps, each size against a fixed-shape compile of the same model."""
    module, inputs = spec.build(torch, args.small, batch=max(args.vary + args.warm),
                                seed=args.seed)
    module = module.to(device).train()
    inputs = [x.to(device) for x in inputs]
    autocast = _autocast(torch, args, device)
    with torch.no_grad(), autocast():
        full_shape = tuple(module(*inputs).shape)
    weights = _weights(torch, full_shape, device, args.seed)
    varying_module, fixed_module = copy.deepcopy(module), copy.deepcopy(module)
    varying, varying_report = backends.stitch(varying_module)
    fixed, fixed_report = backends.stitch(fixed_module, dynamic=False)

    def steps_at(batch):
        sliced = [x[:batch] for x in inputs]
        w = weights[:batch]
        return {"eager": Step(torch, module, module, sliced, spec.grad_inputs, w, autocast),
                "varying": Step(torch, varying, varying_module, sliced, spec.grad_inputs, w,
                                autocast),
                "fixed": Step(torch, fixed, fixed_module, sliced, spec.grad_inputs, w, autocast)}

    row = {"model": spec.name, "kind": "varying_batch", "dtype": args.dtype,
           "warm_batches": args.warm, "batches": args.vary, "tolerance": TOLERANCE[args.dtype],
           "compile_s": {"warm": [], "fixed": []}, "per_batch": []}
    _vary(torch, args, device, row, steps_at, varying_report)
    if varying_report is not None:  # what the varying model chose, failed or not
        row["choices"] = choices(varying_report)
        row["fallbacks"] = dict(varying_report.fallbacks)
        row["new_sizes"] = dict(varying_report.new_sizes)
    if fixed_report is not None:
        row["fixed_fallbacks"] = dict(fixed_report.fallbacks)
    return row


def _vary(torch, args, device, row, steps_at, varying_report):
    """Fills the varying-batch row: the warm steps, the checks at each size, then the
    timings; on a check that fails, sets row["failed"] and stops."""
    tolerance = row["tolerance"]
    for batch in args.warm:
        at = steps_at(batch)
        at["eager"]()
        row["compile_s"]["warm"].append(_first_step(at["varying"]))
        error, where = compare(torch, at["eager"], at["varying"])
        if not error <= tolerance:
            row["failed"] = "batch %d (warm): stitch's %s is off by %.3g (tolerance %.3g)" % (
                batch, where, error, tolerance)
            return
    graphs = _graph_count(varying_report)
    per_batch = {}
    for batch in args.vary:
        at = steps_at(batch)
        at["eager"]()
        row["compile_s"]["fixed"].append(_first_step(at["fixed"]))
        at["varying"]()
        for k in ("varying", "fixed"):
            error, where = compare(torch, at["eager"], at[k])
            if not error <= tolerance:
                row["failed"] = "batch %d: the %s model's %s is off by %.3g (tolerance %.3g)" % (
                    batch, k, where, error, tolerance)
                return
        per_batch[batch] = at
    row["recompiled"] = _graph_count(varying_report) - graphs
    for batch in args.vary:
        at = per_batch[batch]
        fixed_ms = step_ms(torch, at["fixed"], device, args.warmup, args.repeats)
        varying_ms = step_ms(torch, at["varying"], device, args.warmup, args.repeats)
        row["per_batch"].append({"batch": batch, "fixed_ms": fixed_ms, "varying_ms": varying_ms,
                                 "ratio": varying_ms / fixed_ms})
    row["geomean_ratio"] = geomean([b["ratio"] for b in row["per_batch"]])


def _graph_count(report):
    """The graphs with regions a stitch backend compiled so far (forward and backward each
    count), from its regions' names ("forward2.region0")."""
    if report is None:
        return 0
    return len({r.name.split(".")[0] for r in report.regions})


# -- the table and the JSON ----------------------------------------------------------------------
HEADER = "%-30s %9s %11s %9s %10s %9s %11s %8s %5s" % (
    "model", "eager ms", "inductor ms", "stitch ms", "ind/stitch", "host ind", "host stitch",
    "replaced", "kept")


def format_row(row):
    """The row's lines for the table: the row, then the lines under it."""
    if row.get("skipped"):
        return ["%-30s skipped: %s" % (row["model"], row["skipped"])]
    if row.get("failed"):
        lines = ["%-30s FAILED: %s" % (row["model"], row["failed"])]
        return lines + _notes(row) + choice_lines(row.get("choices", []))
    if row["kind"] == "varying_batch":
        ratios = ", ".join("%d: %.3f" % (b["batch"], b["ratio"]) for b in row["per_batch"])
        lines = ["%-30s varying/fixed stitch step, batch %s; geomean %.3f (target 1.05)%s" % (
            row["model"], ratios, row["geomean_ratio"],
            "; recompiled %d graphs after the warm steps" % row["recompiled"]
            if row["recompiled"] else "")]
        lines += ["  batch %d: fixed %.3f ms, varying %.3f ms" % (
            b["batch"], b["fixed_ms"], b["varying_ms"]) for b in row["per_batch"]]
        return lines + _notes(row) + choice_lines(row.get("choices", []))
    chosen = row.get("choices", [])
    replaced = sum(1 for c in chosen if c["winner"] == "stitch")

    def host(k):
        return "%.3f%s" % (row["host_%s_ms" % k], "!" if row["host_%s_waited" % k] else "")

    lines = ["%-30s %9.3f %11.3f %9.3f %10.3f %9s %11s %8d %5d" % (
        row["model"], row["eager_ms"], row["inductor_ms"], row["stitch_ms"],
        row["inductor_ms"] / row["stitch_ms"], host("inductor"), host("stitch"), replaced,
        len(chosen) - replaced)]
    return lines + _notes(row) + choice_lines(chosen)


def _notes(row):
    """A line of what else a reader should know: Inductor off eager, fallbacks, copies, and
    how the stitched calls launched (from C++ or Python)."""
    notes = []
    if "inductor_error" in row and not row["inductor_error"] <= row["tolerance"]:
        notes.append("Inductor's %s is off eager's by %.3g" % (row["inductor_worst"],
                                                               row["inductor_error"]))
    if "float64" in row and not row.get("failed"):
        f = row["float64"]
        notes.append("stitch's %s is off eager's by %.3g (%s of %s elements beyond the "
                     "tolerance), and as close to a float64 step as eager's: at worst its %s, "
                     "relative RMS error %.2g against eager's %.2g (bound %.2g)" % (
                         row["stitch_worst"], row["stitch_error"], f["elements_off"],
                         f["elements"], f["tensor"], f["stitch_rms"], f["eager_rms"],
                         f["bound"]))
    if "stitch_vs_inductor_error" in row:
        notes.append("stitch's step is off Inductor's by %.3g (its %s)" % (
            row["stitch_vs_inductor_error"], row["stitch_vs_inductor_worst"]))
    for key, name in (("fallbacks", "fallbacks"), ("fixed_fallbacks", "fixed-shape fallbacks"),
                      ("new_sizes", "new sizes"), ("launch_paths", "stitched calls by path")):
        counts = {k: v for k, v in row.get(key, {}).items() if v}
        if counts:
            notes.append("%s %s" % (name, counts))
    if row.get("layout_copies"):
        notes.append("layout copies %d" % row["layout_copies"])
    memory = row.get("memory")
    if memory and (row.get("failed") or memory["held_after_release_mib"] - memory["before_mib"]
                   > HELD_NOTE_MIB):
        notes.append("memory: peak %.0f MiB, %.0f MiB held after its release (%.0f before)" % (
            memory["peak_mib"], memory["held_after_release_mib"], memory["before_mib"]))
    return ["  " + "; ".join(notes)] if notes else []


def write_json(path, meta, rows):
    """Rewrites ``path`` with everything so far (atomically: a reader sees one version)."""
    path = pathlib.Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(dict(meta, rows=rows), indent=2, default=str))
    tmp.replace(path)


class Budget:
    """Whether a model's estimate fits in what is left of ``seconds`` (0: no bound), each
    estimate scaled by the ratio of the time the models so far took to their estimates."""

    def __init__(self, seconds, clock=time.monotonic):
        self.seconds, self.clock = seconds, clock
        self.start = clock()
        self.estimated = self.actual = 0.0

    def scale(self):
        return self.actual / self.estimated if self.estimated else 1.0

    def fits(self, estimate):
        if not self.seconds:
            return True
        return self.clock() - self.start + estimate * self.scale() <= self.seconds

    def done(self, estimate, seconds):
        self.estimated += estimate
        self.actual += seconds

    def why_not(self, estimate):
        return "an estimated %.0f s (x%.2f, as the models so far ran) past what is left of " \
               "the %.0f s budget (%.0f s)" % (estimate * self.scale(), self.scale(),
                                              self.seconds,
                                              self.seconds - (self.clock() - self.start))


class DeviceMemory:
    """PyTorch's allocated bytes on a CUDA device, for each row: before the model, the peak
    while it ran, and what stays allocated once it was released. A model that leaves memory
    behind shows there before a later model fails its allocations."""

    def __init__(self, torch, device):
        self.cuda, self.device = torch.cuda, device

    def start(self):
        """Starts a row's peak; returns the bytes allocated now."""
        self.cuda.reset_peak_memory_stats(self.device)
        return self.cuda.memory_allocated(self.device)

    def peak(self):
        return self.cuda.max_memory_allocated(self.device)

    def allocated(self):
        return self.cuda.memory_allocated(self.device)


def _memory_row(memory, before):
    """The row's memory figures in MiB: before the model, its peak, and held after release."""
    mib = 1 << 20
    return {"before_mib": before / mib, "peak_mib": memory.peak() / mib,
            "held_after_release_mib": memory.allocated() / mib}


def run(torch, args, backends, device, meta, out=print, memory=None):
    """Runs ``args.specs`` in order; prints the header, then each row as it finishes, and
    rewrites --json after each. Returns the rows. ``memory``: a DeviceMemory (default on a
    CUDA device; none elsewhere), whose figures each row records."""
    rows = []
    budget = Budget(args.budget_s)
    if memory is None and device.type == "cuda":
        memory = DeviceMemory(torch, device)
    out(HEADER)
    for spec in args.specs:
        if not budget.fits(spec.estimate_s):
            row = {"model": spec.name, "skipped": budget.why_not(spec.estimate_s)}
        else:
            before = memory.start() if memory is not None else 0
            begin = time.monotonic()
            try:
                row = (run_varying if spec.varying else run_model)(torch, spec, backends, args,
                                                                   device)
            except Exception as e:  # a row that cannot run fails alone
                traceback.print_exc()
                row = {"model": spec.name, "failed": "%s: %s" % (type(e).__name__, e)}
            row["seconds"] = time.monotonic() - begin
            budget.done(spec.estimate_s, row["seconds"])
            _release(torch, device)
            if memory is not None:
                row["memory"] = _memory_row(memory, before)
        rows.append(row)
        for line in format_row(row):
            out(line)
        if args.json:
            write_json(args.json, meta, rows)
        sys.stdout.flush()
    return rows


def _release(torch, device):
    """Frees one model's graphs and memory before the next."""
    import torch._dynamo
    torch._dynamo.reset()
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def main(argv=None):
    args = parse_args(argv)
    import torch
    if not torch.cuda.is_available() or not hasattr(torch, "compile"):
        print("torch_step_bench: needs PyTorch 2.x with a CUDA device (torch %s, cuda %s)" %
              (torch.__version__, torch.cuda.is_available()))
        return 2
    import torch._dynamo
    import stitch
    # Each model compiles the same forward for several backends (and sizes): more graphs per
    # code object than Dynamo's default limit of 8, past which it would silently run eager.
    try:
        torch._dynamo.config.recompile_limit = 64
    except AttributeError:  # before PyTorch 2.6
        torch._dynamo.config.cache_size_limit = 64
    device = torch.device("cuda")
    client = stitch.Client(args.daemon, compile_deadline_ms=600000)
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "dtype": args.dtype, "repeats": args.repeats, "host_repeats": args.host_repeats,
            "small": args.small, "budget_s": args.budget_s,
            "estimates_s": {s.name: s.estimate_s for s in args.specs}}
    print("device: %s, torch %s, %s%s; step: median over blocks of %d of %d steps (CUDA "
          "events); host: median of %d steps issued behind a GPU sleep (! = it waited)" % (
              meta["device"], torch.__version__, args.dtype, ", small sizes" if args.small else
              "", min(BLOCK, args.repeats), args.repeats, args.host_repeats))
    sys.stdout.flush()
    rows = run(torch, args, torch_compile_backends(torch, client), device, meta)
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
