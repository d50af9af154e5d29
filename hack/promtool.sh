#!/usr/bin/env bash
# Installs promtool (Prometheus' rule checker and rule unit tester) for the tests of the chart's
# alert rules (tests/unit/test_alert_rules.py): Debian's package prometheus, of which only
# promtool is kept, unpacked into the git-ignored .tools/prometheus by hack/deb-tool.sh
# (nothing installed on the system, no service). Prints promtool's path; exit 3, with the
# reason on stderr, where it cannot install here: the tests then skip, saying why.
set -euo pipefail
exec bash "$(dirname "$0")/deb-tool.sh" prometheus promtool --version
