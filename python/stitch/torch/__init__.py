"""PyTorch integration: stitched kernels for the memory-intensive parts of a model.

    import stitch.torch

    model = torch.compile(model, backend=stitch.torch.backend)   # PyTorch 2.x
    model = stitch.torch.optimize(model)                         # any PyTorch with functorch
    ...
    print(stitch.torch.backend.report.summary())

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
from ._report import REASONS, RegionInfo, Report

# The default backend: the daemon at stitch.DEFAULT_ADDRESS, CUDA tensors through the loader.
backend = StitchBackend()

__all__ = [
    "CudaExecutor",
    "Executor",
    "OptimizedModule",
    "REASONS",
    "RegionInfo",
    "RegionKernels",
    "Report",
    "StitchBackend",
    "StitchedRegion",
    "backend",
    "optimize",
]
