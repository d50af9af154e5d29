"""A pool's preflight, run by the operator: when the pool starts and whenever what the checks
read changes (its Secrets' texts, the cloud's name, the selector, the image), in the
background, so that a cycle never waits on it. Its verdict becomes the `Preflight` condition
(core/preflight.condition, reported by core/status.py).

Invariants: at most one run per pool is followed at a time, and only the run for the
current inputs is ever reported (a run for inputs that changed meanwhile is dropped); a
run that raises is reported as a failed preflight, never raised into the cycle; the run
ending wakes the pool so its verdict is reported at once.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from ironic_shard_operator.adapters.preflight import Inputs, run_checks
from ironic_shard_operator.core import preflight

log = logging.getLogger(__name__)

Verdict = tuple[bool, str, str]  # (status, reason, message) of the Preflight condition


def inputs_key(inputs: Inputs) -> str:
    """A digest of everything the checks read: equal keys, the same checks."""
    parts = (inputs.clouds_yaml or "", inputs.cloud_name, inputs.nova_conf or "", repr(inputs.selector),
             str(inputs.handover), inputs.handover_nova_conf or "", inputs.image or "", str(inputs.check_image))
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


@dataclass
class PreflightSide:
    """The preflight of one pool: the inputs it ran on (`key`), the run under way, the last verdict."""

    key: str | None = None
    task: asyncio.Future | None = None
    verdict: Verdict | None = None
    _checks: Callable[[Inputs], list[preflight.Check]] = field(default=run_checks, repr=False)

    def follow(self, inputs: Inputs, wake: asyncio.Event) -> Verdict | None:
        """The verdict for `inputs`: starts a run when they differ from the last ones; None
        while the first run for them is under way (the last reported condition stays)."""
        key = inputs_key(inputs)
        if key != self.key:
            self.key, self.verdict = key, None
            self.task = asyncio.ensure_future(asyncio.to_thread(self._checks, inputs))
            self.task.add_done_callback(lambda _: wake.set())
        if self.verdict is None and self.task is not None and self.task.done():
            try:
                self.verdict = preflight.condition(self.task.result())
            except Exception as error:  # a bug or an unforeseen answer: reported, not raised
                log.exception("preflight failed")
                self.verdict = (False, "PreflightError", f"the checks could not run: {error}")
        return self.verdict
