"""The statistics of kvevict.ab's report, in plain Python (no numpy).

- wilson(k, n): the Wilson score interval of a proportion (95%: z = 1.96).
- mcnemar_exact(b, c): the two-sided exact McNemar test of paired
  right/wrong outcomes: b items the reference arm gets right and the other
  wrong, c the reverse; p = min(1, 2 * P(X <= min(b, c))), X ~ Bin(b + c, 1/2).
- percentile(xs, q): linear interpolation between order statistics (the
  default of numpy.percentile).
"""
import math
from typing import Dict, List, Sequence, Tuple

Z95 = 1.959963984540054


def wilson(k: int, n: int, z: float = Z95) -> Tuple[float, float, float]:
    """(k/n, low, high): the Wilson score interval; (0, 0, 1) when n == 0."""
    if not (isinstance(k, int) and isinstance(n, int)) or n < 0 or not 0 <= k <= max(n, 0):
        raise ValueError("wilson(k=%r, n=%r): expected ints 0 <= k <= n" % (k, n))
    if n == 0:
        return 0.0, 0.0, 1.0
    p = k / n
    d = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / d
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return p, max(0.0, centre - half), min(1.0, centre + half)


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value of b and c discordant pairs (1.0 when
    there are none)."""
    if not (isinstance(b, int) and isinstance(c, int)) or b < 0 or c < 0:
        raise ValueError("mcnemar_exact(b=%r, c=%r): expected ints >= 0" % (b, c))
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1)) / 2.0 ** n
    return min(1.0, 2.0 * tail)


def percentile(xs: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) of xs, linear between order statistics;
    0.0 for no values."""
    if not 0 <= q <= 100:
        raise ValueError("percentile q=%r: expected 0..100" % (q,))
    s = sorted(xs)
    if not s:
        return 0.0
    pos = (len(s) - 1) * q / 100.0
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def paired(ref: Sequence[bool], arm: Sequence[bool]) -> Dict[str, float]:
    """The arm against the reference on the same items: accuracy difference
    (arm - ref), b (ref right, arm wrong), c (ref wrong, arm right) and the
    exact McNemar p-value."""
    if len(ref) != len(arm):
        raise ValueError("paired: %d reference outcomes, %d arm outcomes" % (len(ref), len(arm)))
    b = sum(1 for r, a in zip(ref, arm) if r and not a)
    c = sum(1 for r, a in zip(ref, arm) if a and not r)
    n = len(ref)
    return dict(diff=(c - b) / n if n else 0.0, ref_only=b, arm_only=c,
                p_mcnemar=mcnemar_exact(b, c))


def histogram(xs: Sequence[int], edges: List[int]) -> List[int]:
    """Counts of xs in [edges[i], edges[i+1]); the last bin includes its top."""
    counts = [0] * (len(edges) - 1)
    for x in xs:
        for i in range(len(counts)):
            if edges[i] <= x < edges[i + 1] or (i == len(counts) - 1 and x == edges[-1]):
                counts[i] += 1
                break
    return counts
