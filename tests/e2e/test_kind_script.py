"""hack/kind-e2e.sh's own plumbing, without Docker or kind: outcome, teardown, signals.

The script runs unchanged from a scratch checkout (its own copy under tmp_path) in which
every command it calls is a fake that records its arguments and fails when asked to:
`docker`, `kind`, `kubectl`, `helm` first on PATH; hack/setup.sh, hack/tools.sh,
hack/ironic/service.py and .venv/bin/python (the scenario) in the scratch checkout. Each
case is read with the same `outcome()` as the real end-to-end test, so a script whose
RESULT line and exit status disagree, or that a failure cannot fail, fails here.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.test_kind import CANNOT_RUN, SCRIPT, outcome, run_script

# One fake for every command: it records "<name> <args>", and fails when FAKE_FAIL (comma-
# separated) names it, alone or with its first argument ("setup", "kind create"); FAKE_HANG
# likewise makes it wait until it is signalled, then die of that signal as a real command
# would. Its traps are set before it records the call, which is what the test waits for
# before it signals: a signal can never fall between recording and waiting. (What once made
# the SIGINT case hang 600 s was a runner that had SIGINT ignored: see default_signals below.)
FAKE = r"""#!/usr/bin/env bash
name=%(name)s
hang() {
    trap '[[ -n ${pid:-} ]] && kill "$pid" 2>/dev/null; trap - INT; kill -INT $$' INT
    trap '[[ -n ${pid:-} ]] && kill "$pid" 2>/dev/null; trap - TERM; kill -TERM $$' TERM
    sleep 600 >/dev/null 2>&1 &
    pid=$!
    echo "$name $*" >>"$FAKE_CALLS"
    wait "$pid"
    exit 0
}
case ",${FAKE_HANG:-}," in *",$name,"* | *",$name $1,"*) hang "$@";; esac
echo "$name $*" >>"$FAKE_CALLS"
case ",${FAKE_FAIL:-}," in *",$name,"* | *",$name $1,"*) echo "$name: $1 failed (fake)" >&2; exit 1;; esac
[[ "$name $1 $2" == "docker network inspect" ]] && echo 172.18.0.1
exit 0
"""

# hack/ironic/service.py is run by python3, so its fake is Python.
FAKE_IRONIC = r"""import os, sys
command, state = sys.argv[1], sys.argv[2]
os.makedirs(state, exist_ok=True)  # as the real one does, before anything can fail
with open(os.environ["FAKE_CALLS"], "a") as calls:
    calls.write("ironic " + " ".join(sys.argv[1:]) + "\n")
if "ironic " + command in os.environ.get("FAKE_FAIL", "").split(","):
    print("IRONIC_URL=http://172.18.0.1:1")  # printed before failing, as a crash might
    sys.exit("ironic: %s failed (fake)" % command)
if command == "start":
    print("IRONIC_URL=http://172.18.0.1:6385")
    print("OS_CLIENT_CONFIG_FILE=%s/clouds.yaml" % state)
    print("OS_CLOUD=ironic-test")
"""


@dataclass
class Run:
    returncode: int
    output: str
    calls: list[str]

    def called(self, prefix: str) -> bool:
        return any(call.startswith(prefix) for call in self.calls)


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    return scratch_checkout(tmp_path, SCRIPT.read_text())


def scratch_checkout(tmp_path: Path, script_text: str) -> Path:
    """A directory laid out like the repository, holding `script_text` as hack/kind-e2e.sh
    and fakes for everything it runs; fake CLIs in tmp_path/bin."""
    root = tmp_path / "checkout"
    for relative, name in (("hack/setup.sh", "setup"), ("hack/tools.sh", "tools"),
                           (".venv/bin/python", "scenario"), ("bin/docker", "docker"),
                           ("bin/kind", "kind"), ("bin/kubectl", "kubectl"), ("bin/helm", "helm")):
        path = (tmp_path if relative.startswith("bin/") else root) / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(FAKE % {"name": name})
        path.chmod(0o755)
    (root / "hack" / "ironic").mkdir()
    (root / "hack" / "ironic" / "service.py").write_text(FAKE_IRONIC)
    (root / "hack" / "kind-e2e.sh").write_text(script_text)
    return root


def run(checkout: Path, *, fail: str = "", hang: str = "", on_start=None) -> Run:
    calls = checkout.parent / "calls.log"
    calls.write_text("")
    env = dict(os.environ, PATH=f"{checkout.parent / 'bin'}:{os.environ['PATH']}",
               FAKE_CALLS=str(calls), FAKE_FAIL=fail, FAKE_HANG=hang)
    env.pop("KIND", None)
    if on_start is None:
        returncode, output = run_script(checkout / "hack" / "kind-e2e.sh", cwd=checkout, env=env,
                                        timeout=60)
    else:
        returncode, output = on_start(checkout / "hack" / "kind-e2e.sh", env, calls)
    return Run(returncode, output, calls.read_text().splitlines())


def assert_torn_down(done: Run) -> None:
    assert done.called("kind delete cluster --name iso-e2e-"), done.calls
    assert done.called("ironic stop "), done.calls
    assert done.called("docker image rm ironic-shard-operator:e2e-"), done.calls


def test_a_passing_run_exits_0_with_its_result_line_before_the_teardown(checkout):
    done = run(checkout)
    assert outcome(done.returncode, done.output).verdict == "passed", done.output
    assert done.called("scenario -m tests.e2e.kind_scenario --image ironic-shard-operator:e2e-")
    assert_torn_down(done)
    lines = done.output.splitlines()
    # Teardown prints after the result: the reader must not depend on the last line.
    assert lines.index("kind-e2e: RESULT PASSED") < len(lines) - 1, done.output
    assert not done.called("kubectl"), "diagnostics collected for a passing run"


@pytest.mark.parametrize("failing", ["setup", "kind create", "docker build", "ironic start",
                                     "scenario -m"])
def test_a_failing_step_fails_the_run_and_the_teardown_still_runs(checkout, failing):
    done = run(checkout, fail=failing)
    assert outcome(done.returncode, done.output).verdict == "failed", done.output
    if failing != "scenario -m":
        assert not done.called("scenario "), f"the scenario ran after {failing!r} failed"
    if failing == "setup":
        assert not done.called("kind create"), "a cluster was created without the venv"
        return
    # From the cluster's creation on, a failure collects diagnostics and deletes the cluster.
    assert done.called("kubectl get all,ics,events,leases -A -o wide"), done.calls
    assert done.called("kind delete cluster --name iso-e2e-"), done.calls
    if failing in ("ironic start", "scenario -m"):
        assert_torn_down(done)


def test_a_failing_teardown_does_not_fail_a_passing_run(checkout):
    done = run(checkout, fail="kind delete,ironic stop,docker image")
    assert outcome(done.returncode, done.output).verdict == "passed", done.output
    assert "kind-e2e: warning: could not delete kind cluster iso-e2e-" in done.output


def test_without_a_docker_engine_it_cannot_run_and_creates_nothing(checkout):
    done = run(checkout, fail="docker info")
    assert done.returncode == CANNOT_RUN
    result = outcome(done.returncode, done.output)
    assert result.verdict == "cannot run"
    assert result.detail.startswith("kind-e2e: cannot run: no Docker engine reachable: docker: info failed")
    assert done.calls == ["docker info --format {{.ServerVersion}}"]


def test_without_kind_it_cannot_run(checkout):
    (checkout.parent / "bin" / "kind").unlink()
    done = run(checkout)
    result = outcome(done.returncode, done.output)
    assert result.verdict == "cannot run"
    assert "no kind binary" in result.detail


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_an_interrupted_run_fails_and_still_tears_down(checkout, signum, status):
    def interrupt_during_the_scenario(script: Path, env: dict, calls: Path) -> tuple[int, str]:
        # The script starts with SIGINT and SIGTERM at their defaults, as from a terminal: a
        # signal ignored on entry cannot be trapped by bash, and a test runner's worker (or a
        # test before this one) may have left SIGINT ignored in this process.
        def default_signals() -> None:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)

        with subprocess.Popen(["bash", str(script)], cwd=checkout, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True,
                              preexec_fn=default_signals) as process:
            try:
                deadline = time.monotonic() + 60
                while "scenario -m" not in calls.read_text():
                    assert time.monotonic() < deadline and process.poll() is None, "the scenario never started"
                    time.sleep(0.05)
                os.killpg(process.pid, signum)  # the whole group, as Ctrl-C or a timeout does
                output, _ = process.communicate(timeout=60)
            except BaseException:
                os.killpg(process.pid, signal.SIGKILL)  # fail now, not after the fake's 600 s
                raise
        return process.returncode, output

    done = run(checkout, hang="scenario -m", on_start=interrupt_during_the_scenario)
    assert done.returncode == status
    assert outcome(done.returncode, done.output).detail == f"kind-e2e: RESULT FAILED (exit {status})"
    assert_torn_down(done)
