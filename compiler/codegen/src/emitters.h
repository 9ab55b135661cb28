// The loop-nest emitters, one per KernelKind. Each fills the body of kc.fn (whose entry
// block the builder is positioned in) and returns the launch it was written for.
#pragma once

#include "kernel_context.h"

namespace stitch::codegen {

struct EmittedNest {
  LaunchDims launch;
  uint32_t shared_bytes = 0;
  uint32_t dynamic_shared_bytes = 0;
  // The first byte of the kernel's workspace after what the nest uses (0: none used).
  uint64_t workspace_end = 0;
};

// Grid-stride loop over the output elements; every output is computed per element. With
// `allow_tile`, a mapping with a transpose tile runs EmitTransposeTileKernel, except in a
// shape-generic kernel: the tiles are laid out for the graph's exact sizes.
StatusOr<EmittedNest> EmitLoopKernel(KernelContext& kc, bool allow_tile = true);

// A loop kernel that stages its transposed read through shared memory tiles
// (ThreadMapping::transpose_tile); EmitLoopKernel calls it for such a mapping. A block whose
// threads do not cover a tile in whole rows both ways (a baseline model's block size) runs
// the plain loop instead.
StatusOr<EmittedNest> EmitTransposeTileKernel(KernelContext& kc);

// Reduction with the reduced elements of an output walked by a warp (short rows) or a
// block (long rows).
StatusOr<EmittedNest> EmitRowReduceKernel(KernelContext& kc);

// Row reductions stitched with their producers and consumers (row_stitch.h): each group of
// threads walks its rows phase by phase and writes every output of the row.
StatusOr<EmittedNest> EmitRowStitchKernel(KernelContext& kc);

// Reduction where consecutive threads own consecutive outputs and a block's rows of
// threads split the reduced elements.
StatusOr<EmittedNest> EmitColumnReduceKernel(KernelContext& kc);

// Runs the emitter of kc.spec.kind.
StatusOr<EmittedNest> EmitNest(KernelContext& kc);

// A persistent grid running the spec's phases with a grid barrier between each two.
StatusOr<EmittedNest> EmitGlobalStitchKernel(KernelContext& kc);

}  // namespace stitch::codegen
