"""ctypes bindings for libstitch_client.so, the C ABI of ``stitch_client.h``.

The library is the one bundled in this package (``pip install`` builds it). Where the package
has none, as when it is used from a source checkout, the path in the environment variable
``STITCH_CLIENT_LIBRARY`` is loaded instead. Nothing else in the package reads that variable.
"""

from __future__ import annotations

import ctypes
import os
import pathlib
import threading
from typing import Optional

LIBRARY_NAME = "libstitch_client.so"
LIBRARY_ENV = "STITCH_CLIENT_LIBRARY"

# enum stitch_outcome: the values are stable.
OUTCOME_NAMES = {
    0: "hit_local",
    1: "hit_memory",
    2: "hit_disk",
    3: "compiled",
    4: "fallback",
    5: "hit_cluster",
}
FALLBACK = 4

# enum stitch_timed_kernels.
TIMED_KERNELS = {"stitched": 0, "fallback": 1}


class ClientHandle(ctypes.Structure):
    """Opaque ``stitch_client``."""


class ResultHandle(ctypes.Structure):
    """Opaque ``stitch_result``."""


class ExtractionHandle(ctypes.Structure):
    """Opaque ``stitch_extraction``."""


ClientPtr = ctypes.POINTER(ClientHandle)
ResultPtr = ctypes.POINTER(ResultHandle)
ExtractionPtr = ctypes.POINTER(ExtractionHandle)

_c_size_p = ctypes.POINTER(ctypes.c_size_t)
_c_void_pp = ctypes.POINTER(ctypes.c_void_p)

# name: (restype, argtypes)
_SIGNATURES = {
    "stitch_client_create": (ClientPtr, [ctypes.c_char_p, ctypes.c_int, ctypes.c_int]),
    "stitch_client_create_tls": (
        ClientPtr, [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_char_p,
                    ctypes.c_char_p, ctypes.c_char_p]),
    "stitch_client_destroy": (None, [ClientPtr]),
    "stitch_client_compile_hlo": (
        ResultPtr, [ClientPtr, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p]),
    "stitch_client_compile_graph": (
        ResultPtr, [ClientPtr, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p]),
    "stitch_client_lookup_hlo": (
        ResultPtr, [ClientPtr, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p]),
    "stitch_client_lookup_graph": (
        ResultPtr, [ClientPtr, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p]),
    "stitch_client_compile_hlo_generic": (
        ResultPtr, [ClientPtr, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p,
                    ctypes.POINTER(ctypes.c_int64), ctypes.c_size_t]),
    "stitch_client_lookup_hlo_generic": (
        ResultPtr, [ClientPtr, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p,
                    ctypes.POINTER(ctypes.c_int64), ctypes.c_size_t]),
    "stitch_client_get_entry": (ResultPtr, [ClientPtr, ctypes.c_char_p]),
    "stitch_result_outcome": (ctypes.c_int, [ResultPtr]),
    "stitch_result_key": (ctypes.c_char_p, [ResultPtr]),
    "stitch_result_reason": (ctypes.c_char_p, [ResultPtr]),
    "stitch_result_bundle": (ctypes.c_void_p, [ResultPtr, _c_size_p]),
    "stitch_result_runtimes_json": (ctypes.c_char_p, [ResultPtr]),
    "stitch_result_outer_extent": (
        ctypes.c_int, [ResultPtr, ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_int64)]),
    "stitch_result_kernel_count": (ctypes.c_size_t, [ResultPtr]),
    "stitch_result_kernel_name": (ctypes.c_char_p, [ResultPtr, ctypes.c_size_t]),
    "stitch_result_kernel_ptx": (ctypes.c_char_p, [ResultPtr, ctypes.c_size_t]),
    "stitch_result_kernel_cubin": (ctypes.c_void_p, [ResultPtr, ctypes.c_size_t, _c_size_p]),
    "stitch_result_free": (None, [ResultPtr]),
    "stitch_client_record_invocations": (ctypes.c_int, [ClientPtr, ctypes.c_char_p, ctypes.c_uint64]),
    "stitch_client_record_time": (
        ctypes.c_int, [ClientPtr, ctypes.c_char_p, ctypes.c_int, ctypes.c_double, ctypes.c_uint64]),
    "stitch_client_should_time_fallback": (ctypes.c_int, [ClientPtr]),
    "stitch_client_set_fallback": (ctypes.c_int, [ClientPtr, ctypes.c_char_p]),
    "stitch_client_flush_usage": (ctypes.c_int, [ClientPtr]),
    "stitch_client_stats": (ctypes.c_int, [ClientPtr, _c_void_pp]),
    "stitch_client_list_entries": (ctypes.c_int, [ClientPtr, ctypes.c_uint32, _c_void_pp]),
    "stitch_client_list_runtimes": (ctypes.c_int, [ClientPtr, ctypes.c_uint32, _c_void_pp]),
    "stitch_free": (None, [ctypes.c_void_p]),
    "stitch_outcome_name": (ctypes.c_char_p, [ctypes.c_int]),
    "stitch_client_extract_hlo": (ExtractionPtr, [ClientPtr, ctypes.c_char_p, ctypes.c_size_t]),
    "stitch_client_extract_hlo_at_extent": (
        ExtractionPtr, [ClientPtr, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int64]),
    "stitch_extraction_error": (ctypes.c_char_p, [ExtractionPtr]),
    "stitch_extraction_count": (ctypes.c_size_t, [ExtractionPtr]),
    "stitch_extraction_name": (ctypes.c_char_p, [ExtractionPtr, ctypes.c_size_t]),
    "stitch_extraction_graph": (ctypes.c_void_p, [ExtractionPtr, ctypes.c_size_t, _c_size_p]),
    "stitch_extraction_node_count": (ctypes.c_size_t, [ExtractionPtr, ctypes.c_size_t]),
    "stitch_extraction_parameter_count": (ctypes.c_size_t, [ExtractionPtr, ctypes.c_size_t]),
    "stitch_extraction_output_count": (ctypes.c_size_t, [ExtractionPtr, ctypes.c_size_t]),
    "stitch_extraction_free": (None, [ExtractionPtr]),
}



# The kernel loader's C ABI (stitch_loader.h, compiled into the same library), for stitch.cuda.
class LoaderHandle(ctypes.Structure):
    """Opaque ``stitch_loader``."""


class ProgramHandle(ctypes.Structure):
    """Opaque ``stitch_program``."""


LoaderPtr = ctypes.POINTER(LoaderHandle)
ProgramPtr = ctypes.POINTER(ProgramHandle)
_c_uint64_p = ctypes.POINTER(ctypes.c_uint64)

_SIGNATURES.update({
    "stitch_loader_open": (LoaderPtr, [ctypes.c_char_p, _c_void_pp]),
    "stitch_loader_close": (None, [LoaderPtr]),
    "stitch_loader_load": (ProgramPtr, [LoaderPtr, ctypes.c_char_p, ctypes.c_size_t, _c_void_pp]),
    "stitch_program_free": (None, [ProgramPtr]),
    "stitch_program_num_inputs": (ctypes.c_int, [ProgramPtr]),
    "stitch_program_num_outputs": (ctypes.c_int, [ProgramPtr]),
    "stitch_program_key": (ctypes.c_char_p, [ProgramPtr]),
    "stitch_program_target": (ctypes.c_char_p, [ProgramPtr]),
    "stitch_loader_launch": (
        ctypes.c_int, [LoaderPtr, ProgramPtr, _c_uint64_p, ctypes.c_size_t, _c_uint64_p,
                       ctypes.c_size_t, ctypes.c_size_t, _c_void_pp]),
    "stitch_loader_launch_checked": (
        ctypes.c_int, [LoaderPtr, ProgramPtr, _c_uint64_p, _c_uint64_p, ctypes.c_size_t,
                       _c_uint64_p, _c_uint64_p, ctypes.c_size_t, ctypes.c_size_t, _c_void_pp]),
    "stitch_program_outer_extent": (
        ctypes.c_int, [ProgramPtr, ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_int64)]),
    "stitch_program_outer_parameter": (ctypes.c_int, [ProgramPtr, ctypes.c_int]),
    "stitch_program_output_alias": (ctypes.c_int, [ProgramPtr, ctypes.c_int]),
    "stitch_loader_launch_at_extent": (
        ctypes.c_int, [LoaderPtr, ProgramPtr, _c_uint64_p, _c_uint64_p, ctypes.c_size_t,
                       _c_uint64_p, _c_uint64_p, ctypes.c_size_t, ctypes.c_int64,
                       ctypes.c_size_t, _c_void_pp]),
    "stitch_loader_check_target": (
        ctypes.c_int, [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, _c_void_pp]),
})

_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None


def library_path() -> pathlib.Path:
    """Returns the path of the libstitch_client.so this package loads.

    The copy bundled next to this module when there is one; otherwise the path in
    ``STITCH_CLIENT_LIBRARY``. Raises OSError when there is neither.
    """
    bundled = pathlib.Path(__file__).resolve().parent / LIBRARY_NAME
    if bundled.is_file():
        return bundled
    override = os.environ.get(LIBRARY_ENV, "")
    if override:
        return pathlib.Path(override)
    raise OSError(
        "%s is not bundled in %s and %s is not set: install the package with "
        "`pip install ./python` from the stitchd repository, or point %s at a built "
        "libstitch_client.so" % (LIBRARY_NAME, bundled.parent, LIBRARY_ENV, LIBRARY_ENV))


def lib() -> ctypes.CDLL:
    """Returns the loaded library with every function's signature declared (loaded once)."""
    global _lib
    with _lock:
        if _lib is None:
            loaded = ctypes.CDLL(str(library_path()))
            for name, (restype, argtypes) in _SIGNATURES.items():
                fn = getattr(loaded, name)
                fn.restype = restype
                fn.argtypes = argtypes
            _lib = loaded
        return _lib


def take_string(pointer: ctypes.c_void_p) -> str:
    """Copies a string an admin call stored through a ``char**`` and frees it."""
    if not pointer.value:
        return ""
    try:
        return ctypes.string_at(pointer.value).decode("utf-8", errors="replace")
    finally:
        lib().stitch_free(pointer)
