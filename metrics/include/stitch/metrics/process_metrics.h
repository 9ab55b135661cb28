// The standard process_* metrics, as other Prometheus clients export them on Linux:
// process_cpu_seconds_total, process_resident_memory_bytes, process_virtual_memory_bytes,
// process_start_time_seconds, process_open_fds, process_max_fds; read from /proc/self at
// every scrape. Where /proc is unreadable the values stay at their last reading.
//
// Thread-safety: call once per registry, before serving.
#pragma once

#include "stitch/metrics/registry.h"

namespace stitch::metrics {

void AddProcessMetrics(Registry& registry);

}  // namespace stitch::metrics
