// Streaming reads for memory-bandwidth probes: the read pattern a weight-streaming decode
// kernel makes (several sequential streams, software prefetch ahead of each), without the
// arithmetic, so that `geniex bench`'s roof and bench_kernels' floors measure what such a
// kernel can reach rather than what one scalar stream reaches.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace geniex {

// The sum (mod 2^64) of every element of `data`, read as `streams` equal parts side by side
// (1 to 16; others are clamped), each prefetched `prefetch_bytes` ahead (0: no software
// prefetch, the hardware prefetchers alone). The sum is exact whatever the split: the tail
// that does not divide into the parts is read at the end.
uint64_t read_stream_sum(std::span<const uint64_t> data, int streams, size_t prefetch_bytes);

// Read bandwidth in bytes/s of `data` read by `threads` threads, each taking an equal slice
// (one thread: the caller alone): the best of `passes` timed passes after one untimed pass that
// also faults the pages in. The passes alternate between one stream with no software prefetch
// and four prefetching streams per thread, since CPUs differ in which of the two reads faster
// (on an Intel Xeon VM with two threads: 22-28 GB/s for one scalar stream, 29-36 for four
// prefetched ones; bench/LOG.md, thirty-second session).
double read_bandwidth(std::span<const uint64_t> data, int threads, int passes = 6);

}  // namespace geniex
