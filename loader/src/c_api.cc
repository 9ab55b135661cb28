// The C ABI of stitch_loader.h over stitch::loader. Compiled into stitch_loader and into
// libstitch_client.so, whose stitch_free releases the error strings made here.
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string>

#include "stitch/loader/kernel_loader.h"
#include "stitch_loader.h"

struct stitch_loader {
  std::unique_ptr<stitch::loader::KernelLoader> impl;
};

struct stitch_program {
  std::shared_ptr<const stitch::loader::Program> impl;
};

namespace {

// Stores a malloc'ed copy of status.ToString() in *error when the caller asked for it.
void SetError(char** error, const stitch::Status& status) {
  if (error == nullptr) return;
  const std::string text = status.ToString();
  char* copy = static_cast<char*>(std::malloc(text.size() + 1));
  if (copy == nullptr) return;
  std::memcpy(copy, text.c_str(), text.size() + 1);
  *error = copy;
}

}  // namespace

extern "C" {

stitch_loader* stitch_loader_open(const char* driver_library_or_null, char** error) {
  stitch::loader::LoaderOptions options;
  if (driver_library_or_null != nullptr) options.driver_library = driver_library_or_null;
  auto loader = stitch::loader::KernelLoader::Open(options);
  if (!loader.ok()) {
    SetError(error, loader.status());
    return nullptr;
  }
  return new stitch_loader{std::move(loader).value()};
}

void stitch_loader_close(stitch_loader* loader) { delete loader; }

stitch_program* stitch_loader_load(stitch_loader* loader, const void* bundle, size_t len,
                                   char** error) {
  if (loader == nullptr || (bundle == nullptr && len != 0)) {
    SetError(error, stitch::InvalidArgument("stitch_loader_load: NULL loader or bundle"));
    return nullptr;
  }
  auto program = loader->impl->Load(
      std::string_view(static_cast<const char*>(bundle), bundle == nullptr ? 0 : len));
  if (!program.ok()) {
    SetError(error, program.status());
    return nullptr;
  }
  return new stitch_program{std::move(program).value()};
}

void stitch_program_free(stitch_program* program) { delete program; }

int stitch_program_num_inputs(const stitch_program* program) {
  return program == nullptr ? -1 : program->impl->num_inputs();
}

int stitch_program_num_outputs(const stitch_program* program) {
  return program == nullptr ? -1 : program->impl->num_outputs();
}

const char* stitch_program_key(const stitch_program* program) {
  return program == nullptr ? "" : program->impl->key().c_str();
}

const char* stitch_program_target(const stitch_program* program) {
  return program == nullptr ? "" : program->impl->target().c_str();
}

int stitch_program_outer_extent(const stitch_program* program, int64_t* lo, int64_t* hi) {
  if (program == nullptr) return -1;
  if (!program->impl->shape_generic()) return 0;
  if (lo != nullptr) *lo = program->impl->min_outer_extent();
  if (hi != nullptr) *hi = program->impl->max_outer_extent();
  return 1;
}

int stitch_program_outer_parameter(const stitch_program* program, int i) {
  if (program == nullptr || !program->impl->shape_generic() || i < 0) return -1;
  const auto& parameters = program->impl->bundle().outer_extent().parameters();
  if (i >= parameters.size()) return -1;
  const int64_t p = parameters[i];
  return p >= 0 && p <= std::numeric_limits<int>::max() ? static_cast<int>(p) : -1;
}

int stitch_program_output_alias(const stitch_program* program, int i) {
  if (program == nullptr) return -1;
  for (const stitch::loader::OutputAlias& a : program->impl->output_aliases()) {
    if (a.output == i) return a.input;
  }
  return -1;
}

int stitch_loader_launch(stitch_loader* loader, const stitch_program* program,
                         const uint64_t* inputs, size_t num_inputs, const uint64_t* outputs,
                         size_t num_outputs, uintptr_t stream, char** error) {
  if (loader == nullptr || program == nullptr || (inputs == nullptr && num_inputs != 0) ||
      (outputs == nullptr && num_outputs != 0)) {
    SetError(error,
             stitch::InvalidArgument("stitch_loader_launch: NULL loader, program or buffer array"));
    return -1;
  }
  stitch::Status s = loader->impl->Launch(*program->impl, std::span(inputs, num_inputs),
                                          std::span(outputs, num_outputs), stream);
  if (!s.ok()) {
    SetError(error, s);
    return -1;
  }
  return 0;
}

int stitch_loader_launch_checked(stitch_loader* loader, const stitch_program* program,
                                 const uint64_t* inputs, const uint64_t* input_bytes,
                                 size_t num_inputs, const uint64_t* outputs,
                                 const uint64_t* output_bytes, size_t num_outputs, uintptr_t stream,
                                 char** error) {
  return stitch_loader_launch_at_extent(loader, program, inputs, input_bytes, num_inputs, outputs,
                                        output_bytes, num_outputs, /*outer_extent=*/0, stream,
                                        error);
}

int stitch_loader_launch_at_extent(stitch_loader* loader, const stitch_program* program,
                                   const uint64_t* inputs, const uint64_t* input_bytes,
                                   size_t num_inputs, const uint64_t* outputs,
                                   const uint64_t* output_bytes, size_t num_outputs,
                                   int64_t outer_extent, uintptr_t stream, char** error) {
  if (loader == nullptr || program == nullptr ||
      ((inputs == nullptr || input_bytes == nullptr) && num_inputs != 0) ||
      ((outputs == nullptr || output_bytes == nullptr) && num_outputs != 0)) {
    SetError(error,
             stitch::InvalidArgument("stitch_loader_launch: NULL loader, program or buffer array"));
    return -1;
  }
  stitch::Status s = loader->impl->LaunchChecked(
      *program->impl, std::span(inputs, num_inputs), std::span(input_bytes, num_inputs),
      std::span(outputs, num_outputs), std::span(output_bytes, num_outputs), stream, outer_extent);
  if (!s.ok()) {
    SetError(error, s);
    return -1;
  }
  return 0;
}

int stitch_loader_check_target(const char* target, int has_cubin, int cc_major, int cc_minor,
                               char** error) {
  if (target == nullptr) {
    SetError(error, stitch::InvalidArgument("stitch_loader_check_target: NULL target"));
    return -1;
  }
  auto image = stitch::loader::ChooseImage(target, has_cubin != 0, {cc_major, cc_minor});
  if (!image.ok()) {
    SetError(error, image.status());
    return -1;
  }
  return *image == stitch::loader::ImageKind::kCubin ? 0 : 1;
}

}  // extern "C"
