"""Drivers for engine tests that need a hand-sized KV cache or a fixed cost."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import simpy

from simulator.config.run_config import ReplicaConfig, RunConfig, SchedulerConfig
from simulator.costmodel.base import BatchShape, CostModel
from simulator.costmodel.roofline import RooflineCostModel
from simulator.engine.kvcache import BlockManager
from simulator.engine.records import Recorder
from simulator.engine.replica import Replica
from simulator.engine.schedulers import SCHEDULERS
from simulator.engine.tbt import same_gaps
from simulator.report.metrics import request_frame
from simulator.simulation import simulate
from simulator.workload.request import Request


class ConstantCostModel(CostModel):
    """Every iteration takes ``seconds``, whatever the batch."""

    name = "constant"

    def __init__(self, replica: ReplicaConfig, seconds: float) -> None:
        super().__init__(replica)
        self.seconds = seconds

    def layer_time(self, shape: BatchShape) -> float:
        return 0.0

    def pre_time(self, shape: BatchShape) -> float:
        return 0.0

    def post_time(self, shape: BatchShape) -> float:
        return 0.0

    def overhead_time(self, shape: BatchShape) -> float:
        return self.seconds

    def breakdown(self, shape: BatchShape) -> dict[str, float]:
        return {"constant": self.seconds}


def run_requests(scheduler_name: str, specs: list[tuple[float, int, int]], *, num_blocks: int = 4096,
                 block_size: int = 16, max_model_len: int = 4096, cost: CostModel | None = None,
                 replica: ReplicaConfig | None = None, state_blocks: int = 0, **sched_kwargs):
    """Simulate ``(arrival_at, prompt, output)`` specs on one replica with a KV cache of
    ``num_blocks`` (``state_blocks`` more a running sequence, as a hybrid model's recurrent
    state); return (requests, recorder, scheduler)."""
    replica = replica or ReplicaConfig("mistral-7b", "a100-80gb")
    env = simpy.Environment()
    recorder = Recorder()
    config = SchedulerConfig(scheduler_name, **sched_kwargs)
    scheduler = SCHEDULERS[scheduler_name](config, BlockManager(num_blocks, block_size, config.watermark, state_blocks),
                                           max_model_len)
    rep = Replica(env, 0, scheduler, cost or RooflineCostModel(replica), recorder)
    requests = [Request(i, a, p, o, token_times=True) for i, (a, p, o) in enumerate(specs)]
    submit_all(env, rep, requests)
    return requests, recorder, scheduler


def submit_all(env: simpy.Environment, replica: Replica, requests: list[Request]) -> None:
    """Submit ``requests`` to ``replica`` at their arrival times (as the engine's arrival
    process does) and run the environment to the end."""

    def arrivals():
        for req in requests:
            if req.arrival_at > env.now:
                yield env.timeout(req.arrival_at - env.now)
            req.arrival_at = env.now
            replica.submit(req)

    env.process(arrivals())
    env.run()


def interrupt_when(proc: subprocess.Popen, ready: Callable[[], bool], how: str, wait_s: float = 90) -> str:
    """Wait until ``ready()`` (at most ``wait_s``), then stop a ``start_new_session`` child as a
    user would: ``how`` = "ctrl-c" sends SIGINT to its whole process group (a terminal does),
    "sigterm" SIGTERM to the process alone. Returns its stderr once it exits. Whatever happens,
    the group is killed if the child is still running at the end."""
    try:
        deadline = time.monotonic() + wait_s
        while not ready() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert proc.poll() is None and ready(), "the child ended, or never got ready, before it could be interrupted"
        if how == "ctrl-c":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            os.kill(proc.pid, signal.SIGTERM)
        # (60 s: once, under the whole suite on two busy cores, an interrupted sweep of two workers took over 30 s
        # to exit; alone it exits in a second or two)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return stderr


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of a process group, from /proc (Linux)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                pids.append(int(entry))
    return pids


def group_gone(pgid: int, seconds: float = 5.0) -> bool:
    """Whether every process of the group exits within ``seconds`` (orphans are reaped by then)."""
    deadline = time.monotonic() + seconds
    while group_members(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def assert_a_signal_stops_workers(args: list[str], how: str, num_processes: int = 3) -> None:
    """Run ``simulate ARGS`` in its own process group; once ``num_processes`` of it are up (the
    command and its workers), stop it as :func:`interrupt_when` does. It must exit 130 with one
    line on stderr, no traceback, and leave no process behind."""
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    proc = subprocess.Popen([sys.executable, "-m", "simulator", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=root,
                            env={**os.environ, "PYTHONPATH": str(root)}, start_new_session=True)
    stderr = interrupt_when(proc, lambda: len(group_members(proc.pid)) >= num_processes, how, wait_s=60)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "interrupted" in stderr and len(stderr.strip().splitlines()) == 1
    assert group_gone(proc.pid), "a worker process outlived the command"


def record_outcomes(monkeypatch, module, name: str) -> list[bool]:  # noqa: ANN001
    """Patch ``module.name`` to record, per call, whether it returned something (not None)."""
    outcomes: list[bool] = []
    real = getattr(module, name)

    def spy(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        out = real(*args, **kwargs)
        outcomes.append(out is not None)
        return out

    monkeypatch.setattr(module, name, spy)
    return outcomes


def record_stretches(monkeypatch) -> list[int]:  # noqa: ANN001 - pytest's MonkeyPatch
    """Record the length of every stretch event skipping plans (decode and chunked-prefill), so a test
    can assert the fast path really ran; the list fills as the run goes."""
    from simulator.fast import skipping

    stretches: list[int] = []
    for name in ("plan", "plan_chunks"):
        real = getattr(skipping, name)

        def counted(*args, _real=real, **kwargs):  # noqa: ANN002, ANN003, ANN202
            stretch = _real(*args, **kwargs)
            if stretch is not None:
                stretches.append(stretch.num_iterations)
            return stretch
        monkeypatch.setattr(skipping, name, counted)
    return stretches


def on_terminal(*args: str, columns: int = 80) -> str:
    """Run ``simulate *args`` with stdout on a pseudo-terminal ``columns`` wide, as a user at a shell
    would; its output with ANSI codes stripped and CRLF as LF (skips where there is no pty)."""
    pty = pytest.importorskip("pty")
    master, slave = pty.openpty()
    env = {**os.environ, "COLUMNS": str(columns), "TERM": "xterm"}
    proc = subprocess.Popen([sys.executable, "-m", "simulator", *args], stdout=slave, stderr=slave, env=env,
                            cwd=Path(__file__).resolve().parents[1])
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(timeout=120) == 0
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode()).replace("\r\n", "\n")


def assert_same_run(config: RunConfig, calls: list[int] | None = None) -> None:
    """The run with the fast paths on and off (``fast_forward``): the same request and iteration
    tables, token times, gap logs, busy times, stages and extras, to the bit."""
    on = simulate(config.replace(fast_forward=True), token_times=True)
    skipped = sum(calls) if calls is not None else None
    off = simulate(config.replace(fast_forward=False), token_times=True)
    assert calls is None or sum(calls) == skipped  # the stepping run skips nothing
    a, b = request_frame(on), request_frame(off)
    assert a.equals(b)
    assert on.iteration_frame().equals(off.iteration_frame())
    assert [bytes(r.token_times) for r in on.requests] == [bytes(r.token_times) for r in off.requests]
    assert same_gaps(on.tbt, off.tbt)  # the gap logs, as multisets
    assert on.replica_busy_s == off.replica_busy_s and on.sim_end_at == off.sim_end_at
    assert on.stages == off.stages
    assert on.extra == off.extra


def simulate_module(*args: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -m simulator ARGS`` from the checkout (or ``cwd``), wide enough that a one-line error stays one line."""
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(root)}
    return subprocess.run([sys.executable, "-m", "simulator", *args], capture_output=True, text=True,
                          cwd=cwd or root, env=env, timeout=timeout)


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    """The one stderr line of a refused command (exit 2, no traceback)."""
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2, proc.stderr[-2000:] + proc.stdout[-500:]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    return lines[0]


def hashed_request(rid: int, prompt: int, output: int = 500):  # noqa: ANN201 - a Request
    """A request whose prompt is named by 16-token block ids 0, 1, ... (the same prefix as any other such one)."""
    from simulator.workload.request import Request

    req = Request(rid, float(rid), prompt, output)
    req.block_hashes, req.hash_block_size = list(range(prompt // 16)), 16
    return req


def cache_a_prefix_beside_decodes(sched, prefix: int = 8000, num_decodes: int = 200) -> None:  # noqa: ANN001
    """Run a ``prefix``-token hashed prompt through ``sched`` (its blocks cached), then admit ``num_decodes``
    16-token requests, which decode beside whatever comes next (as the trtllm budget tests need)."""
    from simulator.workload.request import Request

    sched.add_request(hashed_request(0, prefix))
    sched.complete(sched.schedule(), 1.0)
    for i in range(1, num_decodes + 1):
        sched.add_request(Request(i, float(i), 16, 500))
    sched.complete(sched.schedule(), 2.0)


def exit_at_once(*args, **kwargs) -> None:  # noqa: ANN002, ANN003
    """A worker task that dies as the out-of-memory killer's victim does: no exception, no result
    (importable by name, so a spawn pool's worker can run it)."""
    os._exit(9)
