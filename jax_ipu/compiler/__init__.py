"""The compiler: StableHLO in, an IPU program (the model's report plus XLA:CPU numerics) out.

compile() is its entry point (load() takes back what it made earlier); the lowering rules for
platform "ipu" live here too."""

from jax_ipu.compiler.driver import Compiled, compile, load

__all__ = ["Compiled", "compile", "load"]
