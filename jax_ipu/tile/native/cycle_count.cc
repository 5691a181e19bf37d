// The IPU Model's cycle counter as an XLA FFI handler: every tile's (low, high) 32-bit words of
// the count the compiler wrote into this call site's attributes (0 off the IPU Model). Inside
// counted loops the site is reached once a trip: its k-th call in a program's run reads
// cycles + sum over loops of trip index x that loop's cycles a trip (`strides`, `trips`,
// innermost first), its trip indices the mixed-radix digits of k.
#include <cstdint>
#include <map>
#include <mutex>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

std::mutex calls_mutex;
std::map<int64_t, uint64_t> calls;  // site -> times reached, over all runs

uint64_t Reached(int64_t site, uint64_t period) {
  std::lock_guard<std::mutex> lock(calls_mutex);
  uint64_t k = calls[site]++;
  return period ? k % period : 0;
}

}  // namespace

static ffi::Error CycleCount(ffi::ResultBuffer<ffi::DataType::U32> out, int64_t site,
                             int64_t cycles, ffi::Span<const int64_t> strides,
                             ffi::Span<const int64_t> trips) {
  if (strides.size() != trips.size()) {
    return ffi::Error(ffi::ErrorCode::kInvalidArgument,
                      "ipu_cycle_count: strides and trips differ in length");
  }
  uint64_t period = 1;
  for (int64_t n : trips) period *= static_cast<uint64_t>(n > 0 ? n : 1);
  uint64_t k = trips.size() ? Reached(site, period) : 0;
  uint64_t count = static_cast<uint64_t>(cycles);
  for (std::size_t level = 0; level < trips.size(); ++level) {
    const uint64_t n = static_cast<uint64_t>(trips[level] > 0 ? trips[level] : 1);
    count += (k % n) * static_cast<uint64_t>(strides[level]);
    k /= n;
  }
  uint32_t* words = out->typed_data();
  const std::size_t tiles = out->element_count() / 2;
  for (std::size_t t = 0; t < tiles; ++t) {
    words[2 * t] = static_cast<uint32_t>(count & 0xffffffffu);
    words[2 * t + 1] = static_cast<uint32_t>(count >> 32);
  }
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxIpuVertexHandler, CycleCount,
                              ffi::Ffi::Bind()
                                  .Ret<ffi::Buffer<ffi::DataType::U32>>()
                                  .Attr<int64_t>("site")
                                  .Attr<int64_t>("cycles")
                                  .Attr<ffi::Span<const int64_t>>("strides")
                                  .Attr<ffi::Span<const int64_t>>("trips"));
