// The OpenCL C sources of kernels/*.cl, embedded at build time (embed_kernels.cmake); the
// program is common.cl followed by every other file.
#pragma once

#include <string_view>
#include <vector>

namespace geniex::backends::opencl {

struct KernelSource {
  std::string_view file;  // "mul_mv.cl"
  std::string_view text;
};

const std::vector<KernelSource>& kernel_sources();

}  // namespace geniex::backends::opencl
