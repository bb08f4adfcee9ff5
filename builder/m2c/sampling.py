"""A uniformly random subset of [0, N), produced lazily in increasing order from a seed.

Every n-subset is equally likely (exactly: integer draws only), memory is O(log N) and time
O(n log n), so sampling 100,000 fills out of 10^15 never materialises the space. The range is split
in halves; the number of picks falling in the left half follows the hypergeometric distribution,
drawn exactly one pick at a time; small or dense ranges are finished directly.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

LEAF = 24  # at most this many picks: Floyd's algorithm on the range


def sorted_sample(total: int, n: int, seed: int) -> Iterator[int]:
    """n distinct indices of [0, total) in increasing order (all of them when n >= total or n < 0).

    Reproducible for a seed on a given Python version (`random.Random.randrange`)."""
    if n < 0 or n >= total:
        yield from range(total)
        return
    rng = random.Random(seed)
    randrange = rng.randrange
    getrandbits = rng.getrandbits
    stack = [(0, total, n)]  # ranges still to sample, leftmost on top
    while stack:
        lo, hi, k = stack.pop()
        size = hi - lo
        if k == 0:
            continue
        if k == size:
            yield from range(lo, hi)
        elif size <= 2 * k:  # dense: selection sampling (Knuth's algorithm S) in O(size) = O(k)
            for i in range(size):
                if randrange(size - i) < k:
                    yield lo + i
                    k -= 1
                    if k == 0:
                        break
        elif k <= LEAF:  # Floyd: k draws, every k-subset equally likely
            chosen: set[int] = set()
            for j in range(size - k, size):
                pick = randrange(j + 1)
                chosen.add(j if pick in chosen else pick)
            for x in sorted(chosen):
                yield lo + x
        else:  # hypergeometric split: k draws without replacement, `left` of `size` fall left
            left = size // 2
            in_left, remaining = 0, left
            for i in range(k):
                m = size - i  # randrange(m), inlined: the same draws, without its call overhead
                bits = m.bit_length()
                r = getrandbits(bits)
                while r >= m:
                    r = getrandbits(bits)
                if r < remaining:
                    in_left += 1
                    remaining -= 1
            stack.append((lo + left, hi, k - in_left))
            stack.append((lo, lo + left, in_left))
