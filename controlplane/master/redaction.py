"""Secrets out of every answer: one redaction for the configs the API sends back.

An experiment config carries credentials where Determined puts them: ``checkpoint_storage``
(``secret_key``, ``access_key``, a GCS/Azure credential or connection string), ``environment``
(``registry_auth.password``, ``environment_variables`` such as ``AWS_SECRET_ACCESS_KEY=...``).
Answers show ``********`` in their place; the stored config keeps them, and a task gets them only
through its own task info (the agent's ``StartTask``), never from the API.

``config`` (the parsed config) and ``originalConfig`` (the YAML as the user wrote it) are both
redacted: the YAML by its lines where it is written in block style, and re-dumped from the
redacted config when a secret would survive that.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

MASK = "********"
# Determined's secret-bearing storage keys, and anything named like a credential.
_SECRET_KEY = re.compile(r"secret|password|passwd|token|credential|access_key|connection_string|account_key"
                         r"|private_key|api_key", re.IGNORECASE)
# Config sections whose keys are judged by name (hyperparameters are not: "max_tokens" is no secret).
SECRET_SECTIONS = ("checkpoint_storage", "environment", "data_layer", "integrations")
_ENV_VAR = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=(.*)$", re.DOTALL)
# Cheap test before any YAML work: text that names no secret-like key has nothing to redact.
_HINT = _SECRET_KEY


def is_secret_key(key: Any) -> bool:
    return isinstance(key, str) and bool(_SECRET_KEY.search(key))


def _redact_env_var(entry: Any) -> Any:
    if isinstance(entry, str):
        m = _ENV_VAR.match(entry)
        if m and is_secret_key(m.group(1)):
            return f"{m.group(1)}={MASK}"
    return entry


def _redact_tree(node: Any) -> Any:
    """A copy of ``node`` with the value of every secret-named key masked (at any depth)."""
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for key, value in node.items():
            if is_secret_key(key) and value not in (None, ""):
                out[key] = MASK
            elif key == "environment_variables":
                out[key] = _redact_env_vars(value)
            else:
                out[key] = _redact_tree(value)
        return out
    if isinstance(node, list):
        return [_redact_tree(v) for v in node]
    return node


def _redact_env_vars(value: Any) -> Any:
    """``["K=V", ...]`` or ``{cpu: [...], cuda: [...], rocm: [...]}``."""
    if isinstance(value, list):
        return [_redact_env_var(v) for v in value]
    if isinstance(value, dict):
        return {k: _redact_env_vars(v) for k, v in value.items()}
    return value


def redact_config(config: Any) -> Any:
    """An experiment config for an answer: its secret-bearing sections redacted (a copy)."""
    if not isinstance(config, dict):
        return config
    if not any(section in config for section in SECRET_SECTIONS):
        return config
    return {key: _redact_tree(value) if key in SECRET_SECTIONS else value for key, value in config.items()}


def redact_storage(storage: Any) -> Any:
    """A ``checkpoint_storage`` block alone (as stored on a checkpoint)."""
    return _redact_tree(storage) if isinstance(storage, dict) else storage


# ---- the YAML text as submitted ----------------------------------------------------------------
# ``key: value`` on a line of its own (block style), the value up to a comment.
_LINE = re.compile(r"^(?P<head>\s*(?:-\s+)?(?P<quote>['\"]?)(?P<key>[^'\":#\s][^'\":#]*?)(?P=quote)\s*:\s+)"
                   r"(?P<value>[^#\s][^#]*?)(?P<tail>\s+#.*)?$")
_ENV_LINE = re.compile(r"^(?P<head>\s*-\s+(?P<quote>['\"]?)(?P<key>[A-Za-z_][A-Za-z0-9_]*)=)(?P<value>.*?)"
                       r"(?P=quote)\s*$")


_TOP_KEY = re.compile(r"^(?P<quote>['\"]?)(?P<key>[^'\":#\s-][^'\":#]*?)(?P=quote)\s*:(\s|$)")


def _mask_lines(text: str) -> str:
    """Masks ``key: value`` lines of secret-named keys inside the secret-bearing top-level sections."""
    out = []
    section = None
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        ending = line[len(body):]
        top = _TOP_KEY.match(body)
        if top:
            section = top.group("key")
        if section not in SECRET_SECTIONS or top:
            out.append(line)
            continue
        m = _LINE.match(body)
        if m and is_secret_key(m.group("key")):
            body = f"{m.group('head')}{MASK!r}{m.group('tail') or ''}"
        else:
            e = _ENV_LINE.match(body)
            if e and is_secret_key(e.group("key")):
                body = f"{e.group('head')}{MASK}{e.group('quote')}"
        out.append(body + ending)
    return "".join(out)


def _secret_values(node: Any, inside: bool = False) -> set[str]:
    """Every secret value in the parsed config (to prove the masked text holds none of them)."""
    found: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if inside and is_secret_key(key) and value not in (None, ""):
                found.add(str(value))
            elif inside and key == "environment_variables":
                for entry in (value if isinstance(value, list) else
                              [v for vs in value.values() if isinstance(vs, list) for v in vs]
                              if isinstance(value, dict) else []):
                    m = _ENV_VAR.match(entry) if isinstance(entry, str) else None
                    if m and is_secret_key(m.group(1)) and m.group(2).strip():
                        found.add(m.group(2).strip())
            else:
                found |= _secret_values(value, inside or key in SECRET_SECTIONS)
    elif isinstance(node, list):
        for value in node:
            found |= _secret_values(value, inside)
    return found


def _clean(masked: str) -> bool:
    """The masked text still parses and every secret in it is masked (block scalars, odd quoting)."""
    try:
        parsed = yaml.safe_load(masked)
    except yaml.YAMLError:
        return False
    return isinstance(parsed, dict) and _secret_values(parsed) <= {MASK}


def redact_yaml_text(text: str, config: dict[str, Any] | None = None) -> str:
    """The submitted YAML with secret values masked, comments kept where possible.

    ``config`` is the parsed config it came from (the stored, validated one): a masked text that
    still holds any of its secret values (flow style, multi-line strings) is replaced by a dump of
    the redacted config."""
    if not isinstance(text, str) or not _HINT.search(text):
        return text
    masked = _mask_lines(text)
    try:
        parsed = yaml.safe_load(text)
    except yaml.YAMLError:
        parsed = None
    secrets = _secret_values(parsed if isinstance(parsed, dict) else config or {})
    if config:
        secrets |= _secret_values(config)
    if not any(s and s in masked for s in secrets if s != MASK) and _clean(masked):
        return masked
    source = parsed if isinstance(parsed, dict) else config or {}
    return yaml.safe_dump(redact_config(source), sort_keys=False)


# ---- a redacted config sent back -----------------------------------------------------------------
def restore_masked(new: Any, old: Any) -> Any:
    """``new`` with each ``********`` that stands where ``old`` holds a secret given back ``old``'s value.

    A template read from an answer (secrets masked) and sent again must not store the mask over
    the secret it stood for. Only secret-named keys and ``K=********`` variables of the secret
    sections are restored; anything else in ``new`` is kept as sent."""
    if not isinstance(new, dict) or not isinstance(old, dict):
        return new
    return {key: _restore(value, old.get(key)) if key in SECRET_SECTIONS else value for key, value in new.items()}


def _restore(new: Any, old: Any) -> Any:
    if isinstance(new, dict):
        olds = old if isinstance(old, dict) else {}
        out = {}
        for key, value in new.items():
            if value == MASK and is_secret_key(key) and olds.get(key) not in (None, ""):
                out[key] = olds[key]
            elif key == "environment_variables":
                out[key] = _restore_env_vars(value, olds.get(key))
            else:
                out[key] = _restore(value, olds.get(key))
        return out
    if isinstance(new, list):
        olds_list = old if isinstance(old, list) else []
        return [_restore(v, olds_list[i] if i < len(olds_list) else None) for i, v in enumerate(new)]
    return new


def _restore_env_vars(new: Any, old: Any) -> Any:
    if isinstance(new, dict):
        return {k: _restore_env_vars(v, old.get(k) if isinstance(old, dict) else old) for k, v in new.items()}
    if not isinstance(new, list):
        return new
    previous = {}
    for entry in old if isinstance(old, list) else []:
        m = _ENV_VAR.match(entry) if isinstance(entry, str) else None
        if m:
            previous[m.group(1)] = entry
    out = []
    for entry in new:
        m = _ENV_VAR.match(entry) if isinstance(entry, str) else None
        masked = m is not None and is_secret_key(m.group(1)) and m.group(2) == MASK
        out.append(previous.get(m.group(1), entry) if masked and m is not None else entry)
    return out
