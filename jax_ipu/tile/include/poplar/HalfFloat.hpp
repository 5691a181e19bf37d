// jax-ipu's host stand-in for Poplar's half type: IEEE binary16, as the IPU's half is.
// Written for jax_ipu.tile. Compilers with _Float16 (g++ 12+, clang 15+ on x86-64 and AArch64)
// use it; others get a 2-byte class whose arithmetic is done in float and rounded (to nearest
// even) when stored.
#ifndef JAX_IPU_POPLAR_HALF_FLOAT_HPP
#define JAX_IPU_POPLAR_HALF_FLOAT_HPP

#if defined(__FLT16_MANT_DIG__)

using half = _Float16;

#else

#include <cstdint>
#include <cstring>
#include <type_traits>

class half {
 public:
  half() = default;
  template <typename U, typename = std::enable_if_t<std::is_arithmetic_v<U>>>
  half(U value) : bits_(FromFloat(static_cast<float>(value))) {}  // NOLINT: implicit, as _Float16
  operator float() const { return ToFloat(bits_); }                 // NOLINT
  half& operator+=(float v) { return *this = half(float(*this) + v); }
  half& operator-=(float v) { return *this = half(float(*this) - v); }
  half& operator*=(float v) { return *this = half(float(*this) * v); }
  half& operator/=(float v) { return *this = half(float(*this) / v); }

 private:
  static std::uint16_t FromFloat(float f) {
    std::uint32_t x;
    std::memcpy(&x, &f, 4);
    const std::uint32_t sign = (x >> 16) & 0x8000u;
    const std::uint32_t abs = x & 0x7fffffffu;
    if (abs >= 0x7f800000u) {  // inf or nan
      return static_cast<std::uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
    }
    if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // overflow
    if (abs < 0x38800000u) {  // subnormal half (or zero): round at the 2^-24 unit
      float scaled;
      std::uint32_t a = abs;
      std::memcpy(&scaled, &a, 4);
      scaled = scaled * 16777216.0f;  // in units of 2^-24, exact; round to nearest even
      std::uint32_t m = static_cast<std::uint32_t>(scaled);
      const float rest = scaled - static_cast<float>(m);
      if (rest > 0.5f || (rest == 0.5f && (m & 1u))) ++m;
      return static_cast<std::uint16_t>(sign | m);
    }
    std::uint32_t mantissa = abs & 0x7fffffu;
    std::uint32_t exponent = (abs >> 23) - 112;
    std::uint32_t out = (exponent << 10) | (mantissa >> 13);
    const std::uint32_t rest = mantissa & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (out & 1u))) ++out;  // may carry into exponent
    return static_cast<std::uint16_t>(sign | out);
  }
  static float ToFloat(std::uint16_t h) {
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
    const std::uint32_t exponent = (h >> 10) & 0x1fu;
    const std::uint32_t mantissa = h & 0x3ffu;
    float f;
    if (exponent == 0) {
      f = static_cast<float>(mantissa) / 16777216.0f;
      return sign ? -f : f;
    }
    std::uint32_t x = exponent == 31 ? (sign | 0x7f800000u | (mantissa << 13))
                                     : (sign | ((exponent + 112) << 23) | (mantissa << 13));
    std::memcpy(&f, &x, 4);
    return f;
  }
  std::uint16_t bits_;
};

static_assert(sizeof(half) == 2 && std::is_trivially_copyable_v<half>,
              "jax_ipu: half must be a 2-byte IEEE binary16");

#endif

#endif  // JAX_IPU_POPLAR_HALF_FLOAT_HPP
