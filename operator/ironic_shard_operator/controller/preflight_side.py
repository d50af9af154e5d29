"""A pool's preflight, run by the operator: when the pool starts, whenever what the checks
read changes (its Secrets' texts, the cloud's name, the selector, the image), and again
RECHECK_FAILED_SECONDS after a failed verdict (a service slow or away for one check must not
leave `Preflight=False` standing until someone edits a Secret). In the background, so that a
cycle never waits on it. Its verdict becomes the `Preflight` condition (core/preflight.condition,
reported by core/status.py).

Invariants: at most one run per pool is followed at a time, and only the run for the
current inputs is ever reported (a run for inputs that changed meanwhile is dropped); a
run that raises is reported as a failed preflight, never raised into the cycle; the run
ending wakes the pool so its verdict is reported at once; while a re-check runs, the
verdict before it stays reported; a passing verdict is not checked again for the same inputs.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from ironic_shard_operator.adapters.preflight import run_checks
from ironic_shard_operator.core import preflight

log = logging.getLogger(__name__)

Verdict = tuple[bool, str, str]  # (status, reason, message) of the Preflight condition
RECHECK_FAILED_SECONDS = 300.0


def inputs_key(inputs: preflight.Inputs) -> str:
    """A digest of everything the checks read: equal keys, the same checks."""
    parts = (inputs.clouds_yaml or "", inputs.cloud_name, inputs.nova_conf or "", repr(inputs.selector),
             str(inputs.handover), inputs.handover_nova_conf or "", inputs.image or "", str(inputs.check_image),
             inputs.pool_name or "", str(inputs.may_probe))
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


@dataclass
class PreflightSide:
    """The preflight of one pool: the inputs it ran on (`key`), the run under way (`task`,
    None once its verdict is taken), the last verdict and when it was taken (`decided_at`)."""

    key: str | None = None
    task: asyncio.Future | None = None
    verdict: Verdict | None = None
    decided_at: float = 0.0
    _checks: Callable[[preflight.Inputs], list[preflight.Check]] = field(default=run_checks, repr=False)

    def follow(self, inputs: preflight.Inputs, wake: asyncio.Event, now: float) -> Verdict | None:
        """The verdict for `inputs` at `now` (seconds): starts a run when they differ from the
        last ones, or when the last verdict failed RECHECK_FAILED_SECONDS ago; None while the
        first run for them is under way (the last reported condition stays)."""
        key = inputs_key(inputs)
        if key != self.key:
            self.key, self.verdict = key, None
            self._start(inputs, wake)
        elif self.task is None and self.verdict is not None and not self.verdict[0] \
                and now - self.decided_at >= RECHECK_FAILED_SECONDS:
            self._start(inputs, wake)
        if self.task is not None and self.task.done():
            try:
                self.verdict = preflight.condition(self.task.result())
            except Exception as error:  # a bug or an unforeseen answer: reported, not raised
                log.exception("preflight failed")
                self.verdict = (False, "PreflightError", f"the checks could not run: {error}")
            self.task, self.decided_at = None, now
        return self.verdict

    def _start(self, inputs: preflight.Inputs, wake: asyncio.Event) -> None:
        self.task = asyncio.ensure_future(asyncio.to_thread(self._checks, inputs))
        self.task.add_done_callback(lambda _: wake.set())
