"""The simulated GPU shared by the servers of one group.

One step loop per group. When several servers have work their steps run interleaved, round
robin (one step of each in turn), so each one runs slower than alone: that is the contention
that makes a drain cost something. Steps are scheduled against absolute deadlines on the
event loop's clock, so Python overhead and timer jitter do not accumulate into drift; a
simulated duration d takes d / speedup seconds of wall time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from .engine import Engine

log = logging.getLogger("specswitch.emulator")

# If the loop falls further behind its deadlines than this (a stalled machine), the debt
# is dropped instead of being paid back as a burst of instantaneous steps.
MAX_LAG_S = 0.5


class SharedGpu:
    def __init__(self, speedup: float = 1.0) -> None:
        if not speedup > 0:
            raise ValueError(f"speedup must be > 0, got {speedup}")
        self.speedup = speedup
        self.engines: list[Engine] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._next = 0
        self.steps = 0
        self.lag_resets = 0
        # simulated clock: seconds of applied steps plus idle time (wall x speedup)
        self._sim_elapsed = 0.0
        self._idle_since: float | None = None
        self._stepped = asyncio.Event()

    def sim_now(self) -> float:
        """Simulated seconds so far, as the GPU lived them: applied steps plus idle time.

        A stalled host pauses this clock together with the steps, so throughput measured
        against it does not depend on how loaded the machine is.
        """
        if self._idle_since is None:
            return self._sim_elapsed
        loop = asyncio.get_running_loop()
        return self._sim_elapsed + (loop.time() - self._idle_since) * self.speedup

    async def wait_sim(self, seconds: float) -> None:
        """Wait until the simulated clock has advanced by ``seconds``."""
        target = self.sim_now() + seconds
        while (left := target - self.sim_now()) > 0:
            event = self._stepped
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), max(left / self.speedup, 0.001))

    def add(self, engine: Engine) -> None:
        self.engines.append(engine)

    def wake(self) -> None:
        self._wake.set()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="emulator-gpu")

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _pick(self) -> Engine | None:
        engines = self.engines
        n = len(engines)
        for i in range(n):
            eng = engines[(self._next + i) % n]
            if eng.enabled and eng.has_work():
                self._next = (self._next + i + 1) % n
                return eng
        return None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time()
        speedup = self.speedup
        while True:
            eng = self._pick()
            step = eng.plan_step() if eng is not None else None
            if step is None:
                if eng is None:
                    self._wake.clear()
                    self._idle_since = loop.time()
                    await self._wake.wait()
                    deadline = loop.time()
                    self._sim_elapsed += (deadline - self._idle_since) * speedup
                    self._idle_since = None
                else:
                    await asyncio.sleep(0)
                continue
            now = loop.time()
            if now - deadline > MAX_LAG_S:
                self.lag_resets += 1
                log.warning(
                    "event=emulator_gpu_lag behind_s=%.3f resets=%d hint=lower --speedup or load",
                    now - deadline,
                    self.lag_resets,
                )
                deadline = now
            deadline += step.seconds / speedup
            delay = deadline - now
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                await asyncio.sleep(0)
            self._sim_elapsed += step.seconds
            try:
                eng.apply_step(step)
            except Exception:  # never let one bad step kill the GPU loop
                log.exception("event=emulator_step_failed server=%s", eng.name)
            self.steps += 1
            stepped, self._stepped = self._stepped, asyncio.Event()
            stepped.set()
