// A shared library that is not a GenieX CUDA plugin: it exports no geniex_cuda_plugin.
extern "C" __attribute__((visibility("default"))) int not_a_geniex_plugin() { return 42; }
