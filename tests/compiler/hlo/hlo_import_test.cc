// Tests of the HLO text importer on whole texts: every file of the corpus has its expected
// outcome, and mutated texts never crash it. hlo_syntax_test.cc tests each syntax feature
// and error.
#include "stitch/hlo/hlo_import.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include "hlo_test_util.h"
#include "stitch/ir/verifier.h"

namespace stitch {
namespace {

namespace fs = std::filesystem;
using testing::Opts;

std::string CorpusHloDir() { return std::string(STITCH_CORPUS_DIR) + "/hlo"; }

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// ---------------------------------------------------------------------------------------
// The corpus: every file has an expected outcome.

enum Expect { kImports, kRejected, kMalformed };

struct CorpusCase {
  const char* file;  // relative to corpus/hlo
  Expect expect;
  const char* message;  // kRejected / kMalformed: a substring of the error message
};

const CorpusCase kCorpus[] = {
    {"extracted/attention_softcap_mask_softmax_transpose_bf16.hlo", kImports, ""},
    {"extracted/batchnorm_grad_op.hlo", kImports, ""},
    {"extracted/batchnorm_training_op.hlo", kImports, ""},
    {"extracted/bn_stats_reduce_mof_f16.hlo", kImports, ""},
    {"extracted/bn_stats_sibling_reduce_128x512x28x28.hlo", kMalformed,
     "unknown computation 'scalar_add_computation'"},
    {"extracted/convert_into_reduce_bf16_1024x8192.hlo", kImports, ""},
    {"extracted/layernorm_fwd_2d1_f32.hlo", kImports, ""},
    {"extracted/layernorm_fwd_4d12_f32.hlo", kImports, ""},
    {"extracted/layernorm_fwd_4d3_f16_convert.hlo", kImports, ""},
    {"extracted/layernorm_fwd_4d3_f32.hlo", kImports, ""},
    {"extracted/layernorm_onednn_bf16.hlo", kImports, ""},
    {"extracted/layernorm_onednn_f16.hlo", kImports, ""},
    {"extracted/layernorm_train_4d3_f32.hlo", kImports, ""},
    {"extracted/layernorm_train_bwd_2d1_f32.hlo", kImports, ""},
    {"extracted/layernorm_train_bwd_4d3_f32.hlo", kImports, ""},
    {"extracted/layernorm_var_mof_2x384x1024.hlo", kImports, ""},
    {"extracted/nonminor_transpose_into_reduce.hlo", kImports, ""},
    {"extracted/reduction_epilogue_bf16_8192x2752.hlo", kImports, ""},
    {"extracted/rmsnorm_diamond_f32.hlo", kImports, ""},
    {"extracted/rmsnorm_swish_combined_bf16_jax.hlo", kImports, ""},
    {"extracted/rng_bit_generator_threefry.hlo", kRejected, "'rng-bit-generator'"},
    {"extracted/softmax_axis0_f32.hlo", kImports, ""},
    {"extracted/softmax_bf16_convert_f32.hlo", kImports, ""},
    {"extracted/softmax_diamond_8192x50304_gpt_vocab.hlo", kImports, ""},
    {"extracted/softmax_exact_bf16_127x125.hlo", kImports, ""},
    {"extracted/softmax_exact_f64_127x125.hlo", kImports, ""},
    {"extracted/softmax_triton_numerics.hlo", kImports, ""},
    {"extracted/split_reduction_transpose_f16.hlo", kImports, ""},
    {"extracted/tanh_elementwise_into_small_reduce.hlo", kImports, ""},
    {"extracted/tiled_reduce_transpose_mof.hlo", kImports, ""},
    {"extracted/transpose_into_reduce_1500x32x128.hlo", kImports, ""},
    {"parser_coverage/hlo_to_mhlo_attributes.hlo", kRejected, "'dot'"},
    {"parser_coverage/hlo_to_mhlo_fully_connected_reference_model.hlo", kRejected, "'dot'"},
    {"parser_coverage/hlo_to_mhlo_fusion.hlo", kImports, ""},
    {"parser_coverage/hlo_to_mhlo_import.hlo", kImports, ""},
    {"parser_coverage/hlo_to_mhlo_layouts_and_names.hlo", kRejected, "'convolution'"},
    {"parser_coverage/hlo_to_mhlo_types.hlo", kImports, ""},
    {"real_models/jax_issue26162_mof_reshapes.hlo", kImports, ""},
    {"real_models/jax_threefry_rng_giant_loop_fusion.hlo", kImports, ""},
    {"real_models/mobilenet_v2_pytorchxla_train_bs96.hlo", kRejected, "'convolution'"},
    {"tf_gpu_tests_efficientnet_bn_grad_swish.hlo", kImports, ""},
    {"tf_gpu_tests_resnet_bn_grad_relu_grad_fusion.hlo", kImports, ""},
    {"tf_gpu_tests_row_broadcast_variants.hlo", kImports, ""},
    {"xla_emit_concatenate_concat_1d.hlo", kImports, ""},
    {"xla_emit_concatenate_multiple_roots_epilogue.hlo", kImports, ""},
    {"xla_emit_concatenate_prologue_epilogue.hlo", kImports, ""},
    {"xla_emit_input_slices_simple.hlo", kImports, ""},
    {"xla_emit_loop_broadcast.hlo", kImports, ""},
    {"xla_emit_loop_iota_copy_bitcast.hlo", kImports, ""},
    {"xla_emit_loop_minimum_maximum.hlo", kImports, ""},
    {"xla_emit_loop_no_duplication.hlo", kImports, ""},
    {"xla_emit_loop_pred_mul.hlo", kImports, ""},
    {"xla_emit_loop_tuple_heterogeneous.hlo", kImports, ""},
    {"xla_emit_loop_two_users.hlo", kImports, ""},
    {"xla_emit_loop_variadic_reduce.hlo", kImports, ""},
    {"xla_emit_reduce_column_horizontal_fusion_two_groups.hlo", kImports, ""},
    {"xla_emit_reduce_column_mof_heteorgeneous_input_shapes.hlo", kImports, ""},
    {"xla_emit_reduce_column_odd_sizes.hlo", kImports, ""},
    {"xla_emit_reduce_column_small.hlo", kImports, ""},
    {"xla_emit_reduce_column_small_f32_2.hlo", kImports, ""},
    {"xla_emit_reduce_column_small_f32_32_v2.hlo", kImports, ""},
    {"xla_emit_reduce_column_small_input_layout.hlo", kImports, ""},
    {"xla_emit_reduce_column_vectorize_x2_f32.hlo", kImports, ""},
    {"xla_emit_reduce_multirow_f16_v4.hlo", kImports, ""},
    {"xla_emit_reduce_multirow_f32_x8.hlo", kImports, ""},
    {"xla_emit_reduce_multirow_maximum_vector_size.hlo", kImports, ""},
    {"xla_emit_reduce_multirow_pred_mof_x2_v4.hlo", kImports, ""},
    {"xla_emit_reduce_row_epilogue.hlo", kImports, ""},
    {"xla_emit_reduce_row_inefficient_codegen.hlo", kImports, ""},
    {"xla_emit_reduce_row_large_to_unit.hlo", kImports, ""},
    {"xla_emit_reduce_row_layout.hlo", kImports, ""},
    {"xla_emit_reduce_row_minor_and_major.hlo", kImports, ""},
    {"xla_emit_reduce_row_mof_epilogue.hlo", kImports, ""},
    {"xla_emit_reduce_row_mof_scalar_variadic.hlo", kImports, ""},
    {"xla_emit_reduce_row_mof_variadic_variadic.hlo", kImports, ""},
    {"xla_emit_reduce_row_reduction_groups.hlo", kImports, ""},
    {"xla_emit_reduce_row_side_output.hlo", kImports, ""},
    {"xla_emit_reduce_row_side_output_broadcast.hlo", kImports, ""},
    {"xla_emit_reduce_row_side_output_unsigned.hlo", kImports, ""},
    {"xla_emit_reduce_row_small_f64.hlo", kImports, ""},
    {"xla_emit_reduce_row_variadic_f32.hlo", kImports, ""},
    {"xla_emit_transpose_1302.hlo", kImports, ""},
    {"xla_emit_transpose_epilogue.hlo", kImports, ""},
    {"xla_emit_transpose_fused_transpose_021.hlo", kImports, ""},
    {"xla_emit_transpose_fused_transpose_102.hlo", kImports, ""},
    {"xla_emit_transpose_fused_transpose_210.hlo", kImports, ""},
    {"xla_emit_transpose_mixed_indexing.hlo", kImports, ""},
    {"xla_emit_transpose_multiple_roots.hlo", kImports, ""},
    {"xla_emit_transpose_partial_tile.hlo", kImports, ""},
    {"xla_emit_transpose_prefer_large_vectors_210.hlo", kImports, ""},
    {"xla_emit_transpose_side_output_and_hero_indexing_match.hlo", kImports, ""},
    {"xla_emit_transpose_side_outputs.hlo", kImports, ""},
    {"xla_emit_transpose_side_outputs_inplace.hlo", kImports, ""},
    {"xla_emit_transpose_transpose_021_vectorized.hlo", kImports, ""},
    {"xla_emit_transpose_transpose_10.hlo", kImports, ""},
    {"xla_emit_transpose_transpose_102.hlo", kImports, ""},
    {"xla_emit_transpose_transpose_201_simplified_to_021.hlo", kImports, ""},
    {"xla_gpu_tests_2023_concat.hlo", kImports, ""},
    {"xla_gpu_tests_2023_copy_nested.hlo", kImports, ""},
    {"xla_gpu_tests_2023_fused_slice.hlo", kImports, ""},
    {"xla_gpu_tests_2023_launch_dimensions.hlo", kImports, ""},
    {"xla_gpu_tests_2023_reduce_unnested.hlo", kRejected, "'c128'"},
    {"xla_gpu_tests_2023_reduction_vectorization_sm_all.hlo", kImports, ""},
    {"xla_gpu_tests_reduce_column_layout_change.hlo", kImports, ""},
    {"xla_gpu_tests_reduce_row_vectorized.hlo", kImports, ""},
};

TEST(HloCorpus, EveryFileBehavesAsListed) {
  std::set<std::string> on_disk;
  for (const auto& e : fs::recursive_directory_iterator(CorpusHloDir())) {
    if (e.is_regular_file() && e.path().extension() == ".hlo") {
      on_disk.insert(fs::relative(e.path(), CorpusHloDir()).generic_string());
    }
  }
  std::set<std::string> listed;
  int imported = 0;
  for (const auto& c : kCorpus) {
    SCOPED_TRACE(c.file);
    listed.insert(c.file);
    std::string text = ReadFile(CorpusHloDir() + "/" + c.file);
    ASSERT_FALSE(text.empty()) << "missing corpus file";
    auto r = ImportHloModules(text, Opts(c.file));
    switch (c.expect) {
      case kImports:
        ASSERT_TRUE(r.ok()) << r.status().ToString();
        EXPECT_FALSE(r->empty());
        for (const auto& g : *r) {
          Status st = Verify(g);
          EXPECT_TRUE(st.ok()) << st.ToString();
          EXPECT_FALSE(g.outputs.empty());
        }
        ++imported;
        break;
      case kRejected:
        ASSERT_FALSE(r.ok());
        EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented) << r.status().ToString();
        EXPECT_NE(r.status().message().find(c.message), std::string::npos) << r.status().ToString();
        EXPECT_NE(r.status().message().find(std::string(c.file) + ":"), std::string::npos)
            << r.status().ToString();
        break;
      case kMalformed:
        ASSERT_FALSE(r.ok());
        EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
        EXPECT_NE(r.status().message().find(c.message), std::string::npos) << r.status().ToString();
        break;
    }
  }
  for (const auto& f : on_disk) EXPECT_TRUE(listed.count(f)) << f << " is not in kCorpus";
  for (const auto& f : listed) EXPECT_TRUE(on_disk.count(f)) << f << " is listed but absent";
  EXPECT_EQ(on_disk.size(), 105u);
  EXPECT_GE(imported, 80);
  printf("corpus: %d of %zu files import\n", imported, on_disk.size());
}

// ---------------------------------------------------------------------------------------
// Mutations: whatever the text, the importer returns.

std::string Mutate(const std::string& s, std::mt19937_64& rng) {
  if (s.empty()) return s;
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % std::max<size_t>(n, 1)); };
  std::string t = s;
  switch (rng() % 9) {
    case 0:  // delete a character
      t.erase(pick(t.size()), 1);
      break;
    case 1: {  // duplicate a span
      size_t p = pick(t.size()), n = 1 + pick(40);
      t.insert(p, t.substr(p, n));
      break;
    }
    case 2: {  // swap two characters
      size_t a = pick(t.size()), b = pick(t.size());
      std::swap(t[a], t[b]);
      break;
    }
    case 3: {  // delete a line
      size_t p = t.find('\n', pick(t.size()));
      size_t q = p == std::string::npos ? std::string::npos : t.find('\n', p + 1);
      if (p != std::string::npos) t.erase(p, q == std::string::npos ? std::string::npos : q - p);
      break;
    }
    case 4: {  // duplicate a line
      size_t p = t.find('\n', pick(t.size()));
      size_t q = p == std::string::npos ? std::string::npos : t.find('\n', p + 1);
      if (p != std::string::npos && q != std::string::npos) t.insert(q, t.substr(p, q - p));
      break;
    }
    case 5: {  // replace a number by a huge, negative or zero one
      static const char* repl[] = {
          "99999999999999999999", "-1",         "0",     "9223372036854775807",
          "-9223372036854775808", "4294967296", "1e308", "nan"};
      size_t p = pick(t.size());
      while (p < t.size() && !std::isdigit(static_cast<unsigned char>(t[p]))) ++p;
      size_t q = p;
      while (q < t.size() && std::isdigit(static_cast<unsigned char>(t[q]))) ++q;
      if (p < t.size()) t.replace(p, q - p, repl[pick(8)]);
      break;
    }
    case 6:  // truncate
      t.resize(pick(t.size()));
      break;
    case 7: {  // insert a structural character
      static const char chars[] = "{}()[],=%:<>\"/*";
      t.insert(pick(t.size()), 1, chars[pick(sizeof(chars) - 1)]);
      break;
    }
    case 8: {  // swap two tokens (whitespace-separated words)
      size_t a = t.find(' ', pick(t.size())), b = t.find(' ', pick(t.size()));
      if (a == std::string::npos || b == std::string::npos || a == b) break;
      if (a > b) std::swap(a, b);
      size_t ae = t.find_first_of(" \n", a + 1), be = t.find_first_of(" \n", b + 1);
      if (ae == std::string::npos || be == std::string::npos || ae > b) break;
      std::string wa = t.substr(a + 1, ae - a - 1), wb = t.substr(b + 1, be - b - 1);
      t.replace(b + 1, wb.size(), wa);
      t.replace(a + 1, wa.size(), wb);
      break;
    }
  }
  return t;
}

TEST(HloMutation, MutatedCorpusTextsNeverCrash) {
  const uint64_t seed =
      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  printf("mutation seed: %llu\n", static_cast<unsigned long long>(seed));
  RecordProperty("seed", std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::vector<std::string> files;
  for (const auto& c : kCorpus) {
    std::string f = c.file;
    if (f.find("real_models/") == 0 || f.find("hlo_to_mhlo_import") != std::string::npos) continue;
    files.push_back(f);
  }
  std::shuffle(files.begin(), files.end(), rng);
  files.resize(20);
  int ok = 0, failed = 0;
  for (const auto& f : files) {
    const std::string text = ReadFile(CorpusHloDir() + "/" + f);
    for (int k = 0; k < 15; ++k) {
      std::string t = text;
      int rounds = 1 + static_cast<int>(rng() % 3);
      for (int j = 0; j < rounds; ++j) t = Mutate(t, rng);
      SCOPED_TRACE(f + " mutation " + std::to_string(k) + " seed " + std::to_string(seed));
      auto r = ImportHloModules(t, Opts(f));
      if (r.ok()) {
        ++ok;
        for (const auto& g : *r) EXPECT_TRUE(Verify(g).ok());
      } else {
        ++failed;
        EXPECT_FALSE(r.status().message().empty());
      }
      auto e = ExtractMemoryIntensiveSubgraphs(t, Opts(f));
      if (!e.ok()) {
        EXPECT_FALSE(e.status().message().empty());
      }
    }
  }
  printf("mutations: %d imported, %d rejected\n", ok, failed);
  EXPECT_EQ(ok + failed, 300);
}

}  // namespace
}  // namespace stitch
