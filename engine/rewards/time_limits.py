"""Reward calls with a per-call time limit, on a daemon worker thread.

:func:`run_in_order` runs sync calls one after another; :func:`run_gathered`
runs one async function over a group, gathered on one event loop with
``asyncio.wait_for`` per call. A thread cannot be killed: a call that runs
past its limit is abandoned with its thread, the next batch gets a fresh
thread, and the reward-file line the call was stuck on is reported. The
rubric (``engine.rewards.rubric``) marks such a function hung for the rest
of its version.

Why a hand-made thread and not ``concurrent.futures``: a
``ThreadPoolExecutor`` could run the calls and ``future.result(timeout=...)``
could give up on one, but its worker threads are not daemons, and
``concurrent.futures.thread`` joins every one of them at interpreter exit
(``threading._register_atexit(_python_exit)``; no public switch turns that
off, and ``shutdown(wait=False, cancel_futures=True)`` does not either).
Measured on Python 3.11: a script that gives up on a ``time.sleep(3600)``
call after 0.1 s on a ThreadPoolExecutor, then shuts it down without
waiting, was still alive 15 s later; the same call on this module's daemon
thread let the script exit after 0.2 s. A future per call also costs more:
256 trivial calls took 1.5-3 ms through ``ThreadPoolExecutor.submit``
against 0.2-0.3 ms as one batch here (a step's scoring budget is 5 ms).

The reward child (``engine.rewards.worker``) does not remove the need.
There the exit is no problem (the worker ends with ``os._exit`` and the
parent kills a child whose call hung), but the limit is what turns one slow
call into one trajectory's error while the rest of the batch is scored;
killing the child instead fails the whole batch
(``engine.rewards.scoring_process``). And rubrics also score in the
engine's own process: ``rlab eval`` and ``rlab select``
(``engine.evaluation``) and the tiny policy's warm-start probes call
``Rubric.score_group`` directly, where an abandoned call must not block
exit. So one daemon thread serves both, and what stays hand-made is a queue
and a watchdog: one hand-off per batch of calls, not one future per call.
"""

from __future__ import annotations

import inspect
import queue
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

#: Per-call time limit of a reward function, in seconds: in training and in
#: the editor's check alike, so an edit that passes the check is not cut short
#: in training.
DEFAULT_TIMEOUT_S = 10.0

#: One call's result: ``("ok", return value)``, ``("raised", exception)`` or,
#: for a gathered async call cancelled at its limit, ``("timeout", None)``.
Answer = tuple[str, Any]


@dataclass
class Ran:
    """What a batch of calls gave back.

    Attributes:
        answers: one :data:`Answer` per call that finished, in order.
        hung: the call after the last answer ran past its limit and was
            abandoned (with its thread); the calls after it did not run.
        stuck_line: the reward-file line the abandoned call was on, or None.
    """

    answers: list[Answer] = field(default_factory=list)
    hung: bool = False
    stuck_line: int | None = None


def run_in_order(calls: Sequence[Callable[[], Any]], timeout_s: float, filename: str) -> Ran:
    """Run ``calls`` one after another, each with a limit of ``timeout_s`` seconds.

    A sync call that returns a coroutine has it run to the end with
    ``asyncio.run``. Stops at the first call that runs past its limit.

    Args:
        calls: argument-free calls (e.g. ``functools.partial`` of a reward
            function on one trajectory).
        timeout_s: per-call limit, seconds (> 0).
        filename: the name the reward file was compiled under (for the
            stuck line).
    """
    return _WORKERS.run(_Job(list(calls), filename), timeout_s)


def run_gathered(fn: Callable[..., Awaitable[Any]], arguments: Sequence[tuple[Any, ...]],
                 timeout_s: float, filename: str) -> Ran:
    """Await ``fn(*args)`` for every ``args``, gathered on one event loop.

    Each call is cancelled at ``timeout_s`` seconds (its answer is
    ``("timeout", None)``). A call that blocks instead of awaiting defeats
    the cancelling; when the loop runs past ``timeout_s + 1`` seconds in all,
    the whole group is abandoned (``hung``, no answers).

    Returns:
        One answer per ``args`` unless hung; every answer is the same
        ``("raised", exc)`` when the event loop itself failed.
    """
    import asyncio  # ~70 ms to import: the check process pays it only for async rubrics

    async def one(args: tuple[Any, ...]) -> Answer:
        try:
            return "ok", await asyncio.wait_for(fn(*args), timeout_s)
        except asyncio.TimeoutError:
            return "timeout", None
        except (Exception, SystemExit) as exc:  # any reward-function failure
            return "raised", exc

    async def group() -> list[Answer]:
        return await asyncio.gather(*(one(args) for args in arguments))

    ran = _WORKERS.run(_Job([lambda: asyncio.run(group())], filename), timeout_s + 1.0)
    if ran.hung:
        return ran
    status, value = ran.answers[0]
    if status == "raised":
        return Ran([(status, value)] * len(arguments))
    return Ran(list(value))


class _Job:
    """A batch of calls run in order on a worker thread.

    ``position`` is the index of the call running now and ``started`` its
    start (time.monotonic seconds); the watchdog reads both. ``filename`` is
    the reward file's code name, used to find the line a hung call is on.
    """

    def __init__(self, calls: list[Callable[[], Any]], filename: str):
        self.calls = calls
        self.filename = filename
        self.results: list[Answer] = []
        self.started = time.monotonic()
        self.position = 0
        self.finished = threading.Event()
        self.abandoned = False
        self.thread_id: int | None = None

    def run(self) -> None:
        self.thread_id = threading.get_ident()
        for k, call in enumerate(self.calls):
            if self.abandoned:
                return
            # started before position: the watchdog reads them in the other order
            self.started = time.monotonic()
            self.position = k
            try:
                value = call()
                if inspect.iscoroutine(value):  # a sync function that returned a coroutine
                    import asyncio  # see run_gathered

                    value = asyncio.run(value)
                self.results.append(("ok", value))
            except (Exception, SystemExit) as exc:  # any reward-function failure
                self.results.append(("raised", exc))
        self.position = len(self.calls)
        self.finished.set()

    def stuck_line_now(self) -> int | None:
        """Line the worker is executing now, in its innermost reward-file frame."""
        frame = sys._current_frames().get(self.thread_id or -1)
        while frame is not None and frame.f_code.co_filename != self.filename:
            frame = frame.f_back
        return frame.f_lineno if frame is not None else None


class _WorkerPool:
    """One daemon worker thread, replaced when a job hangs in it.

    Daemon threads never block interpreter exit, so an abandoned (hung)
    worker cannot keep the engine process alive.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[_Job] | None = None

    @staticmethod
    def _start() -> queue.SimpleQueue[_Job]:
        jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()

        def loop() -> None:
            while True:
                jobs.get().run()

        threading.Thread(target=loop, name="rubric-worker", daemon=True).start()
        return jobs

    def run(self, job: _Job, timeout_s: float) -> Ran:
        """Run ``job`` with a per-call limit of ``timeout_s`` seconds."""
        with self._lock:
            if self._queue is None:
                self._queue = self._start()
            self._queue.put(job)
            while not job.finished.wait(max(0.0, job.started + timeout_s - time.monotonic())):
                position = job.position
                if time.monotonic() - job.started >= timeout_s and job.position == position:
                    job.abandoned = True
                    self._queue = None  # the next job gets a fresh thread
                    # the abandoned call may still finish and append: keep only those before it
                    return Ran(job.results[:position], hung=True, stuck_line=job.stuck_line_now())
            return Ran(job.results)


_WORKERS = _WorkerPool()
