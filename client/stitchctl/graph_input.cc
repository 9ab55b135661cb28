#include "graph_input.h"

#include <fstream>
#include <sstream>

#include "stitch/hlo/hlo_import.h"
#include "stitch/ir/graph_proto.h"
#include "stitch/ir/verifier.h"

namespace stitch::ctl {
namespace {

constexpr size_t kMaxInputBytes = size_t{256} << 20;

bool LooksLikeHlo(const std::string& text) {
  for (const char* marker : {"HloModule", "ENTRY", "parameter(", "ROOT "}) {
    if (text.find(marker) != std::string::npos) return true;
  }
  return false;
}

size_t FirstNonSpace(const std::string& s) {
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\r')) ++i;
  return i;
}

}  // namespace

StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot open '" + path + "'");
  in.seekg(0, std::ios::end);
  std::streamoff size = in.tellg();
  if (size < 0) return InvalidArgument("'" + path + "' is not a regular file");
  if (static_cast<size_t>(size) > kMaxInputBytes) {
    return ResourceExhausted("'" + path + "' is larger than 256 MiB");
  }
  in.seekg(0);
  std::string data(static_cast<size_t>(size), '\0');
  in.read(data.data(), size);
  if (!in) return InvalidArgument("error reading '" + path + "'");
  return data;
}

Status WriteFile(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return NotFound("cannot create '" + path + "'");
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  if (!out) return Internal("error writing '" + path + "'");
  return Status::Ok();
}

StatusOr<std::vector<Graph>> LoadGraphs(const std::string& path) {
  STITCH_ASSIGN_OR_RETURN(std::string data, ReadFile(path));
  std::vector<Graph> graphs;
  size_t start = FirstNonSpace(data);
  if (start < data.size() && data[start] == '{') {
    StatusOr<Graph> g = ParseGraphJson(data);
    if (!g.ok()) return g.status().WithContext(path);
    graphs.push_back(std::move(g).value());
  } else if (LooksLikeHlo(data)) {
    HloImportOptions options;
    options.source_name = path;
    STITCH_ASSIGN_OR_RETURN(graphs, ImportHloModules(data, options));
  } else {
    StatusOr<Graph> g = ParseGraphBinary(data);
    if (!g.ok()) {
      return InvalidArgument(path + ": neither HLO text, JSON nor a binary stitch.v1.Graph");
    }
    graphs.push_back(std::move(g).value());
  }
  for (const Graph& g : graphs) {
    Status s = Verify(g);
    if (!s.ok()) return s.WithContext(path);
  }
  return graphs;
}

}  // namespace stitch::ctl
