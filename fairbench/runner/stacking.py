"""Which trials train together: trials that differ only in seed, knob value and the
hyper-parameters their method declares `mixed` (a tune's draws of one method entry at one
epsilon), of a method that stacks (`Method.stackable`), run as one stacked program
(`runner.trial.stack_key`, `runner.trial.run_stack`).

A trial's numbers depend on its stack-mates within float32 reduction order (padding and
batched matrix products sum in another order; where a method's update takes a sign, as DP-ERM
mitigation's does, such a difference can flip one and move the whole trajectory: an equally
valid run, not the same one), so stacks are a function of the config alone:
every trial of the config, grouped, sorted by (label, seed, knob, hyper-parameters) and cut
into balanced pieces of at most `MAX_STACK` on the CPU (bounded so that a stack's training
sets, one per seed, fit in memory) or `MAX_STACK_CUDA` on a GPU. Label first: a tune's draw
keeps its search seeds in one stack, and so in one worker process, where its plan's
calibration and its ledger's epsilon are computed once (both are cached per process); cut
seed first, the seeds of one draw landed in different processes, each paying them again.
A trial whose plan its method refuses (a draw that cannot be calibrated at its epsilon)
fails alone and the rest of its stack still runs as one (`runner.worker.run_unit`), which
again depends on the specs alone. The worker count, a resume, or the executor never change
them, so a run gives the same numbers however it is run. Units are ordered larger epsilon
first (a method calibrated by its step count runs more steps there), then largest first, so
that long units start early. Every other trial is a unit of its own.
"""

from __future__ import annotations

import json
import math

from fairbench.runner.trial import TrialSpec, stack_key

MAX_STACK = 20
# On a GPU a stack's step costs about as many kernel launches whatever its size, so a figure's
# launches scale with its rounds only when its trials share few programs: a run packs up to
# this many (a few MB of batch buffers per trial: hundreds fit in any GPU's memory).
MAX_STACK_CUDA = 256


def max_stack_for(device: str) -> int:
    """The stack bound of a run on `device` (a resolved spec's: "cpu" or "cuda"); a function
    of the config, like the stacks."""
    return MAX_STACK_CUDA if device == "cuda" else MAX_STACK


def work_units(specs: list[TrialSpec], max_stack: int | None = None) -> list[list[TrialSpec]]:
    """The trials as units of work (see the module docstring): pass every trial of the run,
    done or not, so that the stacks are the config's. `max_stack`: by default the bound of
    the trials' device (`max_stack_for`)."""
    groups: dict[str, list[TrialSpec]] = {}
    for spec in specs:
        groups.setdefault(stack_key(spec) or spec.trial_id, []).append(spec)
    units: list[list[TrialSpec]] = []
    for members in groups.values():
        members.sort(
            key=lambda s: (
                s.label,
                s.seed,
                -math.inf if s.knob is None else s.knob,
                json.dumps(s.hparams, sort_keys=True, default=str),
            )
        )
        bound = max_stack_for(members[0].device) if max_stack is None else max_stack
        size = math.ceil(len(members) / math.ceil(len(members) / bound))
        units += [members[i : i + size] for i in range(0, len(members), size)]
    units.sort(key=lambda u: (-(u[0].epsilon or 0.0), -len(u)))
    return units
