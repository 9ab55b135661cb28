"""Run stitched kernel bundles on the GPU of the calling thread's CUDA context.

    import stitch, stitch.cuda

    result = client.compile(hlo_text)
    if result.ok:
        loader = stitch.cuda.Loader()                 # DriverUnavailableError without a GPU
        program = loader.load(result)                 # or the serialized bundle bytes
        loader.launch(program, [x, y], [out],         # torch tensors or device pointers
                      stream=torch.cuda.current_stream())

The loader is the kernel loader of libstitch_client.so (``stitch_loader.h``): it opens the
CUDA driver (``libcuda.so.1``) at run time, loads each bundle's modules once per context
(the cubin where the device runs it, else the PTX through the driver's JIT), keeps
temporaries and workspaces per stream, and only enqueues work: the caller synchronizes.

A machine without a usable driver is reported once: the first time the package finds the
driver missing it logs one warning on the ``"stitch"`` logger; later attempts raise
:class:`DriverUnavailableError` (or return the reason from :func:`driver_status`) silently.

Thread-safety: a :class:`Loader` and its :class:`Program` objects may be used from several
threads at once; close each after its last use.
"""

from __future__ import annotations

import ctypes
import itertools
import logging
import threading
from typing import Any, Dict, Iterable, Optional, Sequence, Tuple, Union

from . import _lib

DEFAULT_DRIVER = "libcuda.so.1"

_logger = logging.getLogger("stitch")
_state_lock = threading.Lock()
# Per driver library: (available, reason) once an open has been tried.
_driver_status: Dict[str, Tuple[bool, str]] = {}
_warned = False


class LoaderError(RuntimeError):
    """A loader call failed. ``code`` is the status name (e.g. ``"INVALID_ARGUMENT"``)."""

    def __init__(self, message: str, code: str = "UNKNOWN") -> None:
        super().__init__(message)
        self.code = code


class DriverUnavailableError(LoaderError):
    """The CUDA driver cannot be used here: no driver, no GPU, or a build without cuda.h."""


class ArchMismatchError(LoaderError):
    """The device is older than the architecture the bundle was compiled for."""


def _error(raw: ctypes.c_void_p) -> LoaderError:
    """Turns a ``char** error`` the C ABI filled ("CODE: message") into an exception."""
    text = _lib.take_string(raw) or "UNKNOWN: no error text"
    code, _, message = text.partition(": ")
    if code == "UNAVAILABLE":
        return DriverUnavailableError(message, code)
    if code == "FAILED_PRECONDITION" and message.startswith("bundle targets "):
        return ArchMismatchError(message, code)
    return LoaderError(message, code)


def _library_name(driver_library: Optional[str]) -> str:
    return driver_library if driver_library else DEFAULT_DRIVER


def _record_unavailable(name: str, reason: str) -> None:
    """Remembers that ``name`` cannot be opened, warning the first time the package sees it."""
    global _warned
    with _state_lock:
        _driver_status[name] = (False, reason)
        first = not _warned
        _warned = True
    if first:
        _logger.warning("stitch: the CUDA kernel loader is unavailable, stitched kernels will "
                        "not run in this process: %s", reason)


def _open(driver_library: Optional[str]) -> Any:
    """Returns a ``stitch_loader*`` for the library, or raises DriverUnavailableError."""
    name = _library_name(driver_library)
    with _state_lock:
        known = _driver_status.get(name)
    if known is not None and not known[0]:
        raise DriverUnavailableError(known[1], "UNAVAILABLE")
    err = ctypes.c_void_p()
    handle = _lib.lib().stitch_loader_open(name.encode(), ctypes.byref(err))
    if not handle:
        error = _error(err)
        if isinstance(error, DriverUnavailableError):
            _record_unavailable(name, str(error))
        raise error
    with _state_lock:
        _driver_status[name] = (True, "")
    return handle


def driver_status(driver_library: Optional[str] = None) -> Tuple[bool, str]:
    """Returns ``(True, "")`` when the CUDA driver can be opened and initialized, else
    ``(False, reason)``. The answer is computed once per driver library and process; the
    first unavailability the package sees is logged once."""
    name = _library_name(driver_library)
    with _state_lock:
        known = _driver_status.get(name)
    if known is not None:
        return known
    try:
        handle = _open(driver_library)
    except DriverUnavailableError as e:
        return False, str(e)
    _lib.lib().stitch_loader_close(handle)
    return True, ""


def check_target(target: str, capability: Tuple[int, int], has_cubin: bool = True) -> str:
    """Returns which image of a bundle compiled for ``target`` (``"sm_90"``) a device of
    compute capability ``capability`` (``(major, minor)``, as
    ``torch.cuda.get_device_capability()`` gives it) loads: ``"cubin"`` or ``"ptx"`` (the
    driver JIT-compiles it). Raises :class:`ArchMismatchError` when the device is older than
    the target, and :class:`LoaderError` (code ``INVALID_ARGUMENT``) for a malformed target."""
    major, minor = capability
    err = ctypes.c_void_p()
    r = _lib.lib().stitch_loader_check_target(
        target.encode(), 1 if has_cubin else 0, int(major), int(minor), ctypes.byref(err))
    if r < 0:
        raise _error(err)
    return "cubin" if r == 0 else "ptx"


class Program:
    """A parsed, validated bundle, independent of any device. Made by :meth:`Loader.load`."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle
        lib = _lib.lib()
        self.num_inputs: int = lib.stitch_program_num_inputs(handle)
        self.num_outputs: int = lib.stitch_program_num_outputs(handle)
        self.key: str = lib.stitch_program_key(handle).decode()
        self.target: str = lib.stitch_program_target(handle).decode()
        lo, hi = ctypes.c_int64(), ctypes.c_int64()
        generic = lib.stitch_program_outer_extent(handle, ctypes.byref(lo), ctypes.byref(hi)) == 1
        #: For a shape-generic bundle, the outer extents it serves, ``(lo, hi)``; else None.
        self.outer_extent: Optional[Tuple[int, int]] = (lo.value, hi.value) if generic else None
        #: The inputs (parameter numbers) whose dimension 0 is the outer extent.
        self.outer_parameters: Tuple[int, ...] = tuple(
            itertools.takewhile(lambda p: p >= 0, (lib.stitch_program_outer_parameter(handle, i)
                                                   for i in itertools.count())))
        #: Per output, the input whose bytes it is (the graph returns a parameter, or a
        #: reshape of one), or None: no kernel writes such an output. Passing the input itself
        #: for it costs nothing; another buffer gets a copy of the input after the kernels.
        self.output_aliases: Tuple[Optional[int], ...] = tuple(
            a if a >= 0 else None
            for a in (lib.stitch_program_output_alias(handle, i) for i in range(self.num_outputs)))

    def close(self) -> None:
        """Releases the program; later launches of it raise LoaderError."""
        handle, self._handle = self._handle, None
        if handle:
            _lib.lib().stitch_program_free(handle)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 (interpreter shutdown may have unloaded ctypes)
            pass

    def __repr__(self) -> str:
        return "Program(key=%r, target=%r, inputs=%d, outputs=%d)" % (
            self.key, self.target, self.num_inputs, self.num_outputs)


Buffer = Union[int, Any]


def _pointer(buffer: Buffer) -> int:
    """A device pointer from an int or an object with ``data_ptr()`` (a torch tensor)."""
    if isinstance(buffer, int):
        return buffer
    data_ptr = getattr(buffer, "data_ptr", None)
    if callable(data_ptr):
        return int(data_ptr())
    raise TypeError("expected a device pointer (int) or an object with data_ptr(), got %s"
                    % type(buffer).__name__)


def _pointers(buffers: Iterable[Buffer]) -> "ctypes.Array[ctypes.c_uint64]":
    values = [_pointer(b) for b in buffers]
    return (ctypes.c_uint64 * len(values))(*values)


def _size(buffer: Buffer) -> int:
    """The bytes behind a buffer: a tensor's ``nbytes`` (or numel() * element_size()); 0, not
    checked, for a bare pointer."""
    if isinstance(buffer, int):
        return 0
    nbytes = getattr(buffer, "nbytes", None)
    if isinstance(nbytes, int):
        return nbytes
    numel, element_size = getattr(buffer, "numel", None), getattr(buffer, "element_size", None)
    if callable(numel) and callable(element_size):
        return int(numel()) * int(element_size())
    return 0


def _sizes(buffers: Iterable[Buffer]) -> "ctypes.Array[ctypes.c_uint64]":
    values = [_size(b) for b in buffers]
    return (ctypes.c_uint64 * len(values))(*values)


def _stream(stream: Any) -> int:
    """A CUstream as an integer from an int, None (the default stream) or an object with
    ``cuda_stream`` (a torch.cuda.Stream)."""
    if stream is None:
        return 0
    if isinstance(stream, int):
        return stream
    handle = getattr(stream, "cuda_stream", None)
    if isinstance(handle, int):
        return handle
    raise TypeError("expected a CUstream (int) or an object with cuda_stream, got %s"
                    % type(stream).__name__)


def _outer_extent(program: Program, inputs: Sequence[Buffer]) -> int:
    """The run's outer extent for a launch that names none: 0 for an exact program, else
    dimension 0 of the first outer parameter's input; LoaderError when that is unknown."""
    if program.outer_extent is None:
        return 0
    first = program.outer_parameters[0] if program.outer_parameters else -1
    shape = getattr(inputs[first], "shape", None) if 0 <= first < len(inputs) else None
    if not shape:
        raise LoaderError("the program is shape-generic (outer extents %d to %d): pass "
                          "outer_extent, or input %d as a tensor with a shape"
                          % (program.outer_extent + (first,)), "INVALID_ARGUMENT")
    return int(shape[0])


class Loader:
    """The kernel loader on the CUDA driver ``driver_library`` (default ``libcuda.so.1``).

    Raises :class:`DriverUnavailableError` with the reason when the driver cannot be opened.
    """

    def __init__(self, driver_library: Optional[str] = None) -> None:
        self._handle = None
        self._handle = _open(driver_library)

    def load(self, result_or_bundle: Union[bytes, bytearray, memoryview, Any]) -> Program:
        """Returns the program of a :class:`stitch.Result` or of serialized bundle bytes.
        Raises LoaderError (``INVALID_ARGUMENT``) when the bundle is malformed or the result
        is a fallback without one."""
        data = result_or_bundle
        if not isinstance(data, (bytes, bytearray, memoryview)):
            bundle = getattr(data, "bundle", None)
            if not isinstance(bundle, (bytes, bytearray)):
                raise TypeError("expected bundle bytes or a stitch.Result, got %s"
                                % type(data).__name__)
            if not bundle:
                raise LoaderError("the result has no bundle (%s)"
                                  % getattr(data, "reason", "fallback"), "INVALID_ARGUMENT")
            data = bundle
        raw = bytes(data)
        err = ctypes.c_void_p()
        handle = _lib.lib().stitch_loader_load(self._live(), raw, len(raw), ctypes.byref(err))
        if not handle:
            raise _error(err)
        return Program(handle)

    def launch(self, program: Program, inputs: Sequence[Buffer], outputs: Sequence[Buffer],
               stream: Any = 0, outer_extent: Optional[int] = None) -> None:
        """Enqueues the program's kernels on ``stream`` in the current CUDA context, with
        ``inputs`` and ``outputs`` as device buffers (ints or tensors), in the order of the
        graph the bundle was compiled from: its parameters by number, its outputs in order.
        Returns once enqueued. The size of each tensor is checked against the bundle before
        anything is enqueued (bare pointers cannot be). Raises LoaderError:
        ``INVALID_ARGUMENT`` for wrong counts or a tensor smaller than the bundle's buffer
        (the message names both), ``FAILED_PRECONDITION`` without a current context,
        :class:`ArchMismatchError` for an older device, ``INTERNAL`` when the driver
        fails.

        A shape-generic program (``program.outer_extent`` is not None) runs at the run's
        ``outer_extent``: by default dimension 0 of its first outer parameter, read from that
        input's ``shape``; pass it where that input is a bare pointer. An extent outside the
        bundle's range raises ``INVALID_ARGUMENT`` before anything is enqueued."""
        if program._handle is None:
            raise LoaderError("the program is closed", "INVALID_ARGUMENT")
        if outer_extent is None:
            outer_extent = _outer_extent(program, inputs)
        ins, outs = _pointers(inputs), _pointers(outputs)
        in_bytes, out_bytes = _sizes(inputs), _sizes(outputs)
        err = ctypes.c_void_p()
        r = _lib.lib().stitch_loader_launch_at_extent(
            self._live(), program._handle, ins, in_bytes, len(ins), outs, out_bytes, len(outs),
            outer_extent, _stream(stream), ctypes.byref(err))
        if r != 0:
            raise _error(err)

    def close(self) -> None:
        """Releases the loader's modules and device buffers; wait for its work first."""
        handle, self._handle = self._handle, None
        if handle:
            _lib.lib().stitch_loader_close(handle)

    def _live(self) -> Any:
        if not self._handle:
            raise LoaderError("the loader is closed", "FAILED_PRECONDITION")
        return self._handle

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 (interpreter shutdown may have unloaded ctypes)
            pass


__all__ = [
    "ArchMismatchError",
    "DriverUnavailableError",
    "Loader",
    "LoaderError",
    "Program",
    "check_target",
    "driver_status",
]
