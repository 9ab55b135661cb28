#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "stitch/client/client.h"
#include "stitch_client.h"

struct stitch_client {
  std::unique_ptr<stitch::client::Client> client;
};

struct stitch_result {
  stitch::client::Result result;
  // Serialized on first request: most callers only read kernels.
  mutable std::once_flag serialize_once;
  mutable std::string serialized;
  mutable std::once_flag runtimes_once;
  mutable std::string runtimes_json;
};

struct stitch_extraction {
  // "" on success; the accessors return pointers into these, valid until the free.
  std::string error;
  std::vector<std::string> names;
  std::vector<std::string> graphs;  // serialized stitch.v1.Graph
  struct Summary {
    size_t nodes = 0;
    size_t parameters = 0;
    size_t outputs = 0;
  };
  std::vector<Summary> summaries;
};

namespace {

using stitch::client::Client;
using stitch::client::ClientOptions;
using stitch::client::Outcome;
using stitch::client::Result;

stitch_result* NewResult(Result r) noexcept {
  auto* out = new (std::nothrow) stitch_result;
  if (out != nullptr) out->result = std::move(r);
  return out;
}

stitch_result* FallbackResult(const char* reason, const char* detail = nullptr) noexcept {
  try {
    Result r;
    r.reason = reason;
    if (detail != nullptr) r.reason += detail;
    return NewResult(std::move(r));
  } catch (...) {
    return nullptr;
  }
}

enum class Kind { kHlo, kGraph };

// The outer parameters of an HLO request, as the caller passed them.
struct OuterParameters {
  const int64_t* numbers = nullptr;
  size_t count = 0;
};

// Returns the refusal for outer parameters the daemon could never accept, or nullptr.
const char* OuterParametersError(OuterParameters outer) {
  if (outer.numbers == nullptr && outer.count > 0) {
    return "INVALID_ARGUMENT: null outer_parameters with a nonzero count";
  }
  for (size_t i = 0; i < outer.count; ++i) {
    if (outer.numbers[i] < 0) return "INVALID_ARGUMENT: a negative outer parameter number";
  }
  return nullptr;
}

stitch_result* Run(stitch_client* client, Kind kind, const void* data, size_t len,
                   const char* target, bool lookup, OuterParameters outer = {}) noexcept {
  if (client == nullptr) return FallbackResult("INVALID_ARGUMENT: null stitch_client");
  if (data == nullptr && len > 0) return FallbackResult("INVALID_ARGUMENT: null input");
  if (len == 0) return FallbackResult("INVALID_ARGUMENT: empty input");
  if (const char* error = OuterParametersError(outer)) return FallbackResult(error);
  try {
    stitch::v1::CompileRequest request;
    if (kind == Kind::kHlo) {
      request.set_hlo_text(static_cast<const char*>(data), len);
      // Part of the request, so the in-process cache (keyed by its bytes) tells apart
      // requests that differ only here.
      request.mutable_outer_parameters()->Add(outer.numbers, outer.numbers + outer.count);
    } else if (len > static_cast<size_t>(INT_MAX) ||
               !request.mutable_graph()->ParseFromArray(data, static_cast<int>(len))) {
      return FallbackResult("INVALID_ARGUMENT: the bytes are not a serialized stitch.v1.Graph");
    }
    if (target != nullptr) request.set_target(target);
    Result r = lookup ? client->client->Lookup(request) : client->client->Compile(request);
    return NewResult(std::move(r));
  } catch (const std::exception& e) {
    return FallbackResult("INTERNAL: ", e.what());
  } catch (...) {
    return FallbackResult("INTERNAL: unknown exception");
  }
}

const stitch::v1::Kernel* KernelAt(const stitch_result* r, size_t index) {
  if (r == nullptr || r->result.bundle == nullptr) return nullptr;
  if (index >= static_cast<size_t>(r->result.bundle->kernels_size())) return nullptr;
  return &r->result.bundle->kernels(static_cast<int>(index));
}

// Admin answers as JSON: every field by its .proto name, defaults included, 64-bit integers
// as numbers (proto3's canonical JSON mapping would quote them), so a ctypes caller needs no
// protobuf runtime.
std::string Base64(const std::string& bytes) {
  static const char kDigits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t v = static_cast<uint32_t>(static_cast<unsigned char>(bytes[i])) << 16;
    if (n > 1) v |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[i + 1])) << 8;
    if (n > 2) v |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[i + 2]));
    out += kDigits[(v >> 18) & 63];
    out += kDigits[(v >> 12) & 63];
    out += n > 1 ? kDigits[(v >> 6) & 63] : '=';
    out += n > 2 ? kDigits[v & 63] : '=';
  }
  return out;
}

nlohmann::json MessageJson(const google::protobuf::Message& m);

// The value of field `f` of `m`: its element `index` when the field is repeated.
nlohmann::json FieldJson(const google::protobuf::Message& m,
                         const google::protobuf::FieldDescriptor* f, int index) {
  using FD = google::protobuf::FieldDescriptor;
  const google::protobuf::Reflection* r = m.GetReflection();
  const bool rep = f->is_repeated();
  switch (f->cpp_type()) {
    case FD::CPPTYPE_INT32:
      return rep ? r->GetRepeatedInt32(m, f, index) : r->GetInt32(m, f);
    case FD::CPPTYPE_INT64:
      return rep ? r->GetRepeatedInt64(m, f, index) : r->GetInt64(m, f);
    case FD::CPPTYPE_UINT32:
      return rep ? r->GetRepeatedUInt32(m, f, index) : r->GetUInt32(m, f);
    case FD::CPPTYPE_UINT64:
      return rep ? r->GetRepeatedUInt64(m, f, index) : r->GetUInt64(m, f);
    case FD::CPPTYPE_DOUBLE:
      return rep ? r->GetRepeatedDouble(m, f, index) : r->GetDouble(m, f);
    case FD::CPPTYPE_FLOAT:
      return rep ? r->GetRepeatedFloat(m, f, index) : r->GetFloat(m, f);
    case FD::CPPTYPE_BOOL:
      return rep ? r->GetRepeatedBool(m, f, index) : r->GetBool(m, f);
    case FD::CPPTYPE_ENUM:
      return (rep ? r->GetRepeatedEnum(m, f, index) : r->GetEnum(m, f))->name();
    case FD::CPPTYPE_STRING: {
      std::string value = rep ? r->GetRepeatedString(m, f, index) : r->GetString(m, f);
      return f->type() == FD::TYPE_BYTES ? Base64(value) : value;
    }
    case FD::CPPTYPE_MESSAGE:
      return MessageJson(rep ? r->GetRepeatedMessage(m, f, index) : r->GetMessage(m, f));
  }
  return nullptr;
}

nlohmann::json MessageJson(const google::protobuf::Message& m) {
  const google::protobuf::Descriptor* d = m.GetDescriptor();
  const google::protobuf::Reflection* r = m.GetReflection();
  nlohmann::json out = nlohmann::json::object();
  for (int i = 0; i < d->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* f = d->field(i);
    if (!f->is_repeated()) {
      out[f->name()] = FieldJson(m, f, -1);
      continue;
    }
    const int n = r->FieldSize(m, f);
    if (f->is_map()) {
      // Map entries are messages with fields `key` (1) and `value` (2).
      nlohmann::json map = nlohmann::json::object();
      for (int j = 0; j < n; ++j) {
        const google::protobuf::Message& entry = r->GetRepeatedMessage(m, f, j);
        const google::protobuf::Descriptor* e = entry.GetDescriptor();
        nlohmann::json key = FieldJson(entry, e->field(0), -1);
        map[key.is_string() ? key.get<std::string>() : key.dump()] =
            FieldJson(entry, e->field(1), -1);
      }
      out[f->name()] = std::move(map);
      continue;
    }
    nlohmann::json list = nlohmann::json::array();
    for (int j = 0; j < n; ++j) list.push_back(FieldJson(m, f, j));
    out[f->name()] = std::move(list);
  }
  return out;
}

// Stores a malloc'ed copy of `text` in `*out`; returns false when memory runs out.
bool StoreString(const std::string& text, char** out) {
  char* copy = static_cast<char*>(std::malloc(text.size() + 1));
  if (copy == nullptr) return false;
  std::memcpy(copy, text.data(), text.size() + 1);
  *out = copy;
  return true;
}

// Runs one admin call and stores its answer, as the header's admin functions describe.
template <typename Call>
int AdminJson(stitch_client* client, char** json, Call call) noexcept {
  if (json != nullptr) *json = nullptr;
  if (client == nullptr || json == nullptr) return -1;
  try {
    auto response = call(*client->client);
    if (!response.ok()) return StoreString(response.status().ToString(), json) ? 1 : -1;
    // Protobuf checks string fields are UTF-8; should one not be, it is replaced, not fatal.
    const std::string text =
        MessageJson(*response).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    return StoreString(text, json) ? 0 : -1;
  } catch (...) {
    return -1;
  }
}

}  // namespace

extern "C" {

stitch_client* stitch_client_create(const char* address, int lookup_deadline_ms,
                                    int compile_deadline_ms) {
  try {
    ClientOptions options;
    if (address != nullptr && address[0] != '\0') options.address = address;
    if (lookup_deadline_ms > 0)
      options.lookup_deadline = std::chrono::milliseconds(lookup_deadline_ms);
    if (compile_deadline_ms > 0) {
      options.compile_deadline = std::chrono::milliseconds(compile_deadline_ms);
    }
    auto handle = std::make_unique<stitch_client>();
    handle->client = std::make_unique<Client>(std::move(options));
    return handle.release();
  } catch (...) {
    return nullptr;
  }
}

stitch_client* stitch_client_create_tls(const char* address, int lookup_deadline_ms,
                                        int compile_deadline_ms, const char* ca_file,
                                        const char* cert_file, const char* key_file) {
  try {
    ClientOptions options;
    if (address != nullptr && address[0] != '\0') options.address = address;
    if (lookup_deadline_ms > 0) {
      options.lookup_deadline = std::chrono::milliseconds(lookup_deadline_ms);
    }
    if (compile_deadline_ms > 0) {
      options.compile_deadline = std::chrono::milliseconds(compile_deadline_ms);
    }
    if (ca_file != nullptr) options.tls_ca_file = ca_file;
    if (cert_file != nullptr) options.tls_cert_file = cert_file;
    if (key_file != nullptr) options.tls_key_file = key_file;
    auto handle = std::make_unique<stitch_client>();
    handle->client = std::make_unique<Client>(std::move(options));
    return handle.release();
  } catch (...) {
    return nullptr;
  }
}

void stitch_client_destroy(stitch_client* client) { delete client; }

stitch_result* stitch_client_compile_hlo(stitch_client* client, const char* hlo_text, size_t len,
                                         const char* target) {
  return Run(client, Kind::kHlo, hlo_text, len, target, false);
}

stitch_result* stitch_client_compile_graph(stitch_client* client, const void* graph_pb, size_t len,
                                           const char* target) {
  return Run(client, Kind::kGraph, graph_pb, len, target, false);
}

stitch_result* stitch_client_lookup_hlo(stitch_client* client, const char* hlo_text, size_t len,
                                        const char* target) {
  return Run(client, Kind::kHlo, hlo_text, len, target, true);
}

stitch_result* stitch_client_lookup_graph(stitch_client* client, const void* graph_pb, size_t len,
                                          const char* target) {
  return Run(client, Kind::kGraph, graph_pb, len, target, true);
}

stitch_result* stitch_client_compile_hlo_generic(stitch_client* client, const char* hlo_text,
                                                 size_t len, const char* target,
                                                 const int64_t* outer_parameters, size_t count) {
  return Run(client, Kind::kHlo, hlo_text, len, target, false,
             OuterParameters{outer_parameters, count});
}

stitch_result* stitch_client_lookup_hlo_generic(stitch_client* client, const char* hlo_text,
                                                size_t len, const char* target,
                                                const int64_t* outer_parameters, size_t count) {
  return Run(client, Kind::kHlo, hlo_text, len, target, true,
             OuterParameters{outer_parameters, count});
}

stitch_outcome stitch_result_outcome(const stitch_result* result) {
  if (result == nullptr) return STITCH_FALLBACK;
  switch (result->result.outcome) {
    case Outcome::kLocal:
      return STITCH_HIT_LOCAL;
    case Outcome::kMemory:
      return STITCH_HIT_MEMORY;
    case Outcome::kDisk:
      return STITCH_HIT_DISK;
    case Outcome::kCluster:
      return STITCH_HIT_CLUSTER;
    case Outcome::kCompiled:
      return STITCH_COMPILED;
    case Outcome::kFallback:
      return STITCH_FALLBACK;
  }
  return STITCH_FALLBACK;
}

const char* stitch_result_key(const stitch_result* result) {
  return result == nullptr ? "" : result->result.key.c_str();
}

const char* stitch_result_reason(const stitch_result* result) {
  if (result == nullptr) return "INVALID_ARGUMENT: null stitch_result";
  return result->result.reason.c_str();
}

const void* stitch_result_bundle(const stitch_result* result, size_t* len) {
  if (len != nullptr) *len = 0;
  if (result == nullptr || result->result.bundle == nullptr) return nullptr;
  try {
    std::call_once(result->serialize_once,
                   [result] { result->result.bundle->SerializeToString(&result->serialized); });
  } catch (...) {
    return nullptr;
  }
  if (len != nullptr) *len = result->serialized.size();
  return result->serialized.data();
}

const char* stitch_result_runtimes_json(const stitch_result* result) {
  if (result == nullptr || result->result.runtimes == nullptr) return "";
  try {
    std::call_once(result->runtimes_once, [result] {
      result->runtimes_json = MessageJson(*result->result.runtimes)
                                  .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    });
  } catch (...) {
    return "";
  }
  return result->runtimes_json.c_str();
}

int stitch_result_outer_extent(const stitch_result* result, int64_t* lo, int64_t* hi) {
  if (result == nullptr || result->result.bundle == nullptr ||
      !result->result.bundle->has_outer_extent()) {
    return 0;
  }
  const stitch::v1::OuterExtent& served = result->result.bundle->outer_extent();
  if (lo != nullptr) *lo = served.lo();
  if (hi != nullptr) *hi = served.hi();
  return 1;
}

size_t stitch_result_kernel_count(const stitch_result* result) {
  if (result == nullptr || result->result.bundle == nullptr) return 0;
  return static_cast<size_t>(result->result.bundle->kernels_size());
}

const char* stitch_result_kernel_name(const stitch_result* result, size_t index) {
  const stitch::v1::Kernel* k = KernelAt(result, index);
  return k == nullptr ? nullptr : k->name().c_str();
}

const char* stitch_result_kernel_ptx(const stitch_result* result, size_t index) {
  const stitch::v1::Kernel* k = KernelAt(result, index);
  return k == nullptr ? nullptr : k->ptx().c_str();
}

const void* stitch_result_kernel_cubin(const stitch_result* result, size_t index, size_t* len) {
  if (len != nullptr) *len = 0;
  const stitch::v1::Kernel* k = KernelAt(result, index);
  if (k == nullptr || k->cubin().empty()) return nullptr;
  if (len != nullptr) *len = k->cubin().size();
  return k->cubin().data();
}

void stitch_result_free(stitch_result* result) { delete result; }

int stitch_client_record_invocations(stitch_client* client, const char* key, uint64_t invocations) {
  if (client == nullptr || key == nullptr) return -1;
  try {
    client->client->RecordInvocations(key, invocations);
    return 0;
  } catch (...) {
    return -1;
  }
}

int stitch_client_set_fallback(stitch_client* client, const char* fallback) {
  if (client == nullptr) return -1;
  const std::string_view name = fallback == nullptr ? "" : fallback;
  if (name.empty()) {
    client->client->SetFallback(stitch::v1::FALLBACK_UNSPECIFIED);
  } else if (name == "xla") {
    client->client->SetFallback(stitch::v1::FALLBACK_XLA);
  } else if (name == "inductor") {
    client->client->SetFallback(stitch::v1::FALLBACK_INDUCTOR);
  } else if (name == "eager") {
    client->client->SetFallback(stitch::v1::FALLBACK_EAGER);
  } else {
    return -1;
  }
  return 0;
}

int stitch_client_record_time(stitch_client* client, const char* key, stitch_timed_kernels kernels,
                              double seconds, uint64_t samples) {
  if (client == nullptr || key == nullptr) return -1;
  if (kernels != STITCH_TIMED_STITCHED && kernels != STITCH_TIMED_FALLBACK) return -1;
  const stitch::client::TimedKernels which = kernels == STITCH_TIMED_STITCHED
                                                 ? stitch::client::TimedKernels::kStitched
                                                 : stitch::client::TimedKernels::kFallback;
  try {
    return client->client->RecordMeasuredTime(key, which, seconds, samples).ok() ? 0 : -1;
  } catch (...) {
    return -1;
  }
}

int stitch_client_should_time_fallback(stitch_client* client) {
  if (client == nullptr) return 0;
  return client->client->ShouldTimeFallback() ? 1 : 0;
}

int stitch_client_flush_usage(stitch_client* client) {
  if (client == nullptr) return -1;
  try {
    return client->client->FlushUsage().ok() ? 0 : 1;
  } catch (...) {
    return 1;
  }
}

void stitch_free(void* p) { std::free(p); }

int stitch_client_stats(stitch_client* client, char** json) {
  return AdminJson(client, json, [](Client& c) { return c.Stats(); });
}

int stitch_client_list_entries(stitch_client* client, uint32_t limit, char** json) {
  return AdminJson(client, json, [limit](Client& c) { return c.ListEntries(limit); });
}

int stitch_client_list_runtimes(stitch_client* client, uint32_t limit, char** json) {
  return AdminJson(client, json, [limit](Client& c) { return c.ListRuntimes(limit); });
}

stitch_result* stitch_client_get_entry(stitch_client* client, const char* key) {
  if (client == nullptr) return FallbackResult("INVALID_ARGUMENT: null stitch_client");
  if (key == nullptr) return FallbackResult("INVALID_ARGUMENT: null key");
  try {
    stitch::StatusOr<stitch::v1::CompileResponse> entry = client->client->GetEntry(key);
    if (!entry.ok()) return FallbackResult(entry.status().ToString().c_str());
    Result r;
    switch (entry->source()) {
      case stitch::v1::CompileResponse::MEMORY:
        r.outcome = Outcome::kMemory;
        break;
      case stitch::v1::CompileResponse::DISK:
        r.outcome = Outcome::kDisk;
        break;
      case stitch::v1::CompileResponse::CLUSTER:
        r.outcome = Outcome::kCluster;
        break;
      case stitch::v1::CompileResponse::COMPILED:
        r.outcome = Outcome::kCompiled;
        break;
      default:
        return FallbackResult("INTERNAL: the daemon answered GetEntry without a source");
    }
    r.key = entry->key();
    r.bundle =
        std::make_shared<const stitch::v1::KernelBundle>(std::move(*entry->mutable_bundle()));
    return NewResult(std::move(r));
  } catch (const std::exception& e) {
    return FallbackResult("INTERNAL: ", e.what());
  } catch (...) {
    return FallbackResult("INTERNAL: unknown exception");
  }
}

stitch_extraction* stitch_client_extract_hlo(stitch_client* client, const char* hlo_text,
                                             size_t len) {
  return stitch_client_extract_hlo_at_extent(client, hlo_text, len, /*outer_extent=*/0);
}

stitch_extraction* stitch_client_extract_hlo_at_extent(stitch_client* client, const char* hlo_text,
                                                       size_t len, int64_t outer_extent) {
  auto* out = new (std::nothrow) stitch_extraction;
  if (out == nullptr) return nullptr;
  try {
    if (client == nullptr) {
      out->error = "INVALID_ARGUMENT: null stitch_client";
    } else if (hlo_text == nullptr && len > 0) {
      out->error = "INVALID_ARGUMENT: null input";
    } else if (len == 0) {
      out->error = "INVALID_ARGUMENT: empty input";
    } else {
      stitch::StatusOr<std::vector<stitch::v1::Graph>> graphs =
          client->client->Extract(std::string_view(hlo_text, len), outer_extent);
      if (!graphs.ok()) {
        out->error = graphs.status().ToString();
        return out;
      }
      for (const stitch::v1::Graph& g : *graphs) {
        out->names.push_back(g.name());
        out->graphs.push_back(g.SerializeAsString());
        stitch_extraction::Summary summary;
        summary.nodes = static_cast<size_t>(g.nodes_size());
        summary.outputs = static_cast<size_t>(g.outputs_size());
        summary.parameters = static_cast<size_t>(std::count_if(
            g.nodes().begin(), g.nodes().end(),
            [](const stitch::v1::Node& n) { return n.op() == stitch::v1::PARAMETER; }));
        out->summaries.push_back(summary);
      }
    }
    return out;
  } catch (...) {
    // Out of memory part-way: the caller sees a failure, never a partial list.
    delete out;
    return nullptr;
  }
}

const char* stitch_extraction_error(const stitch_extraction* extraction) {
  if (extraction == nullptr) return "INVALID_ARGUMENT: null stitch_extraction";
  return extraction->error.c_str();
}

size_t stitch_extraction_count(const stitch_extraction* extraction) {
  return extraction == nullptr ? 0 : extraction->graphs.size();
}

const char* stitch_extraction_name(const stitch_extraction* extraction, size_t index) {
  if (extraction == nullptr || index >= extraction->names.size()) return nullptr;
  return extraction->names[index].c_str();
}

const void* stitch_extraction_graph(const stitch_extraction* extraction, size_t index,
                                    size_t* len) {
  if (extraction == nullptr || index >= extraction->graphs.size()) {
    if (len != nullptr) *len = 0;
    return nullptr;
  }
  const std::string& bytes = extraction->graphs[index];
  if (len != nullptr) *len = bytes.size();
  return bytes.data();
}

size_t stitch_extraction_node_count(const stitch_extraction* extraction, size_t index) {
  if (extraction == nullptr || index >= extraction->summaries.size()) return 0;
  return extraction->summaries[index].nodes;
}

size_t stitch_extraction_parameter_count(const stitch_extraction* extraction, size_t index) {
  if (extraction == nullptr || index >= extraction->summaries.size()) return 0;
  return extraction->summaries[index].parameters;
}

size_t stitch_extraction_output_count(const stitch_extraction* extraction, size_t index) {
  if (extraction == nullptr || index >= extraction->summaries.size()) return 0;
  return extraction->summaries[index].outputs;
}

void stitch_extraction_free(stitch_extraction* extraction) { delete extraction; }

const char* stitch_outcome_name(stitch_outcome outcome) {
  switch (outcome) {
    case STITCH_HIT_LOCAL:
      return stitch::client::OutcomeName(Outcome::kLocal);
    case STITCH_HIT_MEMORY:
      return stitch::client::OutcomeName(Outcome::kMemory);
    case STITCH_HIT_DISK:
      return stitch::client::OutcomeName(Outcome::kDisk);
    case STITCH_HIT_CLUSTER:
      return stitch::client::OutcomeName(Outcome::kCluster);
    case STITCH_COMPILED:
      return stitch::client::OutcomeName(Outcome::kCompiled);
    case STITCH_FALLBACK:
      break;
  }
  return stitch::client::OutcomeName(Outcome::kFallback);
}

}  // extern "C"
