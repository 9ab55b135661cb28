#!/usr/bin/env python3
"""The variable-shape workload of the fleet replay: BERT fine-tuning on SQuAD v1.1 with dynamic
padding, whose steps run at as many shapes as its batches have longest sequences.

Every number here is cited in PARAMETERS.md ("Variable-shape workload"):

- SQUAD_TOKENS_PER_8: the tokenized lengths of SQuAD v1.1's 88,641 training features for
  BERT (max_seq_length 384), as published with Krell et al. 2021 ("Efficient Sequence Packing
  without Cross-contamination", arXiv:2107.02027) in github.com/graphcore/examples,
  tutorials/blogs_code/packedBERT/histograms.py (`squad_1_1_histogram`, commit
  2d8b565326ef6ba730492ad8badd984b067645bc), summed over bins of 8 tokens: entry k counts
  the features of 8k+1 to 8k+8 tokens. The last bin holds the 1,054 features truncated at 384.
- BATCH 32, MAX_LENGTH 384: BERT's SQuAD v1.1 fine-tuning (Devlin et al. 2019, section 4.2:
  batch size 32; the reference run_squad.py's max_seq_length 384).
- PAD_MULTIPLE 8: dynamic padding pads each batch to its longest sequence, rounded up to a
  multiple of 8 (Hugging Face's DataCollatorWithPadding(pad_to_multiple_of=8), the setting
  for tensor cores); an assumption that keeps the distinct shapes few, so it is conservative
  for what buckets save.

A step's token count (the model's outer extent, batch x sequence folded into rows) is
BATCH x its padded length. A task of n steps runs at the padded lengths its n batches drew:
distinct_padded_lengths draws the n batch maxima's counts at once (a multinomial over the
padded lengths) and keeps the lengths drawn at least once.
"""

from __future__ import annotations

import numpy as np

SQUAD_TOKENS_PER_8 = (
    0, 0, 0, 0, 24, 269, 672, 816, 999, 1209, 1240, 1302, 1658, 2711, 4525, 5742,
    6326, 6102, 5942, 5641, 4895, 4553, 4146, 3709, 3115, 2768, 2415, 2124, 1931, 1607, 1423, 1299,
    1283, 1064, 956, 738, 816, 624, 575, 452, 410, 310, 309, 284, 174, 150, 157, 1176,
)
SQUAD_FEATURES = 88641
BATCH = 32
MAX_LENGTH = 384
PAD_MULTIPLE = 8
SOURCE = ("SQuAD v1.1 training features tokenized for BERT at max_seq_length 384: the "
          "histogram published with Krell et al. 2021 (arXiv:2107.02027), "
          "github.com/graphcore/examples tutorials/blogs_code/packedBERT/histograms.py")


def padded_lengths() -> np.ndarray:
    """The lengths a batch can be padded to: 8, 16, ..., MAX_LENGTH."""
    return np.arange(1, len(SQUAD_TOKENS_PER_8) + 1) * PAD_MULTIPLE


def length_cdf() -> np.ndarray:
    """P(a feature has at most l tokens), at each padded length l."""
    counts = np.asarray(SQUAD_TOKENS_PER_8, dtype=np.float64)
    return np.cumsum(counts) / counts.sum()


def padded_length_pmf(batch: int = BATCH) -> np.ndarray:
    """P(a batch of `batch` features is padded to l), at each padded length l: the longest of
    `batch` independent draws, rounded up to a multiple of PAD_MULTIPLE."""
    at_most = length_cdf() ** batch
    return np.diff(np.concatenate([[0.0], at_most]))


def distinct_padded_lengths(rng: np.random.Generator, steps: int,
                            batch: int = BATCH) -> list[int]:
    """The padded lengths a task of `steps` steps (at least one) runs at, ascending."""
    counts = rng.multinomial(max(1, int(steps)), padded_length_pmf(batch))
    return [int(l) for l, c in zip(padded_lengths(), counts) if c > 0]


def bucket_top(extent: int) -> int:
    """The top of extent's power-of-two bucket (top/2, top], as the daemon buckets
    (compiler/ir/include/stitch/ir/shape_class.h, BucketOf)."""
    top = 1
    while top < extent:
        top *= 2
    return top


def quantile(q: float) -> int:
    """The least padded length l with P(a feature has at most l tokens) >= q."""
    return int(padded_lengths()[int(np.searchsorted(length_cdf(), q))])


if __name__ == "__main__":
    pmf = padded_length_pmf()
    print("features %d; per-feature length quantiles (to 8 tokens): p50 %d, p90 %d, p99 %d"
          % (sum(SQUAD_TOKENS_PER_8), quantile(0.5), quantile(0.9), quantile(0.99)))
    for length, p in zip(padded_lengths(), pmf):
        if p >= 1e-6:
            print("batch of %d padded to %3d tokens: extent %5d, bucket top %5d, p %.5f"
                  % (BATCH, length, BATCH * length, bucket_top(BATCH * length), p))
