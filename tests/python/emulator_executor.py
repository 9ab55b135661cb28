"""A test-only executor for stitch.torch: runs each region on the compiler's host emulator.

There is no GPU in CI, so the framework tests launch stitched regions here instead: each call
writes the region's inputs as .npy files and runs ``stitchctl run --emulate`` on the region's
signature, which compiles it with the compiler's library for the bundle's target and runs its
kernels on the emulator, and reads the outputs back. A bundle that serves a bucket of outer
extents is compiled the same way (``--outer-parameters``): for the bucket's top extent, and run
at the call's. ``stitchctl`` also checks each output against the reference interpreter; every
run's report is kept in ``runs``.
"""

import json
import pathlib
import subprocess
import tempfile

import numpy
import torch

import stitch.cuda
import stitch.torch


class EmulatorExecutor(stitch.torch.Executor):
    """Emulates a GPU of compute capability ``capability`` on CPU tensors."""

    def __init__(self, stitchctl, capability=(9, 0)):
        self.stitchctl = stitchctl
        self.capability = capability
        self.runs = []  # stitchctl's JSON report of each run
        self._dir = pathlib.Path(tempfile.mkdtemp(prefix="stitch-emulate-"))

    def device_target(self, device):
        return "sm_%d%d" % self.capability

    def check(self, target, device):
        try:
            stitch.cuda.check_target(target, self.capability, has_cubin=False)
        except stitch.cuda.LoaderError as e:
            return str(e)
        return None

    def run(self, kernels, inputs):
        work = pathlib.Path(tempfile.mkdtemp(dir=self._dir))
        (work / "region.hlo").write_text(kernels.hlo)
        paths = []
        for i, x in enumerate(inputs):
            path = work / ("in%d.npy" % i)
            if kernels.inputs:  # as the signature declares it (rows split by the extent)
                x = x.reshape(kernels.inputs[i][0])
            numpy.save(path, x.detach().cpu().numpy())
            paths.append(str(path))
        command = [self.stitchctl, "run", str(work / "region.hlo"), "--emulate", "--json",
                   "--target", kernels.target, "--outputs", str(work / "out")]
        if paths:
            command += ["--inputs", ",".join(paths)]
        if kernels.outer_parameters:
            command += ["--outer-parameters", ",".join(map(str, kernels.outer_parameters))]
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        if done.returncode != 0 and not done.stdout.strip():
            raise RuntimeError("stitchctl run: %s" % done.stderr.strip())
        report = json.loads(done.stdout)
        self.runs.append({"key": kernels.key, "served": kernels.served, "report": report})
        outputs = []
        for k, (shape, dtype) in enumerate(kernels.outputs):
            array = numpy.load(work / "out" / ("graph0_out%d.npy" % k))
            outputs.append(torch.from_numpy(array).to(dtype).reshape(shape))
        return outputs
