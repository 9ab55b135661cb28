#!/usr/bin/env python3
"""stitch.cuda, the Python side of the kernel loader, without a GPU.

  cuda_test.py --library PATH --fake-driver PATH [unittest arguments]

The package is imported from the repository's python/ folder and loads the given
libstitch_client.so. --fake-driver is the loader's stand-in libcuda
(tests/loader/fake_cuda_driver.cc): it runs nothing and records every driver call, which the
tests read back through its stitch_fake_loader_* functions. Bundles are encoded here in the
protobuf wire format by hand (the system interpreter has no protobuf). Standard library only.
"""

import argparse
import ctypes
import logging
import os
import pathlib
import sys
import unittest

SOURCE_DIR = pathlib.Path(__file__).resolve().parents[2]
ARGS = argparse.Namespace()
cuda = None  # stitch.cuda, imported in main()
FAKE = None  # the stand-in driver, loaded in main()


# --- protobuf wire format: just what stitch.v1.KernelBundle needs ---------------------------

def varint(value):
    value &= (1 << 64) - 1  # negative int32 values are sign-extended to ten bytes
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field_varint(number, value):
    return varint(number << 3) + varint(value)


def field_bytes(number, data):
    if isinstance(data, str):
        data = data.encode()
    return varint(number << 3 | 2) + varint(len(data)) + data


INPUT, OUTPUT, TEMPORARY = 1, 2, 3


def image(name, params, cubin=False):
    """PTX (or a stand-in cubin) declaring `name` with `params` pointer parameters."""
    decl = ", ".join(".param .u64 p%d" % i for i in range(params))
    text = ".version 8.0\n.target sm_90\n.visible .entry %s(%s)\n{\n  ret;\n}\n" % (name, decl)
    return (b"\x7fELF " + text.encode()) if cubin else text.encode()


def kernel(name, params, workspace=0, block=128, cubin=False, extra_params=0, cooperative=True):
    count = len(params) + (1 if workspace else 0) + extra_params
    dims = b"".join(field_varint(n, v) for n, v in
                    ((1, 4), (2, 1), (3, 1), (4, block), (5, 1), (6, 1)))
    out = field_bytes(1, name) + field_bytes(2, image(name, count))
    if cubin:
        out += field_bytes(3, image(name, count, cubin=True))
    out += field_bytes(4, dims)
    for role, index in params:
        out += field_bytes(7, field_varint(1, role) + field_varint(2, index))
    if workspace:
        out += field_varint(9, workspace)
        if cooperative:
            out += field_varint(11, 1)
    return out


def bundle(key, kernels, temporaries=(), target="sm_90"):
    out = field_bytes(2, key) + field_bytes(3, target)
    for k in kernels:
        out += field_bytes(4, k)
    for size, alignment in temporaries:
        out += field_bytes(5, field_varint(1, size) + field_varint(2, alignment))
    return out


def buffer_spec(size, shape):
    return field_varint(1, size) + field_bytes(2, shape)


def bucket_bundle(key="py-bucket"):
    """A shape-generic bundle serving outer extents 33 to 64: `norm` reads input 0 (256 bytes
    per extent, the outer parameter) and takes the extent last; `tail` reads input 1 (fixed)
    and writes output 0 (256 bytes per extent)."""
    norm = kernel("norm", [(INPUT, 0)], extra_params=1) + field_varint(10, 1)
    tail = kernel("tail", [(INPUT, 1), (OUTPUT, 0)])
    out = bundle(key, [norm, tail])
    out += field_bytes(11, field_varint(1, 64 * 256) + field_bytes(2, "f32[64,64]")
                       + field_varint(3, 256))
    out += field_bytes(11, buffer_spec(256, "f32[64]"))
    out += field_bytes(12, field_varint(1, 64 * 256) + field_bytes(2, "f32[64,64]")
                       + field_varint(3, 256))
    return out + field_bytes(13, field_varint(1, 33) + field_varint(2, 64) + field_varint(3, 0))


def sized_bundle(key="py-sized"):
    """two_kernel_bundle, declaring inputs of 64 bytes and an output of 1024."""
    out = two_kernel_bundle(key)
    for _ in range(2):
        out += field_bytes(11, buffer_spec(64, "f32[16]"))
    return out + field_bytes(12, buffer_spec(1024, "f32[256]"))


def two_kernel_bundle(key="py"):
    """`scale` reads input 0 into temporary 0; `add` reads input 1 and it, writes output 0
    and has a 512-byte workspace."""
    return bundle(key, [
        kernel("scale", [(INPUT, 0), (TEMPORARY, 0)]),
        kernel("add", [(INPUT, 1), (TEMPORARY, 0), (OUTPUT, 0)], workspace=512),
    ], temporaries=[(3000, 16)])


def events(prefix=""):
    text = FAKE.stitch_fake_loader_events().decode()
    return [line for line in text.splitlines() if line.startswith(prefix)]


def fields(line):
    return dict(word.split("=", 1) for word in line.split() if "=" in word)


class CountingHandler(logging.Handler):
    def __init__(self):
        super().__init__(level=logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append(record)


class Tensor:
    """What the loader reads of a torch tensor."""

    def __init__(self, ptr, nbytes=None):
        self.ptr = ptr
        if nbytes is not None:
            self.nbytes = nbytes

    def data_ptr(self):
        return self.ptr


class ShapedTensor(Tensor):
    """A tensor whose shape gives a shape-generic launch its extent."""

    def __init__(self, ptr, shape, nbytes):
        super().__init__(ptr, nbytes)
        self.shape = shape


class Stream:
    """What the loader reads of a torch.cuda.Stream."""

    def __init__(self, handle):
        self.cuda_stream = handle


class Fallback:
    """What the loader reads of a stitch.Result without a bundle."""
    bundle = b""
    reason = "UNAVAILABLE: no daemon"


class CheckTargetTest(unittest.TestCase):
    def test_table(self):
        self.assertEqual(cuda.check_target("sm_90", (9, 0)), "cubin")
        self.assertEqual(cuda.check_target("sm_86", (8, 9)), "cubin")
        self.assertEqual(cuda.check_target("sm_90", (9, 0), has_cubin=False), "ptx")
        self.assertEqual(cuda.check_target("sm_80", (9, 0)), "ptx")
        self.assertEqual(cuda.check_target("sm_90", (10, 0)), "ptx")

    def test_older_device_is_an_arch_mismatch(self):
        with self.assertRaises(cuda.ArchMismatchError) as caught:
            cuda.check_target("sm_90", (8, 0))
        self.assertIsInstance(caught.exception, cuda.LoaderError)
        self.assertEqual(caught.exception.code, "FAILED_PRECONDITION")
        self.assertIn("sm_90", str(caught.exception))
        self.assertIn("sm_80", str(caught.exception))

    def test_malformed_target(self):
        for target in ("sm90", "sm_9", "compute_90", ""):
            with self.assertRaises(cuda.LoaderError) as caught:
                cuda.check_target(target, (9, 0))
            self.assertNotIsInstance(caught.exception, cuda.ArchMismatchError)
            self.assertEqual(caught.exception.code, "INVALID_ARGUMENT", target)


class UnavailableDriverTest(unittest.TestCase):
    # The package warns once per process, so everything about a missing driver is here.
    def test_missing_driver_raises_and_warns_once(self):
        handler = CountingHandler()
        logger = logging.getLogger("stitch")
        logger.addHandler(handler)
        try:
            missing = "/nonexistent/libcuda.so.1"
            with self.assertRaises(cuda.DriverUnavailableError) as first:
                cuda.Loader(missing)
            self.assertEqual(first.exception.code, "UNAVAILABLE")
            self.assertIn("cannot load the CUDA driver", str(first.exception))
            with self.assertRaises(cuda.DriverUnavailableError) as second:
                cuda.Loader(missing)
            self.assertEqual(str(second.exception), str(first.exception))
            self.assertEqual(cuda.driver_status(missing), (False, str(first.exception)))
            # Another missing library is not a second warning either.
            available, reason = cuda.driver_status("/nonexistent/libcuda-other.so")
            self.assertFalse(available)
            self.assertIn("libcuda-other.so", reason)
        finally:
            logger.removeHandler(handler)
        warnings = [r for r in handler.records if r.levelno == logging.WARNING]
        self.assertEqual(len(warnings), 1, [r.getMessage() for r in handler.records])
        self.assertIn("cannot load the CUDA driver", warnings[0].getMessage())


class FakeDriverTest(unittest.TestCase):
    def setUp(self):
        FAKE.stitch_fake_loader_set_cc(9, 0)
        FAKE.stitch_fake_loader_set_context(1)
        FAKE.stitch_fake_loader_reset()
        self.loader = cuda.Loader(ARGS.fake_driver)

    def tearDown(self):
        self.loader.close()

    def test_driver_status_is_available(self):
        self.assertEqual(cuda.driver_status(ARGS.fake_driver), (True, ""))

    def test_load_and_launch(self):
        program = self.loader.load(two_kernel_bundle("py-launch"))
        self.assertEqual((program.num_inputs, program.num_outputs), (2, 1))
        self.assertEqual(program.key, "py-launch")
        self.assertEqual(program.target, "sm_90")
        self.loader.launch(program, [0x1100, Tensor(0x2200)], [Tensor(0x3300)],
                           stream=Stream(0x99))
        self.loader.launch(program, [0x1100, 0x2200], [0x3300], stream=0x99)
        self.assertEqual(len(events("load ctx=1 image=ptx")), 2)
        launches = [fields(line) for line in events("launch ")]
        self.assertEqual([l["fn"] for l in launches], ["scale", "add", "scale", "add"])
        self.assertEqual({l["stream"] for l in launches}, {str(0x99)})
        allocs = {int(fields(l)["bytes"]): int(fields(l)["ptr"]) for l in events("alloc ")}
        self.assertEqual(sorted(allocs), [512, 3000])
        scale = [int(p) for p in launches[0]["args"].split(",")]
        self.assertEqual(scale, [0x1100, allocs[3000]])
        add = [int(p) for p in launches[1]["args"].split(",")]
        self.assertEqual(add, [0x2200, allocs[3000], 0x3300, allocs[512]])
        self.assertEqual(launches[1]["coop"], "1")
        self.assertEqual(launches[0]["coop"], "0")
        memsets = events("memset ")
        self.assertEqual(memsets, ["memset ptr=%d value=0 bytes=512 stream=%d"
                                   % (allocs[512], 0x99)])

    def test_a_workspace_without_grid_barriers_launches_normally(self):
        # A split reduction whose last block combines: a zeroed workspace, no cooperative
        # launch.
        program = self.loader.load(bundle("py-last-block", [
            kernel("split", [(INPUT, 0), (OUTPUT, 0)], workspace=256, cooperative=False),
        ]))
        self.loader.launch(program, [0x1100], [0x2200], stream=0x5)
        launches = [fields(line) for line in events("launch ")]
        self.assertEqual(len(launches), 1)
        self.assertEqual(launches[0]["coop"], "0")
        allocs = {int(fields(l)["bytes"]): int(fields(l)["ptr"]) for l in events("alloc ")}
        self.assertEqual([int(p) for p in launches[0]["args"].split(",")],
                         [0x1100, 0x2200, allocs[256]])
        self.assertEqual(events("memset "), ["memset ptr=%d value=0 bytes=256 stream=%d"
                                             % (allocs[256], 0x5)])

    def test_tensors_smaller_than_the_bundle_declares_are_refused(self):
        program = self.loader.load(sized_bundle())
        with self.assertRaises(cuda.LoaderError) as caught:
            self.loader.launch(program, [Tensor(0x1100, 64), Tensor(0x2200, 64)],
                               [Tensor(0x3300, 64)])
        self.assertEqual(caught.exception.code, "INVALID_ARGUMENT")
        self.assertIn("output 0 is a 64-byte buffer, but the bundle's output 0 is f32[256] "
                      "(1024 bytes)", str(caught.exception))
        self.assertEqual(events("launch "), [])
        # Right sizes launch; bare pointers cannot be checked and launch too.
        self.loader.launch(program, [Tensor(0x1100, 64), Tensor(0x2200, 64)],
                           [Tensor(0x3300, 1024)])
        self.loader.launch(program, [0x1100, 0x2200], [0x3300])
        self.assertEqual(len(events("launch ")), 4)

    def test_an_output_that_is_an_input_is_copied_only_into_another_buffer(self):
        # sized_bundle with a second output that is input 1's bytes (aliases_input = 1).
        data = sized_bundle("py-alias") + field_bytes(
            12, buffer_spec(64, "f32[4,4]") + field_varint(4, 1))
        program = self.loader.load(data)
        self.assertEqual(program.num_outputs, 2)
        self.assertEqual(program.output_aliases, (None, 1))
        self.loader.launch(program, [0x1100, 0x2200], [0x3300, 0x2200], stream=0x5)
        self.assertEqual(events("copy "), [])
        self.loader.launch(program, [0x1100, 0x2200], [0x3300, 0x4400], stream=0x5)
        self.assertEqual(events("copy "), ["copy to=%d from=%d bytes=64 stream=5"
                                           % (0x4400, 0x2200)])

    def test_shape_generic_programs_launch_at_the_inputs_extent(self):
        program = self.loader.load(bucket_bundle())
        self.assertEqual(program.outer_extent, (33, 64))
        self.assertEqual(program.outer_parameters, (0,))
        self.assertIsNone(self.loader.load(two_kernel_bundle()).outer_extent)
        rows = ShapedTensor(0x1100, (40, 64), 40 * 256)
        self.loader.launch(program, [rows, Tensor(0x2200, 256)], [Tensor(0x3300, 40 * 256)])
        self.loader.launch(program, [0x1100, 0x2200], [0x3300], outer_extent=64)
        norms = [fields(line) for line in events("launch ") if "fn=norm" in line]
        self.assertEqual([int(n["args"].split(",")[-1]) for n in norms], [40, 64])
        # An extent the bundle does not serve, a buffer too small for it, or a bare pointer
        # with no extent: refused, nothing enqueued.
        before = len(events("launch "))
        cases = [
            (dict(inputs=[ShapedTensor(0x1100, (65, 64), 65 * 256), 0x2200], outputs=[0x3300]),
             "serves outer extents 33 to 64, got 65"),
            (dict(inputs=[rows, 0x2200], outputs=[Tensor(0x3300, 39 * 256)]),
             "output 0 is a 9984-byte buffer, but the bundle's output 0 is f32[64,64] at "
             "outer extent 40 (10240 bytes)"),
            (dict(inputs=[0x1100, 0x2200], outputs=[0x3300]),
             "pass outer_extent, or input 0 as a tensor with a shape"),
        ]
        for kwargs, message in cases:
            with self.assertRaises(cuda.LoaderError) as caught:
                self.loader.launch(program, **kwargs)
            self.assertEqual(caught.exception.code, "INVALID_ARGUMENT")
            self.assertIn(message, str(caught.exception))
        self.assertEqual(len(events("launch ")), before)

    def test_load_a_result(self):
        class Result:
            bundle = two_kernel_bundle("from-result")
        self.assertEqual(self.loader.load(Result()).key, "from-result")
        with self.assertRaises(cuda.LoaderError) as caught:
            self.loader.load(Fallback())
        self.assertIn("no daemon", str(caught.exception))

    def test_errors(self):
        with self.assertRaises(cuda.LoaderError) as caught:
            self.loader.load(b"\xff\xff\xff not a bundle")
        self.assertEqual(caught.exception.code, "INVALID_ARGUMENT")
        bad = bundle("bad", [kernel("k", [(INPUT, -1)])])
        with self.assertRaises(cuda.LoaderError) as caught:
            self.loader.load(bad)
        self.assertIn("negative index", str(caught.exception))
        program = self.loader.load(two_kernel_bundle("py-errors"))
        with self.assertRaises(cuda.LoaderError) as caught:
            self.loader.launch(program, [1], [3])
        self.assertEqual(caught.exception.code, "INVALID_ARGUMENT")
        FAKE.stitch_fake_loader_set_context(0)
        with self.assertRaises(cuda.LoaderError) as caught:
            self.loader.launch(program, [1, 2], [3])
        self.assertEqual(caught.exception.code, "FAILED_PRECONDITION")
        self.assertEqual(events("launch "), [])
        with self.assertRaises(TypeError):
            self.loader.launch(program, [1, "two"], [3])

    def test_older_device_is_an_arch_mismatch(self):
        FAKE.stitch_fake_loader_set_cc(8, 0)
        with cuda.Loader(ARGS.fake_driver) as loader:  # the capability is cached per loader
            program = loader.load(two_kernel_bundle("py-old"))
            with self.assertRaises(cuda.ArchMismatchError) as caught:
                loader.launch(program, [1, 2], [3])
        self.assertEqual(str(caught.exception), "bundle targets sm_90 but device 0 is sm_80")
        self.assertEqual(events("load "), [])


def main():
    global cuda, FAKE
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--library", required=True, help="a built libstitch_client.so")
    parser.add_argument("--fake-driver", required=True, help="the loader's stand-in libcuda")
    args, rest = parser.parse_known_args()
    ARGS.__dict__.update(vars(args))
    ARGS.fake_driver = os.path.abspath(args.fake_driver)
    for path in (args.library, ARGS.fake_driver):
        if not os.path.isfile(path):
            print("FAIL: %s does not exist" % path)
            sys.exit(1)
    sys.path.insert(0, str(SOURCE_DIR / "python"))
    os.environ["STITCH_CLIENT_LIBRARY"] = os.path.abspath(args.library)
    import stitch.cuda as module  # noqa: E402 (the path is chosen above)
    cuda = module
    FAKE = ctypes.CDLL(ARGS.fake_driver)
    FAKE.stitch_fake_loader_events.restype = ctypes.c_char_p
    for name in ("stitch_fake_loader_set_cc", "stitch_fake_loader_set_context"):
        getattr(FAKE, name).restype = None
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)


if __name__ == "__main__":
    main()
