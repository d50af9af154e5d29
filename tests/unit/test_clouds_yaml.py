"""A clouds.yaml that cannot name the pool's cloud says why: its YAML error and where, or its
wrong shape, never "has no cloud named ..." for a file that is broken in another way. The
same words reach the status whether Conflict (cloud_identity) or the Ironic adapter reads
the file first."""

from __future__ import annotations

import pytest

from ironic_shard_operator.adapters.ironic import IronicAdapter, IronicConfigError
from ironic_shard_operator.core.claims import cloud_identity
from ironic_shard_operator.core.spec import InvalidSpec

GOOD = "clouds:\n  ironic:\n    auth_type: none\n    auth: {endpoint: 'http://127.0.0.1:6385'}\n"

CASES = [
    # (clouds.yaml, what the message must say)
    ("clouds:\n  ironic:\n    auth: {endpoint: 'http://127.0.0.1:6385'\n",
     "the clouds.yaml is not valid YAML: expected ',' or '}', but got '<stream end>' at line 4, column 1"),
    ("clouds:\n  ironic:\n    auth_type: none\n   auth: {}\n",
     "the clouds.yaml is not valid YAML: expected <block end>, but found '<block mapping start>' "
     "at line 4, column 4 (while parsing a block mapping)"),
    ("clouds:\n  - ironic\n",
     "'clouds:' in the clouds.yaml is a list; it must map each cloud's name to its settings"),
    ("clouds: ironic\n", "'clouds:' in the clouds.yaml is a string; it must map each cloud's name"),
    ("- clouds: {}\n", "the clouds.yaml is a list, not a mapping with a 'clouds:' key"),
    ("", "the clouds.yaml is empty: it needs 'clouds:' with an entry per cloud"),
    ("cloud:\n  ironic: {}\n", "the clouds.yaml has no 'clouds:' key (top-level keys there: cloud)"),
    ("clouds:\n  ironic: http://127.0.0.1:6385\n",
     "cloud 'ironic' in the clouds.yaml is a string; it must be a mapping of its settings"),
    ("clouds:\n  prod: {}\n  lab: {}\n", "the clouds.yaml has no cloud named 'ironic' (clouds there: lab, prod)"),
]


@pytest.mark.parametrize(("clouds_yaml", "says"), CASES)
def test_a_clouds_yaml_that_names_no_usable_cloud_says_why(clouds_yaml: str, says: str):
    with pytest.raises(InvalidSpec) as for_conflict:
        cloud_identity(clouds_yaml, "ironic")
    with pytest.raises(IronicConfigError) as for_ironic:
        IronicAdapter.from_clouds_yaml(clouds_yaml, "ironic")
    assert str(for_conflict.value) == f"spec.cloud: {str(for_ironic.value)}"
    assert says in str(for_ironic.value)
    assert "\n" not in str(for_ironic.value)
    if "no cloud named" not in says:
        assert "no cloud named" not in str(for_ironic.value), "the real problem is hidden"


def test_a_yaml_error_is_placed_but_the_offending_line_is_not_quoted():
    """The line with the error may be the password's: the message gives line and column only."""
    broken = "clouds:\n  ironic:\n    auth:\n      password: Hunter2: Secret\n"
    with pytest.raises(InvalidSpec) as caught:
        cloud_identity(broken, "ironic")
    assert "mapping values are not allowed here at line 4, column 24" in str(caught.value)
    assert "Hunter2" not in str(caught.value)


def test_a_well_formed_clouds_yaml_is_read():
    assert len(cloud_identity(GOOD, "ironic")) == 16
