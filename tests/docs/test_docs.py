"""The README and docs/ show commands; this module runs them, so the documentation cannot rot.

What counts as a command, and how each kind is checked:

- a `$ ` line of a ```console block (continued by a trailing backslash; `# ...` is a comment):
  - `fairbench ...`: run in-process through the real entry point, in document order, in a
    scratch directory holding a link to `configs/` (so `runs/...` written by one command is read
    by the next), and must exit 0. The scratch directory has no `results/`, so nothing
    committed can be rewritten; commands on `results/`, and those that take minutes or reach
    the network, are in EXPENSIVE: run with `--dry-run`, or parsed by the real command line
    without being invoked, with the reason beside each;
  - `make TARGET`: `make -n TARGET` must succeed (every target runs for minutes or hours, and
    `make test` is this suite);
  - `python -m fairbench.testing ...`: run from the repository root;
- a `fairbench ...` line of a ```text block (a synopsis) and `fairbench ...` in inline code: the
  command must exist and every `--option` it names must be one of that command's options;
  inline `make TARGET` must be a real target.
Markdown links between the documents must resolve, anchors included.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer
import typer.main

from fairbench.figures import FIGURES
from tests.conftest import REPO, needs_adult

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

# the tune outputs behind the committed figures, as the figure registry lists them
PRIVACY_COST = " ".join(FIGURES["privacy-cost"].committed)
TUNING_COST = " ".join(FIGURES["tuning-cost"].committed)

# command as written (shlex-normalised) -> (check, why it is not run as written)
EXPENSIVE: dict[str, tuple[str, str]] = {
    "fairbench run": ("--dry-run", "the default benchmark: 33 trials on real Adult"),
    "fairbench data fetch adult": ("parse", "downloads from UCI into $FAIRBENCH_DATA"),
    "fairbench verify results/figures/fig-adult-dp --sample 60 --workers 2": (
        "parse",
        "re-runs 60 trials on real Adult",
    ),
    "fairbench data fetch acs --option state=AL --option year=2018 --option horizon=5-Year": (
        "parse",
        "downloads a census PUMS file",
    ),
    "fairbench run configs/runs/smoke.yaml --executor dask --workers 2 --out runs/dask": (
        "--dry-run",
        "starts a Dask cluster; tests/runner/test_runner.py runs one against the local executor",
    ),
    "fairbench run configs/runs/smoke.yaml --executor dask --scheduler tcp://127.0.0.1:8786": (
        "parse",
        "needs a running Dask scheduler",
    ),
    "fairbench audit --method dp-sgd --epsilon 1 --trials 10 --canaries 1000": (
        "parse",
        "10 training runs of 1000 canaries, about 30 s (make audit runs it)",
    ),
    "fairbench audit --method raco-dp --epsilon 1 --knob 0.05 --broken one-third-noise": (
        "parse",
        "10 training runs of 1000 canaries, about 30 s (make audit runs it)",
    ),
    "fairbench bench --json": ("parse", "times every method's step over 60 rounds"),
    "fairbench bench --figure fig-adult-dp --workers 2": (
        "parse",
        "runs the 540-trial figure from scratch, about 9 minutes",
    ),
    "fairbench tune tune-adult-dp --out results/tune/adult-dp --charge-tuning": (
        "parse",
        "tunes every method on Adult for tens of minutes, into results/",
    ),
    "fairbench figure privacy-cost results/tune/privacy-cost/german --out runs/fig-german": (
        "parse",
        "reads the committed tune output under results/",
    ),
    "fairbench figure literature results/tune/literature results/tune/literature-adult-dp "
    "--out runs/fig-literature": ("parse", "reads the committed tune outputs under results/"),
    "fairbench figure literature results/tune/literature results/tune/literature-adult-dp "
    "--out results/figures/fig-literature": (
        "parse",
        "rewrites the committed figure under results/ (make fig-literature)",
    ),
    f"fairbench figure privacy-cost {PRIVACY_COST} --out results/figures/fig-privacy-cost": (
        "parse",
        "rewrites the committed figure under results/ (make fig-privacy-cost)",
    ),
    f"fairbench figure tuning-cost {TUNING_COST} --out results/figures/fig-tuning-cost": (
        "parse",
        "rewrites the committed figure under results/ (make fig-tuning-cost)",
    ),
}


@dataclass(frozen=True)
class Command:
    doc: Path
    line: int
    argv: tuple[str, ...]

    @property
    def text(self) -> str:
        return shlex.join(self.argv)

    def __str__(self) -> str:
        return f"{self.doc.relative_to(REPO)}:{self.line}: {self.text}"


def fenced_blocks(path: Path) -> Iterator[tuple[str, int, list[str]]]:
    """(language, line number of the first content line, lines) of every fenced block."""
    lang, start, body = None, 0, []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.startswith("```"):
            if lang is None:
                lang, start, body = line[3:].strip(), number + 1, []
            else:
                yield lang, start, body
                lang = None
        elif lang is not None:
            body.append(line)


def prose(path: Path) -> str:
    """The document without its fenced blocks."""
    return re.sub(r"^```.*?^```", "", path.read_text(), flags=re.S | re.M)


def console_commands(path: Path) -> list[Command]:
    commands = []
    for lang, start, body in fenced_blocks(path):
        if lang != "console":
            continue
        pending, first = "", 0
        for offset, line in enumerate(body):
            if line.startswith("$ ") and not pending:
                pending, first = line[2:], start + offset
            elif pending:
                pending += " " + line.strip()
            else:
                continue  # output, or a comment line
            if pending.endswith("\\"):
                pending = pending[:-1]
                continue
            commands.append(Command(path, first, tuple(shlex.split(pending, comments=True))))
            pending = ""
    return commands


ALL = [c for doc in DOCS for c in console_commands(doc)]


def parse(argv: list[str]) -> None:
    """Parse `fairbench ARGV` with the real command line, invoking nothing: raises the command
    line's own usage error (a `typer.TyperException`) where the arguments are wrong."""
    from fairbench.cli import app

    root = typer.main.get_command(app)  # a fresh command tree: silencing it touches nothing

    def silence(command) -> None:
        command.callback = None
        for sub in getattr(command, "commands", {}).values():
            silence(sub)

    silence(root)
    root.main(argv, prog_name="fairbench", standalone_mode=False)


def test_the_readme_is_short():
    assert len((REPO / "README.md").read_text().splitlines()) < 200


def test_every_command_block_is_a_checked_console_block():
    shells = [
        f"{doc.name}:{start}"
        for doc in DOCS
        for lang, start, _ in fenced_blocks(doc)
        if lang in {"bash", "sh", "shell", "zsh"}
    ]
    assert not shells, f"write commands in ```console blocks ($ prompts): {shells}"


def test_the_lists_name_only_commands_the_docs_show():
    shown = {c.text for c in ALL}
    normalise = lambda text: shlex.join(shlex.split(text))  # noqa: E731
    stale = [t for t in EXPENSIVE if normalise(t) not in shown]
    assert not stale, f"no document shows these any more: {stale}"


MAKE_TARGETS = sorted(
    {c.argv[1] for c in ALL if c.argv[0] == "make"}
    | {target for doc in DOCS for target in re.findall(r"`make ([a-z0-9][a-z0-9-]*)`", prose(doc))}
)


@pytest.mark.parametrize("target", MAKE_TARGETS)
def test_make_targets_exist(target):
    done = subprocess.run(["make", "-n", target], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def _run_fairbench(cli, command: Command) -> str:
    check, _ = EXPENSIVE.get(command.text, ("run", ""))
    argv = list(command.argv[1:])
    if check == "parse":
        parse(argv)
        return ""
    if check == "--dry-run":
        argv.append("--dry-run")
    code, out, err = cli(*argv)
    assert code == 0, f"{command}\nexit {code}\n{err[-2000:]}"
    return out


def _run_python(command: Command) -> str:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, *command.argv[1:]], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
    return done.stdout


# the documents whose commands run configs on the real Adult files
ON_ADULT = {"README.md", "guide.md"}


@pytest.mark.slow
@pytest.mark.parametrize(
    "doc",
    [pytest.param(d, marks=needs_adult if d.name in ON_ADULT else ()) for d in DOCS],
    ids=lambda p: p.name,
)
def test_doc_commands_run(doc, cli, tmp_path, monkeypatch):
    commands = console_commands(doc)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "configs").symlink_to(REPO / "configs")
    outputs = {}
    for command in commands:
        if command.argv[0] == "fairbench":
            outputs[command.text] = _run_fairbench(cli, command)
        elif command.argv[:3] == ("python", "-m", "fairbench.testing"):
            assert "FAIL" not in _run_python(command)
        elif command.argv[0] != "make":  # make targets: test_make_targets_exist
            raise AssertionError(f"{command}: no rule checks this kind of command")
    if doc.name == "README.md":
        _check_the_readme_excerpt(doc, outputs["fairbench run smoke"])


def _check_the_readme_excerpt(doc: Path, printed: str) -> None:
    """The README's sample output is what `fairbench run smoke` prints today (its table rows)."""
    rows = [
        line
        for lang, _, body in fenced_blocks(doc)
        if lang == "text"
        for line in body
        if line.startswith("│ synthetic")
    ]
    assert len(rows) == 2
    for row in rows:
        assert row in printed, f"README's sample row is stale:\n{row}\nprinted:\n{printed}"


def _mentions() -> Iterator[tuple[str, str]]:
    """(where, command) for every synopsis line and inline `fairbench ...` mention."""
    for doc in DOCS:
        for lang, start, body in fenced_blocks(doc):
            if lang == "text":
                for offset, line in enumerate(body):
                    if line.startswith("fairbench "):
                        yield f"{doc.name}:{start + offset}", line
        for mention in re.findall(r"`(fairbench(?: [^`]*)?)`", prose(doc)):
            yield doc.name, mention


def _unknown_parts(mention: str) -> list[str]:
    """The words of `fairbench ...` that are not a command or one of its options."""
    from fairbench.cli import app

    command = typer.main.get_command(app)
    words = shlex.split(mention.split(" # ")[0].replace("[", " ").replace("]", " "))[1:]
    for word in words:
        if word.startswith("-"):
            break
        subcommands = getattr(command, "commands", None)
        if not subcommands or word not in subcommands:
            break
        command = subcommands[word]
    options = {opt for param in command.params for opt in param.opts + param.secondary_opts}
    options.add("--help")  # click adds it to every command, outside `params`
    flags = {w.split("=")[0] for w in words if w.startswith("-")}
    unknown = sorted(flags - options)
    if getattr(command, "commands", None) and not flags:
        nouns = [w for w in words if not w.startswith("-")]
        if nouns and nouns[0] not in command.commands and nouns[0].islower():
            unknown.append(nouns[0])
    return unknown


def test_synopses_and_inline_mentions_name_real_commands_and_options():
    bad = [
        f"{where}: {mention} ({', '.join(unknown)})"
        for where, mention in _mentions()
        if (unknown := _unknown_parts(mention))
    ]
    assert not bad, "\n".join(bad)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    return {_slug(h) for h in re.findall(r"^#+ (.*)$", prose(path), flags=re.M)}


def test_links_between_documents_resolve():
    bad = []
    for doc in DOCS:
        for target in re.findall(r"\]\(([^)\s]+)\)", prose(doc)):
            if re.match(r"[a-z]+:", target):
                continue  # an external address
            file, _, anchor = target.partition("#")
            path = (doc.parent / file).resolve() if file else doc
            if not path.exists():
                bad.append(f"{doc.name}: {target} (no such file)")
            elif anchor and anchor not in _anchors(path):
                bad.append(f"{doc.name}: {target} (no such heading)")
    assert not bad, "\n".join(bad)
