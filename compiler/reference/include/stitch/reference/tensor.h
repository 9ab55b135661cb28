// Host tensors: values of the reference interpreter, and .npy files.
//
// Thread-safety: plain values; the file functions touch only the paths they are given.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "stitch/base/status.h"
#include "stitch/ir/graph.h"

namespace stitch {

// A dense row-major tensor. Floating-point values are held as doubles (`f`), integers as
// 64-bit two's complement (`i`); exactly one of the two has shape.elements() entries.
struct Tensor {
  Shape shape;
  std::vector<double> f;
  std::vector<int64_t> i;

  // Returns a zero tensor of `shape`.
  static Tensor Zeros(const Shape& shape);
  int64_t size() const { return shape.elements(); }
  // Value at linear index `k` as a double (integers converted).
  double AsDouble(int64_t k) const;
};

// Returns the device storage bytes of `t`: f16/bf16 rounded to nearest even, pred as 0/1
// bytes, integers truncated to their width.
std::vector<uint8_t> ToDeviceBytes(const Tensor& t);

// Builds a tensor of `shape` from device storage bytes; INVALID_ARGUMENT if the size differs.
StatusOr<Tensor> FromDeviceBytes(const Shape& shape, const std::vector<uint8_t>& bytes);

// Rounds a double to the nearest value representable in float dtype `t` (identity for f64).
double RoundToDType(double v, DType t);

// Returns a tensor of `shape` with values drawn from `rng`: floats uniform in [-2, 2) (then
// rounded to the dtype), integers uniform over a small range, pred 0/1.
Tensor RandomTensor(const Shape& shape, std::mt19937_64& rng);

// Returns ToDeviceBytes(RandomTensor(shape, rng)), the same draws, without the tensor of
// doubles between: the inputs of a full-size GPU run.
std::vector<uint8_t> RandomDeviceBytes(const Shape& shape, std::mt19937_64& rng);

// Reads a NumPy .npy file (format 1.0-3.0, C order, little endian; dtypes <f2 <f4 <f8 |i1
// <i4 <i8 |u1 <u4 <u8 |b1). Returns INVALID_ARGUMENT naming the path and what is wrong.
StatusOr<Tensor> ReadNpy(const std::string& path);

// Writes `t` as a .npy file (bf16 is written as float32, which NumPy has no type for).
Status WriteNpy(const std::string& path, const Tensor& t);

}  // namespace stitch
