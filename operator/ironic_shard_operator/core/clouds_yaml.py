"""What a clouds.yaml says about the cloud a pool names, and precisely why it says nothing.

Read once from text, no I/O: `cloud_entry()` is the one reader of a clouds.yaml's shape,
used for Conflict (claims.cloud_identity) and by the Ironic adapter before openstacksdk
sees the entry. Its messages are one line and never quote the file: a YAML error is
placed by line and column, since the line itself may hold a password.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class CloudsYamlError(ValueError):
    """The clouds.yaml names no usable entry for the cloud; the message says what is wrong
    with the file (its syntax, its shape, or the missing cloud) on one line."""


def cloud_entry(clouds_yaml: str | Mapping[str, Any], cloud_name: str) -> Mapping[str, Any]:
    """The settings of cloud `cloud_name` (`clouds: {NAME: {...}}`), from text or a parsed file.

    Raises CloudsYamlError naming the first thing in the way: not YAML (where), not a mapping,
    no `clouds:` key, `clouds:` of another type (a list, say), no such cloud (and the clouds
    there), or an entry that is not a mapping.
    """
    parsed = parse(clouds_yaml) if isinstance(clouds_yaml, str) else clouds_yaml
    if parsed is None:
        raise CloudsYamlError("the clouds.yaml is empty: it needs 'clouds:' with an entry per cloud")
    if not isinstance(parsed, Mapping):
        raise CloudsYamlError(f"the clouds.yaml is {shape(parsed)}, not a mapping with a 'clouds:' "
                              "key")
    if "clouds" not in parsed:
        found = ", ".join(sorted(map(str, parsed))) or "none"
        raise CloudsYamlError(f"the clouds.yaml has no 'clouds:' key (top-level keys there: {found})")
    clouds = parsed["clouds"]
    if not isinstance(clouds, Mapping):
        raise CloudsYamlError(
            f"'clouds:' in the clouds.yaml is {shape(clouds)}; it must map each cloud's name to "
            "its settings (clouds: {NAME: {auth: ..., ...}})")
    if cloud_name not in clouds:
        known = ", ".join(sorted(map(str, clouds))) or "none"
        raise CloudsYamlError(f"the clouds.yaml has no cloud named {cloud_name!r} (clouds there: {known})")
    entry = clouds[cloud_name]
    if not isinstance(entry, Mapping):
        raise CloudsYamlError(f"cloud {cloud_name!r} in the clouds.yaml is {shape(entry)}; it must "
                              "be a mapping of its settings (auth, auth_type, ...)")
    return entry


def parse(text: str) -> Any:
    """The YAML document of `text`; CloudsYamlError with the parser's problem and its place."""
    import yaml  # local: core stays importable without parsing anything

    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as error:
        where = error.problem_mark or error.context_mark
        place = f" at line {where.line + 1}, column {where.column + 1}" if where else ""
        context = f" ({error.context})" if error.context else ""
        raise CloudsYamlError(f"the clouds.yaml is not valid YAML: {error.problem or 'unreadable'}"
                              f"{place}{context}") from None
    except yaml.YAMLError as error:
        raise CloudsYamlError(f"the clouds.yaml is not valid YAML: {' '.join(str(error).split())}") from None


def shape(value: Any) -> str:
    """'a list', 'a string', ... for messages about a value of the wrong type."""
    names = {list: "a list", str: "a string", int: "a number", float: "a number", bool: "a boolean",
             type(None): "empty"}
    return names.get(type(value), f"a {type(value).__name__}")
