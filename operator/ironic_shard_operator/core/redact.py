"""Credentials never leave the operator in its words: one text rule for every message it
writes (status conditions, Events, log lines, metrics labels).

`redact(text, secrets)` masks, in this order:
- every value in `secrets` (the passwords, tokens and keys found in the pool's clouds.yaml
  and nova.conf by `secrets_in_clouds_yaml` / `secrets_in_ini`), also as they appear
  percent-encoded in a URL;
- the password of every URL with userinfo (`scheme://user:password@host`, each host of a
  multi-host URL such as a transport_url), keeping the user;
- the value of every `password=`, `password: `, `"secret": "..."`-like pair (keys naming a
  password, secret, token or credential), as error texts and dumped settings show them.

Redacting is idempotent and leaves a text without credentials unchanged. Values shorter
than MIN_SECRET_LENGTH are masked only where a rule above finds them by form: masking every
occurrence of a two-letter password would garble every message, and such a password is
guessed faster than read.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote, quote_plus

MASK = "***"
MIN_SECRET_LENGTH = 4

# Key names whose values are credentials: password, passwd, passphrase, passcode, secret,
# token, and the likes of application_credential_secret, client_secret, admin_token; not
# those naming something about one (token_url, password_file, secret_name, ...).
_SECRET_WORD = r"[\w.-]*(?:password|passwd|passphrase|passcode|secret|token)[\w.-]*"
_NOT_SECRET_SUFFIXES = ("_id", "_name", "_type", "_file", "_path", "_url", "_endpoint", "_expiry")
# key = value, key: value, "key": "value", key=value& (query strings), X-Auth-Token: value
_PAIR = re.compile(
    rf"""(?P<key>["']?\b(?P<name>{_SECRET_WORD})["']?\s*[:=]\s*)"""
    r"""(?:(?P<quote>["'])(?P<quoted>[^"'\n]*)|(?P<bare>[^\s"',;&}\])]+))""",
    re.IGNORECASE)
# scheme://[userinfo@]hosts: the userinfo may hold any character but blanks, quotes and '@';
# the hosts end at a path, query, fragment, blank or quote.
_URL = re.compile(r"""(?P<scheme>\b[a-z][a-z0-9+.-]*://)(?P<netloc>(?:[^\s'"<>@]*@)?[^/?#\s'"<>]*)""",
                  re.IGNORECASE)


def is_secret_key(name: str) -> bool:
    """True when a setting called `name` holds a credential (password, app credential secret,
    token, ...)."""
    name = name.strip().lower()
    return bool(re.fullmatch(_SECRET_WORD, name)) and not name.endswith(_NOT_SECRET_SUFFIXES)


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with every credential masked (see the module doc)."""
    for secret in sorted({s for s in secrets if s and len(s) >= MIN_SECRET_LENGTH}, key=len, reverse=True):
        for form in {secret, quote(secret, safe=""), quote_plus(secret, safe="")}:
            text = text.replace(form, MASK)
    text = _URL.sub(_masked_netloc, text)
    return _PAIR.sub(_masked_pair, text)


def _masked_netloc(found: re.Match[str]) -> str:
    hosts = []
    for host in found.group("netloc").split(","):
        userinfo, at, address = host.rpartition("@")
        if at and ":" in userinfo:
            host = f"{userinfo.partition(':')[0]}:{MASK}@{address}"
        hosts.append(host)
    return found.group("scheme") + ",".join(hosts)


def _masked_pair(found: re.Match[str]) -> str:
    if not is_secret_key(found.group("name")):
        return found.group(0)
    quote_mark = found.group("quote") or ""
    return f"{found.group('key')}{quote_mark}{MASK}"


def secrets_in_clouds_yaml(clouds_yaml: str | Mapping[str, Any] | None) -> frozenset[str]:
    """Every credential a clouds.yaml holds, whatever its shape: values of keys naming a
    password, secret, token or credential (auth.password, application_credential_secret,
    ...), and the password of every URL with userinfo (auth_url, endpoints, overrides).
    A text that is not valid YAML is scanned line by line for `key: value`."""
    if clouds_yaml is None:
        return frozenset()
    parsed: Any = clouds_yaml
    if isinstance(clouds_yaml, str):
        import yaml  # local: core stays importable without parsing anything

        try:
            parsed = yaml.safe_load(clouds_yaml)
        except yaml.YAMLError:
            return _secrets_in_lines(clouds_yaml, separator=":")
        found = _secrets_in_lines(clouds_yaml, separator=":")
    else:
        found = frozenset()
    return found | frozenset(_secrets_in_document(parsed))


def secrets_in_ini(text: str | None) -> frozenset[str]:
    """Every credential an INI file (nova.conf) holds: values of keys naming a password,
    secret, token or credential ([ironic] password, [keystone_authtoken] password, ...),
    and the password of every URL with userinfo (transport_url, [database] connection)."""
    return _secrets_in_lines(text or "", separator="=")


def _secrets_in_document(value: Any, key: str = "") -> Iterable[str]:
    if isinstance(value, Mapping):
        for name, item in value.items():
            yield from _secrets_in_document(item, str(name))
    elif isinstance(value, list):
        for item in value:
            yield from _secrets_in_document(item, key)
    elif value is not None and not isinstance(value, bool):
        text = str(value)
        if is_secret_key(key):
            yield text
        yield from _url_passwords(text)


def _secrets_in_lines(text: str, *, separator: str) -> frozenset[str]:
    found = set()
    for line in text.splitlines():
        name, sep, value = line.partition(separator)
        value = value.strip().strip("\"'")
        if not sep or not value:
            continue
        if is_secret_key(name.strip().strip("\"'- ")):
            found.add(value)  # and its words, for a line that is not what its format allows
            found.update(word.strip("\"':,") for word in value.split())
        found.update(_url_passwords(value))
    return frozenset(found)


def _url_passwords(text: str) -> Iterable[str]:
    for url in _URL.finditer(text):
        for host in url.group("netloc").split(","):
            userinfo, at, _ = host.rpartition("@")
            if at and ":" in userinfo:
                yield userinfo.partition(":")[2]
