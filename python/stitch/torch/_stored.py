"""Regions whose 4-d tensors are stored channels-last.

Inductor lays a graph's convolutions out channels-last after the graph was traced row-major
(its layout optimization, on by default), and the pointwise and normalization work around
them follows: a region's 4-d NCHW tensors then arrive as NHWC storage. Such a region is
compiled a second time, with each 4-d parameter and output declared as that storage and
transposed to and from NCHW in its HLO (``_lowering.lower_region(channels_last=True)``);
stitchd's compiler folds the transposes into the ops between (``layout_transposes.h``), so the
kernels read and write the storage as it is. A call whose 4-d inputs are all stored so
launches those kernels on the storage (no copy) and returns its 4-d outputs stored so too;
any other call takes the region's row-major kernels.
"""

from __future__ import annotations

import dataclasses
from typing import Any, List, Optional, Sequence, Union

import torch

from . import _lowering
from ._executor import RegionKernels


def is_channels_last(x: Any) -> bool:
    """True for a 4-d tensor stored channels-last and not also row-major (a tensor with a
    single channel or pixel is both; it counts as row-major)."""
    return (isinstance(x, torch.Tensor) and x.dim() == 4 and not x.is_contiguous()
            and x.is_contiguous(memory_format=torch.channels_last))


def all_channels_last(inputs: Sequence[torch.Tensor]) -> bool:
    """True when the call has a 4-d input stored channels-last and every other 4-d input is
    stored so too, or lies the same either way (a single channel or pixel: a per-channel
    scale of shape [1, C, 1, 1])."""
    four_d = [x for x in inputs if x.dim() == 4]
    return any(is_channels_last(x) for x in four_d) and all(
        x.is_contiguous(memory_format=torch.channels_last) for x in four_d)


def channels_last_like(shape: Sequence[Any], dtype: torch.dtype,
                       device: torch.device) -> torch.Tensor:
    """An empty tensor of ``shape``: stored channels-last where it is 4-d."""
    x = torch.empty(tuple(shape), dtype=dtype, device=device)
    return x.contiguous(memory_format=torch.channels_last) if x.dim() == 4 else x


@dataclasses.dataclass
class StoredRegion:
    """A region's kernels over channels-last storage: ``kernels`` take each 4-d input as its
    NHWC storage and write each 4-d output so."""

    kernels: RegionKernels

    def run(self, executor: Any, inputs: Sequence[torch.Tensor]) -> List[torch.Tensor]:
        """Launches the kernels on channels-last ``inputs`` (all_channels_last); returns the
        outputs, 4-d ones as NCHW views of their channels-last storage."""
        stored = [x.permute(*_lowering.NHWC_OF_NCHW) if x.dim() == 4 else x.contiguous()
                  for x in inputs]
        outputs = executor.run(self.kernels, stored)
        return [o.permute(*_lowering.NCHW_OF_NHWC) if o.dim() == 4 else o for o in outputs]


def compile_stored(region: Any, client: Any) -> Union[StoredRegion, str]:
    """The channels-last variant of a StitchedRegion of static sizes, compiled by ``client``'s
    daemon for the region's target; or why there is none."""
    if region.shapes.symbolic or region.shapes.size_positions:
        return "its sizes are symbolic"
    strided = [op for op in region.info.ops if "as_strided" in op]
    if strided:
        # as_strided reads its input's storage at strides traced for row-major storage.
        return "%s reads storage at row-major strides" % strided[0]
    name = region.info.name.replace(".", "_") + "_channels_last"
    try:
        lowered = _lowering.lower_region(region.fallback, name, channels_last=True)
    except _lowering.Unsupported as e:
        return str(e)
    target = region.kernels.target
    result = client.compile(lowered.hlo, target)
    if not result.ok:
        return "stitchd: %s" % result.reason
    return StoredRegion(RegionKernels(result.key, target, result.bundle, lowered.hlo,
                                      lowered.outputs, inputs=lowered.inputs))


def random_channels_last(inputs: Sequence[Any]) -> List[Any]:
    """``inputs`` with every 4-d tensor stored channels-last, as Inductor hands them over."""
    return [x.contiguous(memory_format=torch.channels_last)
            if isinstance(x, torch.Tensor) and x.dim() == 4 else x for x in inputs]

