"""Waiting for something that must happen, within a deadline that CI can stretch.

Every wait's timeout is multiplied by DEADLINE_SCALE. hack/test.sh sets it (TEST_DEADLINE_SCALE)
to the number of pytest workers (3) because they share CI's two cores. A timeout only bounds
how long a test waits for something that must happen. It does not assert speed (the benchmarks
in bench/ do that).
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar('T')
DEADLINE_SCALE = float(os.environ.get('TEST_DEADLINE_SCALE') or 1)


def wait_for(check: Callable[[], T], *, timeout: float = 30.0, interval: float = 0.2, what: str = '') -> T:
    """Poll `check` until it returns a truthy value, and return that value; fail after
    `timeout` seconds (times DEADLINE_SCALE)."""
    timeout *= DEADLINE_SCALE
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f'not within {timeout:.0f} s: {what or check}')
        time.sleep(interval)
