#include <iostream>

#include "commands.h"
#include "graph_input.h"
#include "stitch/driver/compile.h"
#include "stitch/ir/key.h"

namespace stitch::ctl {
namespace {

StatusOr<CacheKey> KeyOf(const std::string& file, const KeyArgs& args) {
  STITCH_ASSIGN_OR_RETURN(std::vector<Graph> graphs, LoadGraphs(file));
  if (graphs.size() != 1) {
    return InvalidArgument(file + " holds " + std::to_string(graphs.size()) +
                           " modules; key takes one");
  }
  CompileOptions options;
  options.codegen.target = args.target;
  options.salt = args.salt;
  return ComputeKey(graphs[0], KeyContextFor(options));
}

}  // namespace

int RunKey(const KeyArgs& args) {
  StatusOr<CacheKey> key = KeyOf(args.file, args);
  if (!key.ok()) return Fail(key.status().ToString());
  if (args.explain) {
    std::cout << DescribeKey(*key);
  } else {
    std::cout << key->hex << "\n";
  }
  if (!args.against.empty()) {
    StatusOr<CacheKey> other = KeyOf(args.against, args);
    if (!other.ok()) return Fail(other.status().ToString());
    std::cout << ExplainKeyDifference(*key, *other);
    if (key->hex != other->hex)
      std::cout << "(first: " << args.file << ", second: " << args.against << ")\n";
  }
  return 0;
}

}  // namespace stitch::ctl
