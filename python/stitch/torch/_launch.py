"""The C++ launch path: the ``stitch::launch`` operator of ``libstitch_torch_launch.so``.

The library (``loader/torch/launch_op.cc``, built against the installed PyTorch) launches a
replaced region straight from the compiled graph: per call it matches the inputs to a variant
registered once, allocates the outputs with the strides the graph expects, and calls the
kernel loader's checked launch on PyTorch's current stream, with no Python on the way. Calls
it cannot serve (sizes, dtypes or storage orders never launched before, inputs whose elements
are not one dense block, a failed launch) go to the region's ``stitch::region`` operator (or
``stitch::region_stored``), the Python path, which registers what it launched so that the next
call at those sizes and layouts stays in C++.

The library is the one named by ``STITCH_TORCH_LAUNCH_LIBRARY``, else
``libstitch_torch_launch.so`` next to this package's ``libstitch_client.so`` when bundled
there. Without one (or where it does not load against this PyTorch) the Python path runs;
:func:`status` says which and why.
"""

from __future__ import annotations

import ctypes
import logging
import os
import pathlib
import threading
from typing import Any, List, Optional, Sequence, Tuple

import torch

LIBRARY_NAME = "libstitch_torch_launch.so"
LIBRARY_ENV = "STITCH_TORCH_LAUNCH_LIBRARY"

LOG = logging.getLogger("stitch.torch")

_lock = threading.Lock()
_status: Optional[Tuple[bool, str]] = None


def _library_path() -> Optional[pathlib.Path]:
    override = os.environ.get(LIBRARY_ENV, "")
    if override:
        return pathlib.Path(override)
    bundled = pathlib.Path(__file__).resolve().parent.parent / LIBRARY_NAME
    return bundled if bundled.is_file() else None


def status() -> Tuple[bool, str]:
    """``(True, path)`` once the library is loaded (tried once per process), else
    ``(False, why not)``."""
    global _status
    with _lock:
        if _status is not None:
            return _status
        path = _library_path()
        if path is None:
            _status = (False, "%s is not bundled and %s is not set" % (LIBRARY_NAME, LIBRARY_ENV))
        else:
            try:
                torch.ops.load_library(str(path))
                _status = (True, str(path))
            except Exception as e:  # built for another PyTorch, missing, ...
                _status = (False, "%s does not load: %s" % (path, e))
                LOG.warning("stitch: the C++ launch path is unavailable, regions launch "
                            "from Python: %s", _status[1])
        return _status


def available() -> bool:
    """True when ``stitch::launch`` can be called."""
    return status()[0]


def stored_available() -> bool:
    """True when ``stitch::launch_stored`` can be called: the library is loaded and was built
    against a PyTorch with the ``flexible_layout`` tag."""
    return available() and hasattr(torch.ops.stitch, "launch_stored")


def _address(pointer: Any) -> int:
    return int(ctypes.cast(pointer, ctypes.c_void_p).value or 0)


class NativeRegion:
    """One region of the C++ launch path: its number for ``stitch::launch`` and the bundle
    key of each variant registered, in order. Thread-safe."""

    def __init__(self, fallback: str, fallback_op: str = "region") -> None:
        """``fallback``: the region's name for ``stitch::<fallback_op>`` (``region`` or
        ``region_stored``), which calls go to when C++ cannot serve them (``""``: they raise
        instead)."""
        if not available():
            raise RuntimeError(status()[1])
        self.id: int = int(torch.ops.stitch.launch_region(fallback, fallback_op))
        self.keys: List[str] = []
        self._lock = threading.Lock()

    def add(self, inputs: Sequence[torch.Tensor], sizes: Sequence[int],
            outputs: Sequence[torch.Tensor], loader: Any, program: Any, extent: int,
            key: str) -> bool:
        """Registers a variant: calls with ``inputs``' devices, dtypes, sizes and storage orders
        (the order a dense tensor's dimensions lie in memory) and these ``sizes`` launch
        ``program`` (a ``stitch.cuda.Program``) on ``loader`` (a ``stitch.cuda.Loader``) at
        ``extent`` (0 for an exact bundle) and return new tensors like ``outputs``. Both must
        outlive the region. False when the region holds as many variants as it may."""
        from .. import _lib
        lib = _lib.lib()
        handles = [_address(lib.stitch_loader_launch_at_extent), _address(lib.stitch_free),
                   _address(loader._live()), _address(program._handle), int(extent)]
        with self._lock:
            index = int(torch.ops.stitch.launch_variant(self.id, list(inputs), list(sizes),
                                                        list(outputs), handles))
            if index < 0:
                return False
            assert index == len(self.keys), (index, len(self.keys))
            self.keys.append(key)
            return True

    def counts(self) -> Tuple[int, List[Tuple[str, int]]]:
        """Calls since the last :meth:`counts`: how many went to the fallback, and the
        launches of each variant as (bundle key, count)."""
        with self._lock:
            counts = [int(c) for c in torch.ops.stitch.launch_counts(self.id)]
            keys = list(self.keys)
        return counts[0], list(zip(keys, counts[1:]))

    def __call__(self, inputs: Sequence[torch.Tensor], sizes: Sequence[int]
                 ) -> List[torch.Tensor]:
        return list(torch.ops.stitch.launch.default(self.id, list(inputs), list(sizes)))


__all__ = ["LIBRARY_ENV", "NativeRegion", "available", "status", "stored_available"]
