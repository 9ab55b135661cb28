"""Python client for stitchd, the node daemon that compiles fused GPU kernels.

    import stitch

    with stitch.Client("unix:///run/stitchd/stitchd.sock", fallback="xla") as client:
        result = client.compile(hlo_text)      # or client.lookup(...): never compiles
        if result.ok:
            launch(result.kernels)             # [(name, ptx, cubin), ...]
            client.record_invocations(result.key, steps)
        else:
            run_framework_kernels()            # result.reason says why
        client.flush_usage()

Compiles and lookups are fail-open: a daemon that is down, slow or refuses the input gives a
Result with outcome "fallback" and the reason, never an exception. The package wraps
libstitch_client.so (the C ABI of stitch_client.h) with ctypes; ``python -m stitch`` runs the
everyday stitchctl verbs.

``stitch.jax`` gives a jitted JAX function's signatures (``Client.extract`` of its HLO) and
pre-warms the daemon's cache with them; it imports JAX, ``import stitch`` does not.
"""

from .client import (
    DEFAULT_ADDRESS,
    DEFAULT_COMPILE_DEADLINE_MS,
    DEFAULT_LOOKUP_DEADLINE_MS,
    FALLBACKS,
    Client,
    ClientClosedError,
    DaemonError,
    Kernel,
    Result,
    Signature,
)

# The kernel loader (stitch.cuda): importing it is cheap, it opens the driver only when used.
from . import cuda  # noqa: E402,F401

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_ADDRESS",
    "DEFAULT_COMPILE_DEADLINE_MS",
    "DEFAULT_LOOKUP_DEADLINE_MS",
    "FALLBACKS",
    "Client",
    "ClientClosedError",
    "DaemonError",
    "Kernel",
    "Result",
    "Signature",
]
