"""adaptive_asha: several ASHA brackets side by side, from ``mode`` (Determined's adaptive_asha.go).

``max_rungs`` is first capped so that the top rung can be reached: at most
``floor(log_divisor(length)) + 1`` and ``floor(log_divisor(max_trials)) + 1`` rungs. The mode then
picks the brackets' rung counts: aggressive ``[max_rungs]``; standard
``(max_rungs - 1) // 2 + 1 .. max_rungs``; conservative ``1 .. max_rungs`` (or ``bracket_rungs``
as given), ordered from most rungs (most early stopping) to fewest.

``max_trials`` is split so each bracket gets roughly the same compute: bracket weights
``divisor**(rungs - 1) / rungs``, each ``max(int(share * max_trials), 1)``, the remainder to the
first. ``max_concurrent_trials`` (at least one per bracket) is split evenly, the remainder to the
first brackets; 0 gives each bracket ``max(max_trials of the last bracket, int(divisor))``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from controlplane.searchers.asha import AshaSearcher, Bracket, power, searcher_length

if TYPE_CHECKING:
    from controlplane.config.experiment import SearcherConfig


def floor_log(x: int, base: float, cap: int) -> int:
    """``min(floor(log(x) / log(base)), cap)``, exactly (``math.log(1000) / math.log(10)`` is
    2.9999999999999996) and in at most ``cap`` steps."""
    k = 0
    while k < cap and power(base, k + 1) <= x:
        k += 1
    return k


def mode_rungs(mode: str, max_rungs: int) -> list[int]:
    if mode == "aggressive":
        return [max_rungs]
    if mode == "conservative":
        return list(range(1, max_rungs + 1))
    return list(range((max_rungs - 1) // 2 + 1, max_rungs + 1))


def bracket_max_trials(max_trials: int, divisor: float, brackets: list[int]) -> list[int]:
    weights = [power(divisor, rungs - 1) / rungs for rungs in brackets]
    total = sum(weights)
    out = [max(int(w / total * max_trials), 1) for w in weights]
    out[0] += max(max_trials - sum(out), 0)
    return out


def bracket_max_concurrent_trials(max_concurrent_trials: int, divisor: float, max_trials: list[int]) -> list[int]:
    n = len(max_trials)
    if max_concurrent_trials == 0:
        each, remainder = max(max_trials[-1], int(divisor)), 0
    else:
        total = max(max_concurrent_trials, n)
        each, remainder = divmod(total, n)
    out = [each] * n
    for i in range(remainder):
        out[i] += 1
    return out


def plan_brackets(s: SearcherConfig) -> list[tuple[int, int, int]]:
    """(rungs, max_trials, max_concurrent_trials) per bracket, most rungs first."""
    assert s.max_trials is not None
    rungs = list(s.bracket_rungs)
    if not rungs:
        length = searcher_length(s)
        max_rungs = min(s.max_rungs, floor_log(length, s.divisor, s.max_rungs) + 1,
                        floor_log(s.max_trials, s.divisor, s.max_rungs) + 1)
        rungs = mode_rungs(s.mode, max_rungs)
    rungs.sort(reverse=True)
    trials = bracket_max_trials(s.max_trials, s.divisor, rungs)
    concurrent = bracket_max_concurrent_trials(s.max_concurrent_trials, s.divisor, trials)
    return list(zip(rungs, trials, concurrent, strict=True))


class AdaptiveAshaSearcher(AshaSearcher):
    @classmethod
    def make_brackets(cls, s: SearcherConfig) -> list[Bracket]:
        length = searcher_length(s)
        return [Bracket.new(rungs, trials, concurrent, s.divisor, length)
                for rungs, trials, concurrent in plan_brackets(s)]
