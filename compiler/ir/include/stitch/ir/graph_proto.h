// Conversion between the in-memory graph and its wire form, stitch.v1.Graph, in binary
// protobuf and in protobuf's JSON mapping.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "stitch/base/status.h"
#include "stitch/ir/graph.h"
#include "stitch/v1/graph.pb.h"

namespace stitch {

// Returns the wire form of `g`.
v1::Graph ToProto(const Graph& g);

// Converts a wire graph. Returns INVALID_ARGUMENT naming the node when an enum is out of
// range or unspecified. The result is not verified yet: call Verify().
StatusOr<Graph> FromProto(const v1::Graph& proto);

// Parses a binary stitch.v1.Graph; INVALID_ARGUMENT when the bytes are not one.
StatusOr<Graph> ParseGraphBinary(std::string_view bytes);

// Parses the JSON form of stitch.v1.Graph; INVALID_ARGUMENT with the parser's message.
StatusOr<Graph> ParseGraphJson(std::string_view json);

// Returns the JSON form of `g`, pretty-printed.
std::string ToJson(const Graph& g);

// Returns the binary form of `g`.
std::string ToBinary(const Graph& g);

}  // namespace stitch
