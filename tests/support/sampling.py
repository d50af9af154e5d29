"""The background sampler the real-Nova scenarios watch the world with: a thread that reads
something every `period` seconds until stopped, so a test asserts on a history, not on one look."""

from __future__ import annotations

import threading
from typing import Any


class Sampler:
    """Appends `self.sample()` to `self.samples` every `self.period` seconds between `__enter__`
    and `__exit__`. A read that fails is kept in `self.errors`: a missing sample, not a finding
    (the test says how many it tolerates). Subclasses define `period`, `samples`, `errors` (a
    dataclass's fields do) and `sample()`."""

    period: float
    samples: list[Any]
    errors: list[BaseException]

    def sample(self) -> Any:
        raise NotImplementedError

    def __enter__(self) -> Any:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=type(self).__name__, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append(self.sample())
            except Exception as error:  # noqa: BLE001 - a failed read is reported, not fatal
                self.errors.append(error)
            self._stop.wait(self.period)
