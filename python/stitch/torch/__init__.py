"""PyTorch integration: stitched kernels for the memory-intensive parts of a model.

    import stitch.torch

    model = torch.compile(model, backend="stitch")               # PyTorch 2.x, on Inductor
    model = torch.compile(model, backend=stitch.torch.backend)   # PyTorch 2.x, on eager
    model = stitch.torch.optimize(model)                         # any PyTorch with functorch
    ...
    print(stitch.torch.inductor.report.summary())

``backend="stitch"`` (:data:`inductor`) is Inductor with stitch's kernels in the regions where
they are measured faster than Inductor's (see ``_inductor``); the others run stitch's kernels
wherever the daemon gives them, and PyTorch's eager kernels elsewhere.

AOTAutograd hands over the forward and the backward graph; in each, the elementwise,
broadcast, reduction, normalization, softmax, cast and layout ops are grouped into regions,
each region becomes one HLO signature, and the node's stitchd compiles it (or has it cached).
A region with a bundle runs its kernels on the framework's current CUDA stream; everything
else, and every region the daemon, the device or the call's shapes rule out, runs PyTorch's
own code. ``report`` counts each such case by reason; the ``stitch.torch`` logger explains
each at debug level.
"""

from ._backend import OptimizedModule, StitchBackend, StitchedRegion, optimize
from ._executor import CudaExecutor, Executor, RegionKernels
from ._inductor import DeviceTimer, InductorStitchBackend, RegionTimer
from ._report import REASONS, RegionChoice, RegionInfo, Report

# The default backends: the daemon at stitch.DEFAULT_ADDRESS, CUDA tensors through the loader.
backend = StitchBackend()
inductor = InductorStitchBackend()


def _register_with_dynamo() -> None:
    """Makes ``torch.compile(model, backend="stitch")`` mean :data:`inductor` (PyTorch 2.x)."""
    try:
        from torch._dynamo import list_backends, register_backend
    except ImportError:  # PyTorch 1.x: no torch.compile
        return
    if "stitch" not in list_backends(exclude_tags=()):
        register_backend(inductor, name="stitch")


_register_with_dynamo()

__all__ = [
    "CudaExecutor",
    "DeviceTimer",
    "Executor",
    "InductorStitchBackend",
    "OptimizedModule",
    "REASONS",
    "RegionChoice",
    "RegionInfo",
    "RegionKernels",
    "RegionTimer",
    "Report",
    "StitchBackend",
    "StitchedRegion",
    "backend",
    "inductor",
    "optimize",
]
