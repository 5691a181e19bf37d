"""complex64 as the IPU runs it: two float32 a value, and the float32 work each complex op becomes.

The chip has no complex type or instruction: a complex op runs as float32 vector instructions
on (real, imaginary) pairs, one pair to a 64-bit vector. Products become real matmuls."""

from __future__ import annotations

from dataclasses import dataclass

from jax_ipu.dtypes import itemsize, pair_of
from jax_ipu.model.ir import Op
from jax_ipu.model.targets import (
    DIVIDE_CYCLES_PER_VECTOR,
    SIMPLE_CYCLES_PER_VECTOR,
    TRANSCENDENTAL_CYCLES_PER_VECTOR,
    VECTOR_BYTES,
)


@dataclass(frozen=True)
class FloatWork:
    """The scalar float32 operations one complex element of an op takes: simple ones (add,
    multiply, compare, select), divides, and transcendentals (exp, log, sin, sqrt, atan2...)."""

    simple: int
    divides: int = 0
    transcendentals: int = 0

    @property
    def flops(self) -> int:
        return self.simple + self.divides + self.transcendentals

    def cycles(self, elements: int) -> float:
        """ALU cycles of a vector holding `elements` complex elements: a float32 vector
        instruction works on as many lanes as a 64-bit vector holds (two: one value's parts),
        at the cycles a vector the model gives each kind of instruction."""
        per_element = (self.simple * SIMPLE_CYCLES_PER_VECTOR
                       + self.divides * DIVIDE_CYCLES_PER_VECTOR
                       + self.transcendentals * TRANSCENDENTAL_CYCLES_PER_VECTOR)
        return elements * per_element / FLOAT32_LANES


FLOAT32_LANES = VECTOR_BYTES // 4

# The float32 work of each complex op, per element, from its textbook formula on z = a + bi:
# one float32 operation each on the real and the imaginary part for add, subtract, negate and
# select; (ac - bd) + (ad + bc)i is 4 multiplies and 2 adds; a quotient takes |w|^2 (2
# multiplies, an add), the two numerators (4 multiplies, 2 adds) and 2 divides; |z| is
# sqrt(a^2 + b^2); exp(z) is e^a (cos b + i sin b); log(z) is log|z| + i atan2(b, a); sin,
# cos, tan and tanh go through sin/cos a and sinh/cosh b. Moving the parts (real, imag,
# complex, a conversion to or from a real type) is no arithmetic: its loads and stores set
# its time.
WORK: dict[str, FloatWork] = {
    "add": FloatWork(2), "subtract": FloatWork(2), "negate": FloatWork(2),
    "select": FloatWork(2),
    "multiply": FloatWork(6),
    "divide": FloatWork(9, divides=2),
    "compare": FloatWork(3),  # both parts compared, the two answers combined
    "abs": FloatWork(3, transcendentals=1),
    "sign": FloatWork(3, divides=2, transcendentals=1),  # z / |z|
    "exponential": FloatWork(2, transcendentals=3),
    "exponential_minus_one": FloatWork(3, transcendentals=3),
    "log": FloatWork(4, transcendentals=2),
    "log_plus_one": FloatWork(5, transcendentals=2),
    "sqrt": FloatWork(8, divides=1, transcendentals=2),  # from |z|: sqrt((|z| + |a|) / 2)
    "rsqrt": FloatWork(11, divides=3, transcendentals=2),  # sqrt, then 1 / w
    "power": FloatWork(12, transcendentals=5),  # exp(w log z)
    "sine": FloatWork(2, transcendentals=4), "cosine": FloatWork(2, transcendentals=4),
    "tan": FloatWork(3, divides=2, transcendentals=4),
    "tanh": FloatWork(3, divides=2, transcendentals=4),
    "real": FloatWork(0), "imag": FloatWork(0), "complex": FloatWork(0),
    "convert": FloatWork(0),
}
# Complex functions not listed (asin, acosh, atan...) are logarithms of square-root
# expressions, e.g. asin z = -i log(iz + sqrt(1 - z^2)): a product, two sums, a square root
# and a logarithm.
COMPOSED = FloatWork(22, divides=1, transcendentals=4)
# Any other op on complex data (a bitwise or rounding op has no complex form) works on both
# parts once.
PARTWISE = FloatWork(2)


def is_complex(dtype: str) -> bool:
    return pair_of(dtype) is not None


def parts(dtype: str) -> int:
    """Real values an element holds: 2 for a complex type, else 1."""
    return 2 if is_complex(dtype) else 1


def float_work(op: Op, transcendental: bool) -> FloatWork | None:
    """The float32 work of one element of `op` when it reads or makes complex values (None
    for a real op); `transcendental`: whether the op is a transcendental function."""
    if not any(is_complex(t.dtype) for t in op.operands + op.results):
        return None
    return WORK.get(op.kind) or (COMPOSED if transcendental else PARTWISE)


def real_form(dtype: str) -> tuple[int, int]:
    """(factor, bytes an element) of a product's operands as the real matmul it becomes: a
    complex product [a b] @ [c d] is the real [Re a, Im a] @ [[Re b, Im b], [-Im b, Re b]],
    with the contraction and the columns twice as long (the 4 real products of the parts in
    one), in float32; a real product is itself."""
    part = pair_of(dtype)
    return (1, itemsize(dtype)) if part is None else (2, itemsize(part))
