"""The kind end-to-end tier: runs hack/kind-e2e.sh and reports what it did.

Where the script cannot run (no Docker engine, no kind binary) it exits 77 with a one-line
reason, and this test is SKIPPED with that reason: never a pass without the run.

The script's outcome is its exit status and its one `kind-e2e: RESULT ...` line, which must
agree (`outcome()`); teardown prints after that line, so it is looked for wherever it is.
tests/e2e/test_kind_script.py checks that plumbing with fake commands, without Docker.
"""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "hack" / "kind-e2e.sh"
CANNOT_RUN = 77
TIMEOUT_SECONDS = 40 * 60
TEARDOWN_SECONDS = 5 * 60  # after a timeout: SIGTERM, then this long for the teardown
RESULT = "kind-e2e: RESULT "
CANNOT_RUN_LINE = "kind-e2e: cannot run: "


@dataclass(frozen=True)
class Outcome:
    verdict: str  # "passed", "failed" or "cannot run"
    detail: str   # the RESULT line, or the reason the script cannot run here


def outcome(returncode: int, output: str) -> Outcome:
    """What a run of hack/kind-e2e.sh says, from its exit status and its whole output.

    A run that cannot start says why (exit 77, no RESULT line). Any other run prints exactly
    one RESULT line, and it must agree with the exit status: a run is passed only when both
    say so. A disagreement is an AssertionError (the script's plumbing is broken).
    """
    lines = output.splitlines()
    results = [line for line in lines if line.startswith(RESULT)]
    if returncode == CANNOT_RUN:
        assert not results, f"exit {CANNOT_RUN} (cannot run) after a run: {results}"
        reasons = [line for line in lines if line.startswith(CANNOT_RUN_LINE)]
        return Outcome("cannot run", reasons[-1] if reasons else "hack/kind-e2e.sh cannot run here")
    assert len(results) == 1, f"exit {returncode} with {len(results)} RESULT lines: {results}"
    (result,) = results
    expected = RESULT + ("PASSED" if returncode == 0 else f"FAILED (exit {returncode})")
    assert result == expected, f"exit {returncode} but the script says {result!r}"
    return Outcome("passed" if returncode == 0 else "failed", result)


def run_script(script: Path, *, cwd: Path, env: Mapping[str, str] | None = None,
               timeout: float = TIMEOUT_SECONDS) -> tuple[int, str]:
    """Run `script` in its own process group; (exit status, stdout and stderr interleaved).

    On timeout the whole group gets SIGTERM, as Ctrl-C would give it, so the script's
    teardown still runs (a SIGKILL would leave the cluster behind); SIGKILL only after
    TEARDOWN_SECONDS more.
    """
    with subprocess.Popen(["bash", str(script)], cwd=cwd, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, start_new_session=True) as process:
        try:
            output, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                output, _ = process.communicate(timeout=TEARDOWN_SECONDS)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                output, _ = process.communicate()
            output += f"\n(test: timed out after {timeout:.0f} s; the script got SIGTERM)\n"
    return process.returncode, output


@pytest.mark.e2e
def test_kind_end_to_end(tmp_path):
    returncode, output = run_script(SCRIPT, cwd=REPO)
    (tmp_path / "kind-e2e.log").write_text(output)
    result = outcome(returncode, output)
    if result.verdict == "cannot run":
        pytest.skip(result.detail)
    tail = "\n".join(output.splitlines()[-60:])
    assert result.verdict == "passed", f"hack/kind-e2e.sh failed ({result.detail}):\n{tail}"
