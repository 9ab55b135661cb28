// Requests the integration tests send: HLO softmaxes of any shape (each shape a distinct
// key) and long elementwise chains that take a while to compile.
#pragma once

#include <string>

#include "stitch/v1/kernel_service.pb.h"

namespace stitch::testing {

// A row softmax over [rows, cols]; each shape is a distinct key.
inline std::string SoftmaxHlo(int rows, int cols) {
  std::string r = std::to_string(rows), c = std::to_string(cols);
  return "HloModule softmax_" + r + "x" + c + R"(
max_f {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}
add_f {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  p = f32[)" +
         r + "," + c + R"(] parameter(0)
  lo = f32[] constant(-3e38)
  m = f32[)" +
         r + R"(] reduce(p, lo), dimensions={1}, to_apply=max_f
  mb = f32[)" +
         r + "," + c + R"(] broadcast(m), dimensions={0}
  s = f32[)" +
         r + "," + c + R"(] subtract(p, mb)
  e = f32[)" +
         r + "," + c + R"(] exponential(s)
  z = f32[] constant(0)
  sum = f32[)" +
         r + R"(] reduce(e, z), dimensions={1}, to_apply=add_f
  sb = f32[)" +
         r + "," + c + R"(] broadcast(sum), dimensions={0}
  ROOT d = f32[)" +
         r + "," + c + R"(] divide(e, sb)
}
)";
}

inline v1::CompileRequest HloRequest(const std::string& text) {
  v1::CompileRequest r;
  r.set_hlo_text(text);
  return r;
}

// A chain of `length` elementwise ops: slow enough to compile that a test can act while
// the compile is in flight.
inline v1::CompileRequest LongChainRequest(int length, int width) {
  v1::Graph g;
  g.set_name("chain");
  v1::Node* p = g.add_nodes();
  p->set_op(v1::PARAMETER);
  p->mutable_shape()->set_dtype(v1::F32);
  p->mutable_shape()->add_dims(width);
  p->set_parameter_number(0);
  for (int i = 0; i < length; ++i) {
    v1::Node* n = g.add_nodes();
    n->set_op(i % 3 == 0 ? v1::TANH : (i % 3 == 1 ? v1::EXP : v1::SIN));
    *n->mutable_shape() = p->shape();
    n->add_operands(i);
  }
  g.add_outputs(length);
  v1::CompileRequest r;
  *r.mutable_graph() = g;
  return r;
}

}  // namespace stitch::testing
