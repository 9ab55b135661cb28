"""The layout of the frameworks' outputs in bench/gpu/frameworks.py, on PyTorch's CPU.

The suite's graphs return dense row-major arrays. PyTorch's permute is a strided view, which
torch.compile returns as it is, leaving the transposition to a later reader; the benchmark's
graphs therefore make every output contiguous, and a graph output that is already dense (a
reshaped input) stays a view of its input, as stitch's bundle aliases it. Checked on a random
input from a logged seed (STITCH_TEST_SEED replays it).

  python frameworks_layout_test.py [unittest flags]
"""

import os
import sys
import time
import unittest

HERE = os.path.dirname(os.path.realpath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench", "gpu"))

import torch  # noqa: E402

from stitch_graph import Graph, build_function  # noqa: E402
from torch_backend import TorchBackend  # noqa: E402

SEED = int(os.environ.get("STITCH_TEST_SEED", time.time_ns() % (1 << 32)))
print(f"frameworks_layout_test: seed {SEED} (STITCH_TEST_SEED={SEED} replays it)", file=sys.stderr)


def shape(dims):
    return {"dtype": "F32", "dims": [str(d) for d in dims]}


# relu(x) transposed, x reshaped, and x + 1 broadcast from [1, 5] to [3, 5]: an [M, N] input.
GRAPH = {
    "name": "layouts",
    "nodes": [
        {"op": "PARAMETER", "shape": shape([3, 5])},                                   # 0
        {"op": "CONSTANT", "shape": shape([]), "literal": {"f": [0.0]}},               # 1
        {"op": "BROADCAST", "shape": shape([3, 5]), "operands": ["1"]},                # 2
        {"op": "MAX", "shape": shape([3, 5]), "operands": ["0", "2"]},                 # 3
        {"op": "TRANSPOSE", "shape": shape([5, 3]), "operands": ["3"],
         "dimensions": ["1", "0"]},                                                    # 4
        {"op": "RESHAPE", "shape": shape([15]), "operands": ["0"]},                    # 5
        {"op": "PARAMETER", "shape": shape([1, 5]), "parameter_number": "1"},          # 6
        {"op": "BROADCAST", "shape": shape([3, 5]), "operands": ["6"],
         "dimensions": ["0", "1"]},                                                    # 7
    ],
    "outputs": ["4", "5", "7"],
}


class OutputLayoutTest(unittest.TestCase):
    def test_outputs_are_dense_and_reshaped_inputs_stay_views(self):
        generator = torch.Generator().manual_seed(SEED)
        x = torch.randn(3, 5, generator=generator)
        row = torch.randn(1, 5, generator=generator)
        transposed, flat, broadcast = build_function(Graph(GRAPH), TorchBackend("cpu"))(x, row)

        self.assertTrue(transposed.is_contiguous())
        self.assertEqual(transposed.stride(), (3, 1))
        torch.testing.assert_close(transposed, torch.relu(x).t(), rtol=0, atol=0)

        self.assertTrue(broadcast.is_contiguous())
        self.assertEqual(broadcast.stride(), (5, 1))
        torch.testing.assert_close(broadcast, row.expand(3, 5), rtol=0, atol=0)

        # The reshaped input is the input's storage, not a copy of it.
        self.assertEqual(flat.data_ptr(), x.data_ptr())
        torch.testing.assert_close(flat, x.reshape(15), rtol=0, atol=0)


if __name__ == "__main__":
    unittest.main()
