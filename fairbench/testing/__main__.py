"""`python -m fairbench.testing module:ClassName [...]`: the method contract from a shell, one
line per check, exit status 0 when every class passes, 1 otherwise."""

from __future__ import annotations

import argparse
import importlib
import json
import sys

from fairbench.testing.methods import iter_checks


def load(target: str) -> type:
    """The class `module:ClassName` names (the current directory is importable)."""
    module, _, name = target.partition(":")
    if not module or not name:
        raise SystemExit(f"error: {target!r}: expected module:ClassName")
    return getattr(importlib.import_module(module), name)


def run(target: str, **options) -> bool:
    """Print each check of one class as it passes; False at its first failure."""
    cls = load(target)
    try:
        for check in iter_checks(cls, **options):
            print(f"{'SKIP' if ': skipped' in check else 'PASS'} {target} {check}", flush=True)
    except AssertionError as exc:
        print(f"FAIL {target} {exc}", flush=True)
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fairbench.testing", description=__doc__)
    parser.add_argument("targets", nargs="+", metavar="module:ClassName")
    parser.add_argument("--hparams", default="{}", help="JSON object, e.g. '{\"epochs\": 2}'")
    parser.add_argument("--knob", type=float, help="knob value of the contract fits")
    parser.add_argument("--knob-values", type=float, nargs=2, metavar=("LOOSE", "STRICT"))
    parser.add_argument("--constraint", help="default demographic_parity")
    args = parser.parse_args(argv)
    options = {
        "hparams": json.loads(args.hparams),
        "knob": args.knob,
        "constraint": args.constraint,
        "knob_values": tuple(args.knob_values) if args.knob_values else None,
    }
    results = [run(target, **options) for target in args.targets]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
