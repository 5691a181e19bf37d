"""StableHLO in, IPU program out: reading, checks against the chip, the model's verdict, the
XLA:CPU numerics executable, and the JAX lowering rules for platform "ipu"."""
