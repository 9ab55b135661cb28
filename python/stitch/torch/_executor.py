"""Executors: what launches a region's bundle on the tensors' device.

The backend looks an executor up by device type (``"cuda"``, ``"cpu"``). The CUDA executor
launches through ``stitch.cuda``'s loader on PyTorch's current stream; a device type without
an executor runs PyTorch's own code for every region. Tests register a host executor that
runs the compiler's kernels on its emulator.

Under ``torch.compile(backend="stitch")`` an executor whose ``native`` gives the loader and
program of a bundle (the CUDA executor, where ``libstitch_torch_launch.so`` is loaded) hands
the region to the C++ launch path (``_launch``): later calls launch from the ``stitch::launch``
operator without Python, and ``launch_path`` says which path an executor's regions take.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch


@dataclasses.dataclass(frozen=True)
class RegionKernels:
    """What an executor needs to run one region.

    Attributes:
        key: the daemon's cache key.
        target: the GPU target the bundle was compiled for (``"sm_90"``).
        bundle: the serialized ``stitch.v1.KernelBundle``.
        hlo: the region's signature (HLO text) at the sizes of the run.
        outputs: (shape, dtype) of each output at the sizes of the run, in order.
        outer_parameters: the inputs whose dimension 0 is the bundle's outer extent, for a
            bundle that serves a bucket of extents (the daemon's shape classes); () otherwise.
        served: the (lo, hi) extents a shape-generic bundle serves; None for exact shapes.
        inputs: (shape, dtype) of each parameter as the signature declares it: an input
            whose rows are k times the outer extent is declared ``[extent, k, ...]``, the same
            bytes; the executor views the inputs so.
        extent: the run's outer extent for a shape-generic bundle; 0 otherwise.
    """

    key: str
    target: str
    bundle: bytes
    hlo: str
    outputs: Tuple[Tuple[Tuple[int, ...], torch.dtype], ...]
    outer_parameters: Tuple[int, ...] = ()
    served: Optional[Tuple[int, int]] = None
    inputs: Tuple[Tuple[Tuple[int, ...], torch.dtype], ...] = ()
    extent: int = 0


class Executor:
    """Launches bundles on one device type. Subclasses override all three methods."""

    def device_target(self, device: torch.device) -> Optional[str]:
        """The target to compile for on ``device`` (``"sm_90"``), or None for the daemon's."""
        raise NotImplementedError

    def check(self, target: str, device: torch.device) -> Optional[str]:
        """Returns None when a bundle for ``target`` runs on ``device``, else why not."""
        raise NotImplementedError

    def run(self, kernels: RegionKernels, inputs: Sequence[torch.Tensor]) -> List[torch.Tensor]:
        """Launches the region on contiguous ``inputs`` and returns its outputs. Raises on
        failure; the region then runs PyTorch's code."""
        raise NotImplementedError

    #: How the executor launches: ``"python"``; ``"cpp"`` for one that launches through the
    #: C++ launch path (``stitch::launch``) where it can, and whose :meth:`native` hands
    #: regions to it.
    launch_path = "python"

    def native(self, kernels: RegionKernels) -> Optional[Tuple[Any, Any]]:
        """The ``stitch.cuda`` (loader, program) that launch ``kernels`` for the C++ launch
        path, or None where the executor has none (the region then launches through
        :meth:`run` on every call)."""
        return None

    def last_launch_path(self) -> str:
        """How the calling thread's latest :meth:`run` launched: ``"python"`` or ``"cpp"``."""
        return "python"


class CudaExecutor(Executor):
    """Launches bundles on CUDA tensors through ``stitch.cuda.Loader``, on PyTorch's current
    stream, so the kernels order with the framework's own. Thread-safe.

    Where the C++ launch path is available (``stitch.torch._launch``), ``launch_path`` is
    ``"cpp"``: :meth:`run` launches each bundle through ``stitch::launch`` at the sizes it
    launched before from Python, and :meth:`native` hands regions to it. Set ``launch_path``
    to ``"python"`` to launch from Python alone. The loader and every program loaded stay
    alive with the executor, as the C++ path needs."""

    def __init__(self, loader: Any = None) -> None:
        from .. import cuda
        from . import _launch
        self._cuda = cuda
        self._launch = _launch
        self._loader = loader if loader is not None else cuda.Loader()
        self._programs: Dict[str, Any] = {}
        self._regions: Dict[str, Any] = {}  # bundle key -> _launch.NativeRegion
        self._lock = threading.Lock()
        self._local = threading.local()
        self.launch_path = "cpp" if _launch.available() else "python"
        #: Why the C++ launch path is not used, or its library's path.
        self.launch_path_note = _launch.status()[1]

    def device_target(self, device: torch.device) -> Optional[str]:
        major, minor = torch.cuda.get_device_capability(device)
        return "sm_%d%d" % (major, minor)

    def check(self, target: str, device: torch.device) -> Optional[str]:
        try:
            self._cuda.check_target(target, torch.cuda.get_device_capability(device),
                                    has_cubin=False)
        except self._cuda.LoaderError as e:
            return str(e)
        return None

    def _program(self, kernels: RegionKernels) -> Any:
        with self._lock:
            program = self._programs.get(kernels.key)
            if program is None:
                program = self._loader.load(kernels.bundle)
                self._programs[kernels.key] = program
            return program

    def run(self, kernels: RegionKernels, inputs: Sequence[torch.Tensor]) -> List[torch.Tensor]:
        native = self.launch_path == "cpp"
        if native:
            region = self._regions.get(kernels.key)
            if region is not None:
                try:
                    outputs = region(inputs, [])
                    self._local.path = "cpp"
                    return outputs
                except RuntimeError:  # sizes it has not launched, or a failed launch
                    pass
        self._local.path = "python"
        outputs = self._run_python(kernels, inputs)
        if native:
            self._add_variant(kernels, inputs, outputs)
        return outputs

    def last_launch_path(self) -> str:
        return str(getattr(self._local, "path", "python"))

    def _add_variant(self, kernels: RegionKernels, inputs: Sequence[torch.Tensor],
                     outputs: Sequence[torch.Tensor]) -> None:
        """Lets :meth:`run` launch ``kernels`` at the sizes of ``inputs`` from C++."""
        try:
            with self._lock:
                region = self._regions.get(kernels.key)
                if region is None:
                    region = self._regions[kernels.key] = self._launch.NativeRegion("")
            region.add(inputs, [], outputs, self._loader, self._program(kernels),
                       kernels.extent if kernels.served else 0, kernels.key)
        except Exception:  # noqa: BLE001 (these sizes go on launching from Python)
            pass

    def _run_python(self, kernels: RegionKernels, inputs: Sequence[torch.Tensor]
                    ) -> List[torch.Tensor]:
        program = self._program(kernels)
        device = inputs[0].device
        outputs = [torch.empty(shape, dtype=dtype, device=device)
                   for shape, dtype in kernels.outputs]
        declared = ([x.view(shape) for x, (shape, _) in zip(inputs, kernels.inputs)]
                    if kernels.inputs else list(inputs))
        # A CPU tensor launches on stream 0: only tests do, against a stand-in driver.
        stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
        self._loader.launch(program, declared, outputs, stream=stream,
                            outer_extent=kernels.extent if kernels.served else None)
        return outputs

    def native(self, kernels: RegionKernels) -> Optional[Tuple[Any, Any]]:
        if self.launch_path != "cpp":
            return None
        return self._loader, self._program(kernels)
