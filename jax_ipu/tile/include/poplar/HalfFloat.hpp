// jax-ipu's host stand-in for Poplar's half type: IEEE binary16, as the IPU's half is.
// Written for jax_ipu.tile; GCC and Clang on x86-64 and AArch64 provide _Float16.
#ifndef JAX_IPU_POPLAR_HALF_FLOAT_HPP
#define JAX_IPU_POPLAR_HALF_FLOAT_HPP

using half = _Float16;

#endif  // JAX_IPU_POPLAR_HALF_FLOAT_HPP
