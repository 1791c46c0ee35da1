"""tanh for the final-logit softcap (Gemma 2: logits -> 30 tanh(logits / 30)) inside the log-prob
kernels, from exp2 alone: the Triton interpreter has no libdevice, and ``tl.math`` has no tanh."""

import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def _tanh(y):
    """(tanh y, 1 - tanh^2 y) to a few fp32 ulps, from exp2 (the interpreter has no libdevice):
    |y| >= 0.5: u = 2 / (exp(2|y|) + 1) = 1 - tanh|y| exactly formed, so 1 - tanh^2 = u (2 - u)
    keeps its digits where tanh -> 1; |y| < 0.5: the odd series to y^17 (last term < 1e-8)."""
    a = tl.abs(y)
    # div.full (2 ulps, 2 instructions) not div.rn (~10): u is within a few ulps either way
    u = tl.fdiv(2.0, tl.math.exp2(a * (2.0 * LOG2E)) + 1.0)
    y2 = y * y
    q = 6404582.0 / 10854718875.0
    q = q * y2 - 929569.0 / 638512875.0
    q = q * y2 + 21844.0 / 6081075.0
    q = q * y2 - 1382.0 / 155925.0
    q = q * y2 + 62.0 / 2835.0
    q = q * y2 - 17.0 / 315.0
    q = q * y2 + 2.0 / 15.0
    q = q * y2 - 1.0 / 3.0
    small = a < 0.5
    t_small = y + y * (y2 * q)
    t = tl.where(small, t_small, tl.where(y < 0, u - 1.0, 1.0 - u))
    dt = tl.where(small, 1.0 - t_small * t_small, u * (2.0 - u))
    return t, dt
