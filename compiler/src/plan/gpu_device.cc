#include "stitch/compiler/gpu_device.h"

#include <algorithm>

namespace stitch {

const std::vector<GpuDevice>& KnownDevices() {
  // Public datasheet figures; launch overhead as measured back-to-back on a stream.
  static const std::vector<GpuDevice> devices = [] {
    GpuDevice h100;
    h100.name = "H100";
    h100.target = "sm_90";
    h100.sms = 132;
    h100.hbm_bytes_per_second = 3.35e12;
    h100.launch_seconds = 2.5e-6;
    h100.shared_bytes_per_sm = 228 * 1024;
    h100.l2_bytes = 50LL << 20;
    GpuDevice h200 = h100;
    h200.name = "H200";
    h200.hbm_bytes_per_second = 4.8e12;
    GpuDevice a100;
    a100.name = "A100";
    a100.target = "sm_80";
    a100.sms = 108;
    a100.hbm_bytes_per_second = 2.0e12;
    a100.launch_seconds = 2.5e-6;
    a100.shared_bytes_per_sm = 164 * 1024;
    a100.l2_bytes = 40LL << 20;
    return std::vector<GpuDevice>{h100, h200, a100};
  }();
  return devices;
}

const GpuDevice* FindDevice(std::string_view name_or_target) {
  for (const GpuDevice& d : KnownDevices()) {
    if (d.name == name_or_target || d.target == name_or_target) return &d;
  }
  return nullptr;
}

const GpuDevice& DeviceForTarget(std::string_view target) {
  const GpuDevice* d = FindDevice(target);
  return d ? *d : KnownDevices().front();
}

int ResidentBlocksPerSm(const GpuDevice& device, const ThreadMapping& mapping) {
  const int64_t threads = static_cast<int64_t>(mapping.launch.block_threads());
  if (threads <= 0 || threads > 1024) return 0;
  // Warps are the allocation unit for threads and registers.
  const int64_t warps = (threads + 31) / 32;
  int64_t by_threads = device.max_threads_per_sm / (warps * 32);
  // Registers are allocated per warp in units of 256.
  const int64_t regs_per_warp = (int64_t{std::max(mapping.registers_per_thread, 1)} * 32 + 255) /
                                256 * 256;
  int64_t by_registers = device.registers_per_sm / (regs_per_warp * warps);
  int64_t by_shared = mapping.shared_bytes == 0
                          ? device.max_blocks_per_sm
                          : device.shared_bytes_per_sm / (int64_t{mapping.shared_bytes} + 1024);
  if (mapping.shared_bytes > device.max_static_shared_bytes_per_block) by_shared = 0;
  int64_t blocks = std::min({by_threads, by_registers, by_shared,
                             static_cast<int64_t>(device.max_blocks_per_sm)});
  return static_cast<int>(std::max<int64_t>(blocks, 0));
}

int64_t CoResidentBlocks(const GpuDevice& device, const ThreadMapping& mapping) {
  return int64_t{ResidentBlocksPerSm(device, mapping)} * device.sms;
}

}  // namespace stitch
