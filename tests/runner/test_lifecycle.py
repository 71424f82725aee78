"""A run's life: one writer per run directory, Ctrl-C and SIGTERM stop cleanly with a resume
hint, no worker outlives its parent (even a SIGKILLed one), and progress reaches logs."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from fairbench.errors import Interrupted, RunLockedError
from fairbench.rundir.lock import LOCK_FILE, run_lock
from fairbench.runner.config import expand, parse_config
from fairbench.runner.interrupt import Stopped, stop_on_signals
from fairbench.runner.progress_display import PlainProgress, duration

REPO = Path(__file__).resolve().parents[2]

SMALL = {
    "name": "small",
    "datasets": [{"name": "synthetic", "options": {"n_rows": 800}}],
    "epsilons": [1.0],
    "seeds": 2,
    "methods": [
        {"name": "erm", "hparams": {"epochs": 2}},
        {"name": "dp-sgd", "hparams": {"epochs": 2, "batch_size": 64}},
    ],
}  # 4 trials, well under a second each

# six work units (one per learning rate) of about a second each on a loaded 2-core machine:
# long enough to interrupt a run in the middle, short enough to finish it afterwards
SLOW = {
    "name": "slow",
    "datasets": [{"name": "synthetic", "options": {"n_rows": 4000}}],
    "seeds": 1,
    "methods": [
        {"name": "erm", "hparams": {"epochs": 150}, "sweep": {"lr": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]}}
    ],
}
SLOW_TRIALS = 6


def write_config(tmp_path: Path, data: dict) -> str:
    path = tmp_path / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "FAIRBENCH_PROGRESS_INTERVAL": "3600"}


def fairbench(*args: str) -> list[str]:
    return [sys.executable, "-m", "fairbench.cli", *args]


def stored(run_dir: Path) -> dict[str, str]:
    """trial_id -> status of the store, read-only; {} while it does not exist yet."""
    try:
        db = sqlite3.connect(f"file:{run_dir / 'results.sqlite'}?mode=ro", uri=True)
        try:
            return dict(db.execute("SELECT trial_id, status FROM trials"))
        finally:
            db.close()
    except sqlite3.OperationalError:  # no file yet, or the table a moment before it exists
        return {}


def alive(pid: int) -> bool:
    """Running (a zombie, dead but not yet reaped by init, does not count)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def workers_of(pid: int) -> list[int]:
    """The worker processes (pool or Dask) among the children of `pid`, from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes()
        except (OSError, IndexError):
            continue
        if ppid == pid and b"spawn_main" in cmdline:
            found.append(int(entry.name))
    return found


def start_slow_run(tmp_path: Path, out: Path, *options: str) -> subprocess.Popen:
    """`fairbench run SLOW --workers 2` in its own session, returned once it stored a trial
    and its two workers are running (so that trials are in flight)."""
    config = write_config(tmp_path, SLOW)
    proc = subprocess.Popen(
        fairbench("run", config, "--out", str(out), "--workers", "2", *options),
        env=env(),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 180
    while time.time() < deadline and proc.poll() is None:
        if stored(out) and len(workers_of(proc.pid)) == 2:
            break
        time.sleep(0.1)
    assert proc.poll() is None, f"the run ended before it could be stopped: {proc.stderr.read()}"
    assert len(stored(out)) < SLOW_TRIALS
    return proc


def gone_within(pids: list[int], seconds: float) -> list[int]:
    """The pids still running after up to `seconds`."""
    deadline = time.time() + seconds
    while time.time() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if alive(p)]


def resume_to_completion(out: Path) -> None:
    done = subprocess.run(
        fairbench("run", "--resume", str(out), "--workers", "1", "--quiet"),
        env=env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    expected = {s.trial_id for s in expand(parse_config(SLOW), warn=lambda _: None)}
    assert stored(out) == dict.fromkeys(expected, "done")


# --- the lock -------------------------------------------------------------------------------


def test_the_lock_is_reentrant_per_thread_refused_elsewhere_and_leaves_no_file(tmp_path):
    run_dir = tmp_path / "run"
    refused: list[BaseException] = []

    def other_thread() -> None:
        try:
            with run_lock(run_dir):
                pass
        except RunLockedError as exc:
            refused.append(exc)

    with run_lock(run_dir):
        with run_lock(run_dir):  # the same thread: `fairbench run` holds it around execute
            assert (run_dir / LOCK_FILE).is_file()
        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()
        assert (run_dir / LOCK_FILE).is_file()  # the inner block did not release it
    assert len(refused) == 1 and f"fairbench process {os.getpid()} (started " in str(refused[0])
    assert not (run_dir / LOCK_FILE).exists()
    with run_lock(run_dir):  # free again
        pass


def test_a_second_run_on_a_held_directory_is_refused_naming_the_holder(cli, tmp_path):
    """While another process holds the run directory, `run` (new or --resume) is one error
    line naming its pid, and writes nothing; read-only commands still work. Once the holder
    is gone, even SIGKILLed, the directory is free: no stale lock to clean up."""
    config = write_config(tmp_path, SMALL)
    out = tmp_path / "run"
    assert cli("run", config, "--out", str(out), "--workers", "1", "--quiet")[0] == 0
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}

    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; "
            "from fairbench.rundir.lock import run_lock\n"
            "with run_lock(Path(sys.argv[1])):\n print('held', flush=True); time.sleep(120)",
            str(out),
        ],
        env=env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        for args in (("run", config, "--out", str(out)), ("run", "--resume", str(out))):
            code, _, err = cli(*args, "--workers", "1", "--quiet")
            lines = err.strip().splitlines()
            assert code == 2 and len(lines) == 1, err
            assert lines[0].startswith(
                f"error: {out} is in use by fairbench process {holder.pid} (started "
            )
            assert f"wait for it to finish, or stop it (kill {holder.pid})" in lines[0]
        assert {p.name: p.stat().st_mtime_ns for p in out.iterdir() if p.name != LOCK_FILE} == (
            before
        )
        assert cli("status", str(out))[0] == 0
        assert cli("report", str(out))[0] == 0
        assert cli("export", str(out), "--format", "csv")[0] == 0
    finally:
        holder.kill()
        holder.wait()
    code, stdout, err = cli("run", "--resume", str(out), "--workers", "1", "--quiet")
    assert code == 0 and "0 trials run, 4 already done" in stdout, err
    assert not (out / LOCK_FILE).exists()


# --- signals --------------------------------------------------------------------------------


def test_signals_raise_stopped_inside_the_block_and_handlers_come_back():
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with pytest.raises(Stopped) as stop, stop_on_signals():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises before this ends
    assert stop.value.signum == signal.SIGTERM
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


@pytest.mark.slow
def test_ctrl_c_stores_whole_trials_stops_every_worker_and_resumes(tmp_path):
    """Ctrl-C (SIGINT to the whole process group, as a terminal sends it) during a run with
    two workers: exit 130, one `interrupted:` line whose count is the store's, no traceback,
    no worker left, no lock left; the resume ends with exactly the config's trials."""
    out = tmp_path / "run"
    proc = start_slow_run(tmp_path, out)
    workers = workers_of(proc.pid)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    done = stored(out)
    assert set(done.values()) == {"done"} and 1 <= len(done) < SLOW_TRIALS
    assert err.strip().splitlines() == [
        f"interrupted: {len(done)}/{SLOW_TRIALS} trials stored; "
        f"resume with: fairbench run --resume {out}"
    ]
    assert gone_within(workers, 2) == []
    assert not (out / LOCK_FILE).exists()
    resume_to_completion(out)


def test_sigterm_abandons_the_trial_running_in_process_and_exits_143(tmp_path):
    out = tmp_path / "run"
    config = write_config(tmp_path, SLOW)
    proc = subprocess.Popen(
        fairbench("run", config, "--out", str(out), "--workers", "1"),
        env=env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 180
    while time.time() < deadline and proc.poll() is None and not stored(out):
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    done = stored(out)
    assert proc.returncode == 143, err
    assert err.strip().splitlines() == [
        f"interrupted: {len(done)}/{SLOW_TRIALS} trials stored; "
        f"resume with: fairbench run --resume {out}"
    ]
    assert 1 <= len(done) < SLOW_TRIALS


@pytest.mark.slow
@pytest.mark.parametrize("executor", ["local", "dask"])
def test_workers_die_with_a_sigkilled_parent_and_the_run_resumes(tmp_path, executor):
    """The kill-parent test: SIGKILL reaches the parent alone (no handler can run); every
    worker process it started is gone within seconds, and `--resume` finishes the run."""
    if executor == "dask":
        pytest.importorskip("distributed")
    out = tmp_path / "run"
    proc = start_slow_run(tmp_path, out, "--executor", executor)
    workers = workers_of(proc.pid)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    assert gone_within(workers, 10) == []
    resume_to_completion(out)


def test_an_orphaned_worker_notices_without_prctl(tmp_path):
    """The portable fallback alone (no prctl): a process watching its parent exits once that
    parent is gone. (Its output goes nowhere we wait on, so that `subprocess.run` returns
    when the middle process exits, not when the orphan does: without the watcher the orphan
    is still running here.)"""
    middle = subprocess.run(
        [
            sys.executable,
            "-c",
            "import subprocess, sys\n"
            "child = subprocess.Popen([sys.executable, '-c', 'import os, time; "
            "from fairbench.runner.lifeline import watch_parent; "
            "watch_parent(os.getppid(), 0.1); print(1, flush=True); time.sleep(60)'], "
            "stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)\n"
            "child.stdout.readline(); print(child.pid)",
        ],
        env=env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    orphan = int(middle.stdout.strip())
    assert gone_within([orphan], 5) == []


def test_tune_names_its_own_resume_command(cli, tmp_path, monkeypatch):
    from fairbench.workflows import tune

    def interrupted(specs, run_dir, *args, **kwargs):
        raise Interrupted(3, 12, signal.SIGINT, f"fairbench run --resume {run_dir}")

    monkeypatch.setattr(tune, "execute", interrupted)
    config = tmp_path / "tune.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "name": "t",
                "datasets": [{"name": "synthetic", "options": {"n_rows": 600}}],
                "epsilons": [3.0],
                "targets": [0.1],
                "draws": 2,
                "search_seeds": [100],
                "final_seeds": list(range(10)),
                "methods": [
                    {"name": "dp-sgd", "hparams": {"epochs": 1}, "space": {"lr": [0.1, 0.5]}}
                ],
            }
        )
    )
    out = tmp_path / "out"
    code, _, err = cli("tune", str(config), "--out", str(out), "--quiet")
    assert code == 130, err
    assert (
        err.strip() == f"interrupted: 3/12 trials stored; resume with: fairbench tune "
        f"{config} --out {out}"
    )
    assert not (out / LOCK_FILE).exists()


# --- progress off a terminal ----------------------------------------------------------------


def test_plain_progress_is_rate_limited_with_exact_numbers(capsys):
    now = [100.0]
    progress = PlainProgress(8, interval=10, clock=lambda: now[0])
    for t, failed in [
        (1, False),
        (5, True),
        (11, False),
        (12, False),
        (25, False),
        (26, False),
        (27, False),
        (30, False),
    ]:
        now[0] = 100.0 + t
        progress.advance(failed)
    progress.finish()
    assert capsys.readouterr().err.splitlines() == [
        "trials 3/8 (38%) elapsed 11s eta 18s, 1 failed",  # first line once 10 s passed
        "trials 5/8 (62%) elapsed 25s eta 15s, 1 failed",  # next 10 s after that one
        "trials 8/8 (100%) elapsed 30s eta 0s, 1 failed",  # the end, always
    ]
    assert [duration(s) for s in (0, 59.4, 72, 3599, 3725)] == [
        "0s",
        "59s",
        "1m12s",
        "59m59s",
        "1h02m",
    ]


def test_a_run_off_a_terminal_prints_plain_progress_lines(cli, tmp_path, monkeypatch):
    config = write_config(tmp_path, SMALL)
    monkeypatch.setenv("FAIRBENCH_PROGRESS_INTERVAL", "0")  # every trial
    code, _, err = cli("run", config, "--out", str(tmp_path / "a"), "--workers", "1")
    final = r"trials 4/4 \(100%\) elapsed \d+s eta 0s, 0 failed"
    lines = [line for line in err.splitlines() if line.startswith("trials ")]
    assert code == 0 and [line.split()[1] for line in lines] == ["1/4", "2/4", "3/4", "4/4"]
    assert re.fullmatch(final, lines[-1])

    monkeypatch.setenv("FAIRBENCH_PROGRESS_INTERVAL", "3600")  # the final line only
    code, _, err = cli("run", config, "--out", str(tmp_path / "b"), "--workers", "1")
    lines = [line for line in err.splitlines() if line.startswith("trials ")]
    assert code == 0 and len(lines) == 1 and re.fullmatch(final, lines[0])
    code, _, err = cli("run", config, "--out", str(tmp_path / "c"), "--workers", "1", "--quiet")
    assert code == 0 and "trials " not in err

    monkeypatch.setenv("FAIRBENCH_PROGRESS_INTERVAL", "often")
    code, _, err = cli("run", config, "--out", str(tmp_path / "d"), "--workers", "1")
    assert code == 2 and err.strip() == (
        "error: FAIRBENCH_PROGRESS_INTERVAL='often': set it to a number of seconds >= 0, e.g. 10"
    )
