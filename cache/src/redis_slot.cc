#include <charconv>

#include "stitch/cache/redis_cluster.h"

namespace stitch::cache::redis {

uint16_t Crc16(std::string_view bytes) {
  uint16_t crc = 0;
  for (char c : bytes) {
    crc ^= static_cast<uint16_t>(static_cast<unsigned char>(c) << 8);
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc & 0x8000u) ? static_cast<uint16_t>((crc << 1) ^ 0x1021u)
                            : static_cast<uint16_t>(crc << 1);
    }
  }
  return crc;
}

uint16_t KeySlot(std::string_view key) {
  // Only the first '{' counts, and an empty tag ("{}") hashes the whole key: the rules that
  // let an entry and its lease share a slot on every node that follows the specification.
  const size_t open = key.find('{');
  if (open != std::string_view::npos) {
    const size_t close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) {
      key = key.substr(open + 1, close - open - 1);
    }
  }
  return static_cast<uint16_t>(Crc16(key) % kSlotCount);
}

StatusOr<NodeAddress> ParseNodeAddress(std::string_view text) {
  const auto invalid = [&](const std::string& why) {
    return InvalidArgument("cluster node \"" + std::string(text) + "\": " + why);
  };
  NodeAddress out;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return invalid("expected [host]:port");
    }
    out.host = std::string(text.substr(1, close - 1));
    port = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return invalid("expected host:port");
    out.host = std::string(text.substr(0, colon));
    port = text.substr(colon + 1);
  }
  if (out.host.empty()) return invalid("the host is empty");
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), out.port);
  if (ec != std::errc() || end != port.data() + port.size() || out.port < 1 || out.port > 65535) {
    return invalid("the port must be a number in 1..65535");
  }
  return out;
}

StatusOr<Reply> ClusterClient::Run(std::string_view routing_key, const Command& command,
                                   Deadline deadline) {
  StatusOr<std::vector<Reply>> replies = Pipeline(KeySlot(routing_key), {command}, deadline);
  if (!replies.ok()) return replies.status();
  return std::move(replies->front());
}

}  // namespace stitch::cache::redis
