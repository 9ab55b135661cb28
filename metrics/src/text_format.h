// Pieces of the Prometheus text exposition format 0.0.4 shared by the registry's serializer,
// and the checks on names that the format imposes.
#pragma once

#include <string>
#include <string_view>

namespace stitch::metrics::internal {

// Prints "stitch::metrics: <message>" to stderr and aborts: the caller broke a rule that
// is fixed at compile time (a name, a bucket layout), so there is nothing to recover.
[[noreturn]] void Fatal(const std::string& message);

// [a-zA-Z_:][a-zA-Z0-9_:]*
bool IsValidMetricName(std::string_view name);
// [a-zA-Z_][a-zA-Z0-9_]*; the "__" prefix is checked separately since it is reserved,
// not malformed.
bool IsValidLabelName(std::string_view name);

// Appends `value` in the shortest form that parses back to the same double, independent
// of the C and C++ locales; infinities and NaN as Prometheus spells them.
void AppendDouble(std::string& out, double value);
void AppendUint(std::string& out, unsigned long long value);

// HELP text: backslash and newline escaped.
void AppendEscapedHelp(std::string& out, std::string_view help);
// Label values: backslash, double quote and newline escaped.
void AppendEscapedLabelValue(std::string& out, std::string_view value);

}  // namespace stitch::metrics::internal
