"""Accounting once per distinct ledger: a trial's epsilon and its cross-checks, cached.

After its fit every private trial accounts its ledger: the epsilon it spent (the suite's PLD
accountant, which the runner also holds against the target) and the independent cross-checks
(`crosscheck.check_ledger`: optimistic PLD, RDP, Laplace closed form). A figure has hundreds
of trials but few distinct ledgers (fig-adult-dp: 540 trials, 21 ledgers): seeds and fairness
knobs change neither the mechanisms a method runs nor their noise. Both are computed here
once per distinct (ledger, delta) per process.

Why a hit is sound. The key is `ledger_key`: delta, `parallel_groups`, and the ledger's
canonical form (`session.canonical`: the multiset of (group, round), a round named by its
full text, noise multipliers and sampling rates as `repr` writes them, which round-trips
floats exactly). The figures are not computed on whichever ledger came first with that key
but on the key's normal form (`normal_form`): one entry per (group, round), self-composed its
count times, in a fixed order. So two ledgers with one key get bit-identical results by
construction, however their entries are ordered, nested, split or labelled.

The normal form accounts exactly the ledger's mechanisms: composition is commutative and
associative, so its epsilon, its per-group epsilons under parallel composition (the group
tags are in the key) and its cross-check bounds are the ledger's. Only the numerics may
differ: float rounding with the order of composition (PLD convolutions, sums of Gaussian
precisions: about 1e-11 relative for a CGOO or DP-FERMI ledger written in the other order),
and the pessimistic discretisation where a ledger composes its rounds in parts (8 rounds as
3 + 5 are discretised in more steps: 2e-7 relative looser in the test's example; the normal
form self-composes each round once). The order is the session's (`session.ledger_of`):
Poisson-sampled rounds first, then full-data releases, each part by group (shared first) and
text. Ledgers as the sessions of DP-SGD, RaCO-DP, DP-FERMI, CGOO and DPNoSE write them are
their own normal form, so their figures are bit-identical to `PrivacyLedger.epsilon` and
`check_ledger` on them (tests/privacy/test_ledger_cache.py); DPSE's session writes its full-data
rounds stage by stage, and its normal form differs in the last bits (1e-15 relative,
measured). Labels are not in the key: they name releases and do not change their accounting.

The cache is bounded (`MAX_LEDGERS`, least recently used out) and per process; the time a
trial spends here, hit or miss, is inside its stored wall time.
"""

from __future__ import annotations

import copy
import threading
from collections import Counter, OrderedDict
from dataclasses import dataclass
from typing import Any

from dp_accounting import dp_event

from fairbench.privacy.crosscheck import check_ledger
from fairbench.privacy.ledger import PrivacyLedger
from fairbench.privacy.pld import SubstitutionSampledDpEvent
from fairbench.privacy.session import canonical

MAX_LEDGERS = 1024  # distinct (ledger, delta) kept per process; a figure has tens

LedgerKey = tuple[float, bool, tuple[tuple[tuple[int | None, str], int], ...]]
_SAMPLED = (dp_event.PoissonSampledDpEvent, SubstitutionSampledDpEvent)


def ledger_key(ledger: PrivacyLedger, delta: float) -> LedgerKey:
    """Hashable key of everything the accounting of `ledger` at `delta` depends on: delta,
    whether groups compose in parallel, and the canonical multiset of (group, round)."""
    rounds = canonical(ledger)
    items = tuple(sorted(((k, n) for k, n in rounds.items() if n), key=lambda kn: _order(kn[0])))
    return float(delta), bool(ledger.parallel_groups), items


def _order(key: tuple[int | None, str]) -> tuple[bool, bool, int, str]:
    """Sampled rounds first, then by group (shared first), then by text."""
    group, text = key
    sampled = text.startswith(tuple(f"{cls.__name__}(" for cls in _SAMPLED))
    return not sampled, group is not None, group or 0, text


def normal_form(ledger: PrivacyLedger) -> PrivacyLedger:
    """The ledger that `ledger_key(ledger, ...)` stands for: one entry per (group, round) in
    the key's order, each round self-composed its count times (its releases on one batch
    composed in text order, as the session writes them). A function of the key alone."""
    counts: Counter[tuple[int | None, str]] = Counter()
    objects: dict[str, dp_event.DpEvent] = {}
    for entry in ledger.entries:
        for text, times in _rounds(entry.event, objects).items():
            counts[(entry.group, text)] += times
    counts = +counts  # zero counts (a round self-composed 0 times) release nothing
    if counts != +canonical(ledger):  # the texts here must be `canonical`'s, or the key lies
        raise RuntimeError("ledger_cache: round texts differ from session.canonical's")
    out = PrivacyLedger(parallel_groups=ledger.parallel_groups)
    for group, text in sorted(counts, key=_order):
        times, event = counts[(group, text)], objects[text]
        out.record(text, event if times == 1 else dp_event.SelfComposedDpEvent(event, times), group)
    return out


def _rounds(event: dp_event.DpEvent, objects: dict[str, dp_event.DpEvent]) -> Counter[str]:
    """`event`'s rounds counted by text (the text of `session.canonical`), each round's
    normal-form event stored in `objects` under its text."""
    if isinstance(event, dp_event.SelfComposedDpEvent):
        return Counter({k: v * event.count for k, v in _rounds(event.event, objects).items()})
    if isinstance(event, dp_event.ComposedDpEvent):
        total: Counter[str] = Counter()
        for e in event.events:
            total += _rounds(e, objects)
        return total
    if isinstance(event, dp_event.NoOpDpEvent):
        return Counter()
    if isinstance(event, _SAMPLED):
        inner_objects: dict[str, dp_event.DpEvent] = {}
        texts = sorted(_rounds(event.event, inner_objects).elements())
        parts = [inner_objects[t] for t in texts]
        inner = (
            dp_event.NoOpDpEvent()
            if not parts
            else parts[0]
            if len(parts) == 1
            else dp_event.ComposedDpEvent(parts)
        )
        text = f"{type(event).__name__}({event.sampling_probability!r}, {texts})"
        objects[text] = type(event)(event.sampling_probability, inner)
        return Counter({text: 1})
    text = repr(event)
    objects[text] = event
    return Counter({text: 1})


@dataclass
class _Accounting:
    ledger: PrivacyLedger  # the normal form
    delta: float
    epsilon: float
    checks: dict[str, Any] | None = None  # computed on first request


_cache: OrderedDict[LedgerKey, _Accounting] = OrderedDict()
_lock = threading.Lock()
_stats = Counter({"hits": 0, "misses": 0, "check_misses": 0})


def _lookup(ledger: PrivacyLedger, delta: float) -> _Accounting:
    key = ledger_key(ledger, delta)
    with _lock:
        found = _cache.get(key)
        if found is not None:
            _cache.move_to_end(key)
            _stats["hits"] += 1
            return found
    normal = normal_form(ledger)
    found = _Accounting(normal, float(delta), normal.epsilon(delta))
    with _lock:
        _stats["misses"] += 1
        found = _cache.setdefault(key, found)  # a racing thread's result is the same
        _cache.move_to_end(key)
        while len(_cache) > MAX_LEDGERS:
            _cache.popitem(last=False)
    return found


def epsilon(ledger: PrivacyLedger, delta: float) -> float:
    """`ledger.epsilon(delta)`, once per distinct (ledger, delta) per process (computed on the
    normal form; see the module docstring)."""
    return _lookup(ledger, delta).epsilon


def cross_check(ledger: PrivacyLedger, delta: float) -> dict[str, Any]:
    """`check_ledger(ledger, delta, epsilon(ledger, delta))`, once per distinct (ledger,
    delta) per process; a fresh copy each call (the cached dict is never handed out)."""
    found = _lookup(ledger, delta)
    if found.checks is None:
        checks = check_ledger(found.ledger, found.delta, found.epsilon)
        with _lock:
            _stats["check_misses"] += 1
            found.checks = checks
    return copy.deepcopy(found.checks)


def cache_info() -> dict[str, int]:
    """Lookups answered from the cache (`hits`), epsilons computed (`misses`), cross-checks
    computed (`check_misses`) and ledgers held (`size`), since the last `cache_clear`."""
    with _lock:
        return {**_stats, "size": len(_cache)}


def cache_clear() -> None:
    with _lock:
        _cache.clear()
        for name in _stats:
            _stats[name] = 0
