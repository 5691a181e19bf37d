// The IPU Model's cycle counter as an XLA FFI handler: every tile's (low, high) 32-bit words of
// the count the compiler wrote into this call site's `cycles` attribute (0 off the IPU Model).
#include <cstdint>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

static ffi::Error CycleCount(ffi::ResultBuffer<ffi::DataType::U32> out, int64_t site,
                             int64_t cycles) {
  (void)site;
  uint32_t* words = out->typed_data();
  const std::size_t tiles = out->element_count() / 2;
  for (std::size_t t = 0; t < tiles; ++t) {
    words[2 * t] = static_cast<uint32_t>(static_cast<uint64_t>(cycles) & 0xffffffffu);
    words[2 * t + 1] = static_cast<uint32_t>(static_cast<uint64_t>(cycles) >> 32);
  }
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxIpuVertexHandler, CycleCount,
                              ffi::Ffi::Bind()
                                  .Ret<ffi::Buffer<ffi::DataType::U32>>()
                                  .Attr<int64_t>("site")
                                  .Attr<int64_t>("cycles"));
