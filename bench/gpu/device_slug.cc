#include <cctype>

#include "gpu/gpu_runner.h"

namespace stitch::gpu {

std::string DeviceSlug(const std::string& name) {
  std::string lower;
  for (char c : name) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower.rfind("nvidia ", 0) == 0) lower = lower.substr(7);
  std::string slug;
  for (char c : lower) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      slug += c;
    } else if (!slug.empty() && slug.back() != '_') {
      slug += '_';
    }
  }
  while (!slug.empty() && slug.back() == '_') slug.pop_back();
  return slug.empty() ? "unknown" : slug;
}

}  // namespace stitch::gpu
