// Host replacements for the libdevice functions the codegen may call. They follow the C
// library's semantics, which is what libdevice's accurate (non-fast) versions match up to
// a few ulp.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <unordered_set>

#include "runtime.h"

namespace stitch::emu {
namespace {

using F1 = float (*)(float);
using F2 = float (*)(float, float);
using F3 = float (*)(float, float, float);
using D1 = double (*)(double);
using D2 = double (*)(double, double);
using D3 = double (*)(double, double, double);

// EmulatorOptions::approximate_math_error of the launch running on this thread.
thread_local double tls_approximate_error = 0;

// An approximate instruction's result at the error bound: larger in magnitude.
float AtTheBound(float exact) {
  return static_cast<float>(static_cast<double>(exact) * (1.0 + tls_approximate_error));
}

// A subnormal `x` as `.ftz` instructions see it: zero of its sign.
float FlushSubnormal(float x) {
  return std::fabs(x) < std::numeric_limits<float>::min() ? std::copysign(0.0f, x) : x;
}

template <typename Fn>
void Add(RuntimeSymbols& out, const char* name, Fn fn) {
  out.emplace_back(name, reinterpret_cast<void*>(fn));
}

}  // namespace

void AppendLibdeviceSymbols(RuntimeSymbols& out) {
  // float, one argument
  Add<F1>(out, "__nv_expf", [](float x) { return std::exp(x); });
  // ex2.approx.ftz.f32 of the f32 product x * log2(e), as the GPU computes it
  // (DefineFlushToZeroApproximations): the product's rounding exactly, the ex2 at the bound,
  // subnormal results flushed to zero.
  Add<F1>(out, "__nv_fast_expf",
          [](float x) { return FlushSubnormal(AtTheBound(std::exp2(x * 1.44269504f))); });
  Add<F1>(out, "__nv_exp2f", [](float x) { return std::exp2(x); });
  Add<F1>(out, "__nv_exp10f", [](float x) { return std::pow(10.0f, x); });
  Add<F1>(out, "__nv_fast_exp10f", [](float x) { return std::pow(10.0f, x); });
  Add<F1>(out, "__nv_expm1f", [](float x) { return std::expm1(x); });
  Add<F1>(out, "__nv_logf", [](float x) { return std::log(x); });
  Add<F1>(out, "__nv_fast_logf", [](float x) { return std::log(x); });
  Add<F1>(out, "__nv_log2f", [](float x) { return std::log2(x); });
  Add<F1>(out, "__nv_fast_log2f", [](float x) { return std::log2(x); });
  Add<F1>(out, "__nv_log10f", [](float x) { return std::log10(x); });
  Add<F1>(out, "__nv_fast_log10f", [](float x) { return std::log10(x); });
  Add<F1>(out, "__nv_log1pf", [](float x) { return std::log1p(x); });
  Add<F1>(out, "__nv_logbf", [](float x) { return std::logb(x); });
  Add<F1>(out, "__nv_sinf", [](float x) { return std::sin(x); });
  Add<F1>(out, "__nv_fast_sinf", [](float x) { return std::sin(x); });
  Add<F1>(out, "__nv_cosf", [](float x) { return std::cos(x); });
  Add<F1>(out, "__nv_fast_cosf", [](float x) { return std::cos(x); });
  Add<F1>(out, "__nv_tanf", [](float x) { return std::tan(x); });
  Add<F1>(out, "__nv_fast_tanf", [](float x) { return std::tan(x); });
  Add<F1>(out, "__nv_asinf", [](float x) { return std::asin(x); });
  Add<F1>(out, "__nv_acosf", [](float x) { return std::acos(x); });
  Add<F1>(out, "__nv_atanf", [](float x) { return std::atan(x); });
  Add<F1>(out, "__nv_sinhf", [](float x) { return std::sinh(x); });
  Add<F1>(out, "__nv_coshf", [](float x) { return std::cosh(x); });
  Add<F1>(out, "__nv_tanhf", [](float x) { return std::tanh(x); });
  Add<F1>(out, "__nv_asinhf", [](float x) { return std::asinh(x); });
  Add<F1>(out, "__nv_acoshf", [](float x) { return std::acosh(x); });
  Add<F1>(out, "__nv_atanhf", [](float x) { return std::atanh(x); });
  Add<F1>(out, "__nv_erff", [](float x) { return std::erf(x); });
  Add<F1>(out, "__nv_erfcf", [](float x) { return std::erfc(x); });
  Add<F1>(out, "__nv_lgammaf", [](float x) { return std::lgamma(x); });
  Add<F1>(out, "__nv_tgammaf", [](float x) { return std::tgamma(x); });
  Add<F1>(out, "__nv_cbrtf", [](float x) { return std::cbrt(x); });
  Add<F1>(out, "__nv_rcbrtf", [](float x) { return 1.0f / std::cbrt(x); });
  Add<F1>(out, "__nv_sqrtf", [](float x) { return std::sqrt(x); });
  Add<F1>(out, "__nv_fsqrt_rn", [](float x) { return std::sqrt(x); });
  // rsqrt.approx.f32 and div.approx.f32: see EmulatorOptions::approximate_math_error.
  Add<F1>(out, "__nv_rsqrtf", [](float x) { return AtTheBound(1.0f / std::sqrt(x)); });
  Add<F1>(out, "__nv_frcp_rn", [](float x) { return 1.0f / x; });
  Add<F1>(out, "__nv_floorf", [](float x) { return std::floor(x); });
  Add<F1>(out, "__nv_ceilf", [](float x) { return std::ceil(x); });
  Add<F1>(out, "__nv_roundf", [](float x) { return std::round(x); });
  Add<F1>(out, "__nv_rintf", [](float x) { return std::rint(x); });
  Add<F1>(out, "__nv_nearbyintf", [](float x) { return std::nearbyint(x); });
  Add<F1>(out, "__nv_truncf", [](float x) { return std::trunc(x); });
  Add<F1>(out, "__nv_fabsf", [](float x) { return std::fabs(x); });
  Add<F1>(out, "__nv_saturatef", [](float x) { return x > 1.0f ? 1.0f : (x >= 0.0f ? x : 0.0f); });
  // float, two and three arguments
  Add<F2>(out, "__nv_powf", [](float x, float y) { return std::pow(x, y); });
  Add<F2>(out, "__nv_fast_powf", [](float x, float y) { return std::pow(x, y); });
  Add<F2>(out, "__nv_atan2f", [](float x, float y) { return std::atan2(x, y); });
  Add<F2>(out, "__nv_fmodf", [](float x, float y) { return std::fmod(x, y); });
  Add<F2>(out, "__nv_remainderf", [](float x, float y) { return std::remainder(x, y); });
  Add<F2>(out, "__nv_fminf", [](float x, float y) { return std::fmin(x, y); });
  Add<F2>(out, "__nv_fmaxf", [](float x, float y) { return std::fmax(x, y); });
  Add<F2>(out, "__nv_hypotf", [](float x, float y) { return std::hypot(x, y); });
  Add<F2>(out, "__nv_copysignf", [](float x, float y) { return std::copysign(x, y); });
  Add<F2>(out, "__nv_fdimf", [](float x, float y) { return std::fdim(x, y); });
  Add<F2>(out, "__nv_fdividef", [](float x, float y) { return x / y; });
  // The dividend times rcp.approx.ftz.f32 of the divisor (DefineFlushToZeroApproximations): a
  // subnormal divisor is zero of its sign and a reciprocal below the normal range is flushed,
  // while the multiply, an ordinary one, keeps a subnormal dividend or quotient.
  Add<F2>(out, "__nv_fast_fdividef", [](float x, float y) {
    const float divisor = FlushSubnormal(y);
    const float reciprocal = FlushSubnormal(1.0f / divisor);
    return reciprocal == 0.0f ? x * reciprocal : AtTheBound(x / divisor);
  });
  Add<F2>(out, "__nv_fdiv_rn", [](float x, float y) { return x / y; });
  Add<F3>(out, "__nv_fmaf", [](float x, float y, float z) { return std::fma(x, y, z); });
  Add<F3>(out, "__nv_fmaf_rn", [](float x, float y, float z) { return std::fma(x, y, z); });
  // double
  Add<D1>(out, "__nv_exp", [](double x) { return std::exp(x); });
  Add<D1>(out, "__nv_exp2", [](double x) { return std::exp2(x); });
  Add<D1>(out, "__nv_exp10", [](double x) { return std::pow(10.0, x); });
  Add<D1>(out, "__nv_expm1", [](double x) { return std::expm1(x); });
  Add<D1>(out, "__nv_log", [](double x) { return std::log(x); });
  Add<D1>(out, "__nv_log2", [](double x) { return std::log2(x); });
  Add<D1>(out, "__nv_log10", [](double x) { return std::log10(x); });
  Add<D1>(out, "__nv_log1p", [](double x) { return std::log1p(x); });
  Add<D1>(out, "__nv_sin", [](double x) { return std::sin(x); });
  Add<D1>(out, "__nv_cos", [](double x) { return std::cos(x); });
  Add<D1>(out, "__nv_tan", [](double x) { return std::tan(x); });
  Add<D1>(out, "__nv_asin", [](double x) { return std::asin(x); });
  Add<D1>(out, "__nv_acos", [](double x) { return std::acos(x); });
  Add<D1>(out, "__nv_atan", [](double x) { return std::atan(x); });
  Add<D1>(out, "__nv_sinh", [](double x) { return std::sinh(x); });
  Add<D1>(out, "__nv_cosh", [](double x) { return std::cosh(x); });
  Add<D1>(out, "__nv_tanh", [](double x) { return std::tanh(x); });
  Add<D1>(out, "__nv_asinh", [](double x) { return std::asinh(x); });
  Add<D1>(out, "__nv_acosh", [](double x) { return std::acosh(x); });
  Add<D1>(out, "__nv_atanh", [](double x) { return std::atanh(x); });
  Add<D1>(out, "__nv_erf", [](double x) { return std::erf(x); });
  Add<D1>(out, "__nv_erfc", [](double x) { return std::erfc(x); });
  Add<D1>(out, "__nv_lgamma", [](double x) { return std::lgamma(x); });
  Add<D1>(out, "__nv_tgamma", [](double x) { return std::tgamma(x); });
  Add<D1>(out, "__nv_cbrt", [](double x) { return std::cbrt(x); });
  Add<D1>(out, "__nv_sqrt", [](double x) { return std::sqrt(x); });
  Add<D1>(out, "__nv_rsqrt", [](double x) { return 1.0 / std::sqrt(x); });
  Add<D1>(out, "__nv_floor", [](double x) { return std::floor(x); });
  Add<D1>(out, "__nv_ceil", [](double x) { return std::ceil(x); });
  Add<D1>(out, "__nv_round", [](double x) { return std::round(x); });
  Add<D1>(out, "__nv_rint", [](double x) { return std::rint(x); });
  Add<D1>(out, "__nv_nearbyint", [](double x) { return std::nearbyint(x); });
  Add<D1>(out, "__nv_trunc", [](double x) { return std::trunc(x); });
  Add<D1>(out, "__nv_fabs", [](double x) { return std::fabs(x); });
  Add<D2>(out, "__nv_pow", [](double x, double y) { return std::pow(x, y); });
  Add<D2>(out, "__nv_atan2", [](double x, double y) { return std::atan2(x, y); });
  Add<D2>(out, "__nv_fmod", [](double x, double y) { return std::fmod(x, y); });
  Add<D2>(out, "__nv_remainder", [](double x, double y) { return std::remainder(x, y); });
  Add<D2>(out, "__nv_fmin", [](double x, double y) { return std::fmin(x, y); });
  Add<D2>(out, "__nv_fmax", [](double x, double y) { return std::fmax(x, y); });
  Add<D2>(out, "__nv_hypot", [](double x, double y) { return std::hypot(x, y); });
  Add<D2>(out, "__nv_copysign", [](double x, double y) { return std::copysign(x, y); });
  Add<D2>(out, "__nv_fdim", [](double x, double y) { return std::fdim(x, y); });
  Add<D3>(out, "__nv_fma", [](double x, double y, double z) { return std::fma(x, y, z); });
  // classification and integer helpers
  Add(
      out, "__nv_isnanf", +[](float x) -> int32_t { return std::isnan(x) ? 1 : 0; });
  Add(
      out, "__nv_isinff", +[](float x) -> int32_t { return std::isinf(x) ? 1 : 0; });
  Add(
      out, "__nv_finitef", +[](float x) -> int32_t { return std::isfinite(x) ? 1 : 0; });
  Add(
      out, "__nv_signbitf", +[](float x) -> int32_t { return std::signbit(x) ? 1 : 0; });
  Add(
      out, "__nv_isnand", +[](double x) -> int32_t { return std::isnan(x) ? 1 : 0; });
  Add(
      out, "__nv_isinfd", +[](double x) -> int32_t { return std::isinf(x) ? 1 : 0; });
  Add(
      out, "__nv_isfinited", +[](double x) -> int32_t { return std::isfinite(x) ? 1 : 0; });
  Add(
      out, "__nv_signbitd", +[](double x) -> int32_t { return std::signbit(x) ? 1 : 0; });
  Add(
      out, "__nv_powif", +[](float x, int32_t n) { return std::pow(x, static_cast<float>(n)); });
  Add(
      out, "__nv_powi", +[](double x, int32_t n) { return std::pow(x, static_cast<double>(n)); });
  Add(
      out, "__nv_min", +[](int32_t a, int32_t b) { return a < b ? a : b; });
  Add(
      out, "__nv_max", +[](int32_t a, int32_t b) { return a > b ? a : b; });
  Add(
      out, "__nv_umin", +[](uint32_t a, uint32_t b) { return a < b ? a : b; });
  Add(
      out, "__nv_umax", +[](uint32_t a, uint32_t b) { return a > b ? a : b; });
  Add(
      out, "__nv_llmin", +[](int64_t a, int64_t b) { return a < b ? a : b; });
  Add(
      out, "__nv_llmax", +[](int64_t a, int64_t b) { return a > b ? a : b; });
  Add(
      out, "__nv_abs",
      +[](int32_t a) { return a < 0 ? static_cast<int32_t>(0u - static_cast<uint32_t>(a)) : a; });
  Add(
      out, "__nv_llabs",
      +[](int64_t a) { return a < 0 ? static_cast<int64_t>(0ull - static_cast<uint64_t>(a)) : a; });
  Add(
      out, "__nv_popc", +[](uint32_t a) { return static_cast<int32_t>(std::popcount(a)); });
  Add(
      out, "__nv_popcll", +[](uint64_t a) { return static_cast<int32_t>(std::popcount(a)); });
  Add(
      out, "__nv_clz", +[](uint32_t a) { return static_cast<int32_t>(std::countl_zero(a)); });
  Add(
      out, "__nv_clzll", +[](uint64_t a) { return static_cast<int32_t>(std::countl_zero(a)); });
}

void SetApproximateMathError(double relative_error) { tls_approximate_error = relative_error; }

bool HasLibdeviceFunction(const std::string& name) {
  static const std::unordered_set<std::string> names = [] {
    RuntimeSymbols syms;
    AppendLibdeviceSymbols(syms);
    std::unordered_set<std::string> s;
    for (const auto& [n, p] : syms) s.insert(n);
    return s;
  }();
  return names.count(name) != 0;
}

}  // namespace stitch::emu
