// Names of device kinds.
#include "backends/backend.hpp"

namespace geniex::backends {

std::string_view device_kind_name(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::Cpu: return "cpu";
    case DeviceKind::Gpu: return "gpu";
    case DeviceKind::Npu: return "npu";
  }
  return "?";
}

}  // namespace geniex::backends
