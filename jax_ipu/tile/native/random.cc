// The IPU Model's per-tile random generators as XLA FFI handlers: each worker of each tile has
// a 128-bit generator state (four 32-bit seed words, as a tile's hardware PRNG has), which
// tile_random_uniform / tile_random_normal draw from and tile_get_hw_seeds / tile_set_hw_seeds
// read and write. The generator is xoroshiro128+; states start from the tile and worker ids.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

constexpr unsigned kWorkers = 6;
constexpr unsigned kWords = 4;

struct Generator {
  uint64_t s0, s1;
  uint64_t Next() {
    const uint64_t a = s0;
    uint64_t b = s1;
    const uint64_t result = a + b;
    b ^= a;
    s0 = ((a << 24) | (a >> 40)) ^ b ^ (b << 16);
    s1 = (b << 37) | (b >> 27);
    return result;
  }
  // Uniform in [0, 1) with float's 24 bits.
  float Unit() { return static_cast<float>(Next() >> 40) * (1.0f / 16777216.0f); }
};

uint64_t SplitMix(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::mutex state_mutex;
std::map<int64_t, std::vector<Generator>> states;  // tile -> its workers' generators

std::vector<Generator>& Tile(int64_t tile) {
  auto found = states.find(tile);
  if (found != states.end()) return found->second;
  std::vector<Generator> workers(kWorkers);
  for (unsigned w = 0; w < kWorkers; ++w) {
    uint64_t x = static_cast<uint64_t>(tile) * kWorkers + w;
    workers[w].s0 = SplitMix(x);
    workers[w].s1 = SplitMix(x) | 1u;
  }
  return states.emplace(tile, std::move(workers)).first->second;
}

template <typename Draw>
ffi::Error Fill(ffi::Result<ffi::AnyBuffer> out, ffi::Span<const int64_t> tiles, Draw draw) {
  std::lock_guard<std::mutex> lock(state_mutex);
  const std::size_t n = tiles.size();
  const std::size_t size = n ? out->element_count() / n : 0;
  for (std::size_t t = 0; t < n; ++t) {
    auto& workers = Tile(tiles[t]);
    for (std::size_t i = 0; i < size; ++i) draw(t * size + i, workers[i % kWorkers]);
  }
  return ffi::Error::Success();
}

void Store(ffi::Result<ffi::AnyBuffer>& out, std::size_t i, float value) {
  if (out->element_type() == ffi::DataType::F16) {
    half h = value;
    std::memcpy(static_cast<unsigned char*>(out->untyped_data()) + 2 * i, &h, 2);
  } else {
    static_cast<float*>(out->untyped_data())[i] = value;
  }
}

}  // namespace

// Uniform: floats offset + scale * (u - 1/2), as poprand's vertex spreads [min, max] around
// its middle; integers offset + floor(u * scale).
static ffi::Error Uniform(ffi::Result<ffi::AnyBuffer> out, ffi::Span<const int64_t> tiles,
                          double offset, double scale) {
  if (out->element_type() == ffi::DataType::S32) {
    int32_t* data = static_cast<int32_t*>(out->untyped_data());
    return Fill(out, tiles, [&](std::size_t i, Generator& g) {
      data[i] = static_cast<int32_t>(offset) +
                static_cast<int32_t>(std::floor(static_cast<double>(g.Unit()) * scale));
    });
  }
  return Fill(out, tiles, [&](std::size_t i, Generator& g) {
    Store(out, i, static_cast<float>(offset + scale * (static_cast<double>(g.Unit()) - 0.5)));
  });
}

// Normal: mean + stddev * z, z by Box-Muller from two draws.
static ffi::Error Normal(ffi::Result<ffi::AnyBuffer> out, ffi::Span<const int64_t> tiles,
                         double mean, double stddev) {
  return Fill(out, tiles, [&](std::size_t i, Generator& g) {
    const double u1 = 1.0 - static_cast<double>(g.Unit());  // (0, 1]
    const double u2 = static_cast<double>(g.Unit());
    const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
    Store(out, i, static_cast<float>(mean + stddev * z));
  });
}

static ffi::Error GetSeeds(ffi::ResultBuffer<ffi::DataType::U32> out,
                           ffi::Span<const int64_t> tiles) {
  std::lock_guard<std::mutex> lock(state_mutex);
  uint32_t* words = out->typed_data();
  for (std::size_t t = 0; t < tiles.size(); ++t) {
    auto& workers = Tile(tiles[t]);
    for (unsigned w = 0; w < kWorkers; ++w) {
      uint32_t* seed = words + (t * kWorkers + w) * kWords;
      seed[0] = static_cast<uint32_t>(workers[w].s0);
      seed[1] = static_cast<uint32_t>(workers[w].s0 >> 32);
      seed[2] = static_cast<uint32_t>(workers[w].s1);
      seed[3] = static_cast<uint32_t>(workers[w].s1 >> 32);
    }
  }
  return ffi::Error::Success();
}

static ffi::Error SetSeeds(ffi::Buffer<ffi::DataType::U32> seeds,
                           ffi::ResultBuffer<ffi::DataType::U32> out,
                           ffi::Span<const int64_t> tiles) {
  std::lock_guard<std::mutex> lock(state_mutex);
  const uint32_t* words = seeds.typed_data();
  std::memcpy(out->typed_data(), words, seeds.element_count() * sizeof(uint32_t));
  for (std::size_t t = 0; t < tiles.size(); ++t) {
    auto& workers = Tile(tiles[t]);
    for (unsigned w = 0; w < kWorkers; ++w) {
      const uint32_t* seed = words + (t * kWorkers + w) * kWords;
      workers[w].s0 = seed[0] | (static_cast<uint64_t>(seed[1]) << 32);
      workers[w].s1 = seed[2] | (static_cast<uint64_t>(seed[3]) << 32);
      if (workers[w].s0 == 0 && workers[w].s1 == 0) workers[w].s1 = 1;  // never all zero
    }
  }
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxIpuRandomUniform, Uniform,
                              ffi::Ffi::Bind()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<ffi::Span<const int64_t>>("tiles")
                                  .Attr<double>("offset")
                                  .Attr<double>("scale"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxIpuRandomNormal, Normal,
                              ffi::Ffi::Bind()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<ffi::Span<const int64_t>>("tiles")
                                  .Attr<double>("mean")
                                  .Attr<double>("stddev"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxIpuGetHwSeeds, GetSeeds,
                              ffi::Ffi::Bind()
                                  .Ret<ffi::Buffer<ffi::DataType::U32>>()
                                  .Attr<ffi::Span<const int64_t>>("tiles"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxIpuSetHwSeeds, SetSeeds,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::DataType::U32>>()
                                  .Ret<ffi::Buffer<ffi::DataType::U32>>()
                                  .Attr<ffi::Span<const int64_t>>("tiles"));
