"""Where checkpoints may live is the admin's choice: an experiment picks one of the admin's places.

master.yaml's ``checkpoint_storage`` is the cluster default (the choice named ``default``) and
``checkpoint_storage_choices`` lists more, each a named storage block::

    checkpoint_storage_choices:
      - {name: scratch, type: shared_fs, host_path: /mnt/scratch}
      - {name: team-s3, type: s3, bucket: team, prefix: det, access_key: ..., secret_key: ...}

An experiment's ``checkpoint_storage`` (``resolve``) may

- be absent or hold only ``save_*`` keys: the cluster default;
- name a choice: ``{name: scratch}``;
- be a Determined-style block whose ``type`` and location (``host_path`` for shared_fs,
  ``container_path`` for directory, ``bucket`` for s3/gcs) are a choice's;

and, in the last two forms, add a sub-path inside that choice: ``storage_path`` (shared_fs) or
``prefix`` (s3/gcs), relative to the location as in Determined, equal to or below the choice's own,
whose new components are plain names: no ``..`` or absolute path, none starting with ``.`` (so never
``.staging``), none shaped like a checkpoint uuid (hex and dashes, 8 or more: never a checkpoint's
directory) and no ``pai-outputs`` (where OpenPAI outputs are kept). Every other key must be absent
or equal to the choice's own: an experiment picks a place, it never sets credentials, an endpoint or
a temp_dir the master or a task would then use. What is stored is the effective block (the choice's
fields, the sub-path, the ``save_*`` policy; no ``name``), so agents and the master only ever act on
the admin's places. Every problem of the block comes back at once, each naming its field, and the
ones about the place list the choices (name, type, location).
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from typing import Any

from controlplane.config import fields as f
from controlplane.config.errors import ConfigError, ConfigErrors, raise_all
from controlplane.config.experiment import SAVE_DEFAULTS, STORAGE_KEYS

# Where OpenPAI jobs' outputs are kept under a storage root (controlplane/pai/outputs.py): no sub-path names it.
PAI_OUTPUTS_DIR = "pai-outputs"

DEFAULT = "default"
LOCATION = {"shared_fs": "host_path", "directory": "container_path", "s3": "bucket", "gcs": "bucket"}
SUB_PATH = {"shared_fs": "storage_path", "s3": "prefix", "gcs": "prefix"}
SAVE_KEYS = frozenset(SAVE_DEFAULTS)
# A checkpoint uuid's shape (services/fields.py NewCheckpointUuid): such a component could name one.
UUID_LIKE = re.compile(r"^[0-9a-fA-F-]{8,}$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


@dataclass(frozen=True)
class StorageChoice:
    name: str
    storage: dict[str, Any]  # a checkpoint_storage block, without ``name``

    @property
    def kind(self) -> str:
        return str(self.storage["type"])

    @property
    def location(self) -> str:
        return str(self.storage[LOCATION[self.kind]])

    @property
    def sub_path(self) -> str:
        key = SUB_PATH.get(self.kind)
        return "/".join(_parts(self.storage.get(key))) if key else ""

    def describe(self) -> str:
        sub = f" {SUB_PATH[self.kind]} {self.sub_path}" if self.sub_path else ""
        return f"{self.name} ({self.kind} {LOCATION[self.kind]} {self.location}{sub})"


def _parts(value: Any) -> list[str]:
    return [p for p in str(value or "").split("/") if p]


def check_block(raw: Any, path: str) -> dict[str, Any]:
    """An admin's storage block (master.yaml): its type's keys, strings, an absolute host_path or
    container_path, a sub-path without ``.``/``..``; ``save_*`` defaults allowed. Every mistake at once."""
    raw = f.mapping(raw, path)
    kind = raw.get("type")
    if kind not in STORAGE_KEYS:
        raise ConfigError(f.join(path, "type"), f"must be one of {', '.join(STORAGE_KEYS)}, got {kind!r}")
    required, optional = STORAGE_KEYS[kind]
    errors: list[ConfigError] = []
    try:
        f.no_unknown(raw, {"type"} | required | optional | SAVE_KEYS, path)
    except ConfigErrors as e:
        errors.extend(e.errors)
    except ConfigError as e:
        errors.append(e)
    out: dict[str, Any] = {"type": kind}
    for key in sorted(required | optional):
        if key not in raw or raw[key] is None:
            if key in required:
                errors.append(ConfigError(f.join(path, key), "required"))
            continue
        if not isinstance(raw[key], str) or not raw[key]:
            errors.append(ConfigError(f.join(path, key), f"must be a non-empty string, got {raw[key]!r}"))
            continue
        out[key] = raw[key]
    location = out.get(LOCATION[kind])
    if kind in ("shared_fs", "directory") and location is not None and not location.startswith("/"):
        errors.append(ConfigError(f.join(path, LOCATION[kind]), f"must be an absolute path, got {location!r}"))
    sub_key = SUB_PATH.get(kind)
    if sub_key and sub_key in out and (out[sub_key].startswith("/") and kind == "shared_fs"
                                       or any(p in (".", "..") for p in _parts(out[sub_key]))):
        errors.append(ConfigError(f.join(path, sub_key), f"must be a relative path without '.' or '..' parts, "
                                                          f"got {out[sub_key]!r}"))
    for key in sorted(SAVE_KEYS & set(raw)):
        try:
            out[key] = f.integer(raw[key], f.join(path, key), minimum=0)
        except ConfigError as e:
            errors.append(e)
    raise_all(errors)
    return out


def parse_choices(default: dict[str, Any], extra: Any) -> list[StorageChoice]:
    """The cluster's storage choices: ``default`` (master.yaml's ``checkpoint_storage``) first, then
    ``checkpoint_storage_choices``. Raises ConfigError(s) naming the field."""
    errors: list[ConfigError] = []
    choices: list[StorageChoice] = []
    try:
        choices.append(StorageChoice(DEFAULT, check_block(default, "checkpoint_storage")))
    except ConfigErrors as e:
        errors.extend(e.errors)
    except ConfigError as e:
        errors.append(e)
    if extra is not None and not isinstance(extra, list):
        raise ConfigError("checkpoint_storage_choices", f"must be a list of storage blocks, got {type(extra).__name__}")
    seen = {DEFAULT}
    for i, item in enumerate(extra or []):
        path = f"checkpoint_storage_choices[{i}]"
        if not isinstance(item, dict):
            errors.append(ConfigError(path, f"must be a mapping, got {type(item).__name__}"))
            continue
        name = item.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            errors.append(ConfigError(f"{path}.name", "required: letters, digits, '.', '_' or '-' (at most 64), "
                                                      f"got {name!r}"))
        elif name in seen:
            errors.append(ConfigError(f"{path}.name", f"{name!r} is taken" + (
                " (the cluster's checkpoint_storage is the choice named 'default')" if name == DEFAULT else "")))
        else:
            seen.add(name)
        try:
            block = check_block({k: v for k, v in item.items() if k != "name"}, path)
        except ConfigErrors as e:
            errors.extend(e.errors)
            continue
        except ConfigError as e:
            errors.append(e)
            continue
        if isinstance(name, str):
            choices.append(StorageChoice(name, block))
    raise_all(errors)
    return choices


def listing(choices: list[StorageChoice]) -> str:
    return "the storage choices are " + "; ".join(c.describe() for c in choices)


def resolve(raw: Any, choices: list[StorageChoice]) -> Any:
    """The effective ``checkpoint_storage`` of an experiment whose config says ``raw`` (see the
    module docstring); raises ConfigError(s), every problem of the block at once. A value that is
    not a mapping is returned as it is, for the config check to refuse."""
    default = choices[0]
    if raw is None:
        return dict(default.storage)
    if not isinstance(raw, dict):
        return raw
    save = {k: raw[k] for k in SAVE_KEYS if raw.get(k) is not None}
    given = {k: v for k, v in raw.items() if v is not None and k not in SAVE_KEYS}
    if not given:
        return {**default.storage, **save}
    if "name" not in given and "type" not in given:  # as Determined's merge: the cluster's type under it
        given = {"name": DEFAULT, **given}
    choice, errors = _choice_of(given, choices)
    if choice is None:
        raise_all(errors)
        return raw  # unreachable: no choice always comes with an error
    sub_key = SUB_PATH.get(choice.kind)
    sub = None
    for key, value in given.items():
        path = f"checkpoint_storage.{key}"
        if key in ("name", "type", LOCATION[choice.kind]):
            continue  # checked by _choice_of
        if key == sub_key:
            sub, problem = _sub_path(value, choice)
            if problem:
                errors.append(ConfigError(path, problem))
            continue
        if key not in set().union(*STORAGE_KEYS[choice.kind]):
            errors.append(ConfigError(path, f"unknown field for {choice.kind} storage"))
        elif choice.storage.get(key) != value:
            own = choice.storage.get(key)
            errors.append(ConfigError(path, f"must be left out or equal what storage choice {choice.name!r} sets "
                                            f"({'it sets none' if own is None else 'another value'}): an "
                                            "experiment picks a storage place, it does not configure one"))
    raise_all(errors)
    out = {**choice.storage, **save}
    if sub_key and sub is not None:
        out[sub_key] = sub
    return out


def _choice_of(given: dict[str, Any], choices: list[StorageChoice]) -> tuple[StorageChoice | None, list[ConfigError]]:
    """The choice the block names (by ``name``, else by type and location) and the problems found so far."""
    if "name" in given:
        name = given["name"]  # any value: compared, never hashed
        found = next((c for c in choices if c.name == name), None)
        if found is None:
            return None, [ConfigError("checkpoint_storage.name", f"no storage choice named {name!r}; "
                                                                 f"{listing(choices)}")]
        errors = []
        if "type" in given and given["type"] != found.kind:
            errors.append(ConfigError("checkpoint_storage.type", f"{given['type']!r} is not what storage "
                                                                 f"choice {found.describe()} sets"))
        key = LOCATION[found.kind]
        if key in given and not _same_place(found.kind, found.location, given[key]):
            errors.append(ConfigError(f"checkpoint_storage.{key}", f"{given[key]!r} is not what storage "
                                                                   f"choice {found.describe()} sets"))
        return found, errors
    kind = given.get("type")
    if not isinstance(kind, str) or kind not in LOCATION:
        return None, [ConfigError("checkpoint_storage.type", f"must be one of {', '.join(LOCATION)}, got {kind!r}; "
                                                             f"{listing(choices)}")]
    of_kind = [c for c in choices if c.kind == kind]
    if not of_kind:
        return None, [ConfigError("checkpoint_storage.type", f"the cluster offers no {kind} storage; "
                                                             f"{listing(choices)}")]
    key = LOCATION[kind]
    at = [c for c in of_kind if _same_place(kind, c.location, given.get(key))]
    if not at:
        return None, [ConfigError(f"checkpoint_storage.{key}", f"{given.get(key)!r} is not one of the admin's "
                                                               f"storage places; {listing(choices)}")]
    # several choices at one location (their own sub-paths): the deepest that holds the block's sub-path
    sub = "/".join(_parts(given.get(SUB_PATH.get(kind, ""))))
    holding = [c for c in at if not c.sub_path or sub == c.sub_path or sub.startswith(c.sub_path + "/")]
    return max(holding or at, key=lambda c: len(c.sub_path)), []


def _same_place(kind: str, location: str, given: Any) -> bool:
    """A path compares as a path (``/srv/ckpts/`` is ``/srv/ckpts``), a bucket as its name."""
    if kind in ("shared_fs", "directory") and isinstance(given, str):
        return posixpath.normpath(given) == posixpath.normpath(location)
    return bool(given == location)


def _sub_path(value: Any, choice: StorageChoice) -> tuple[str | None, str]:
    """(the normalized sub-path, "") or (None, why it is refused)."""
    base = choice.sub_path
    inside = f"inside the {SUB_PATH[choice.kind]} of storage choice {choice.name!r} ({base!r})" if base \
        else "inside its location"
    if not isinstance(value, str):
        return None, f"must be a relative path {inside}, got {value!r}"
    if value.startswith("/") or value.startswith("\\"):
        return None, f"must be a relative path {inside}, not an absolute one ({value!r})"
    parts = _parts(value)
    if base and parts[:len(_parts(base))] != _parts(base):
        return None, f"{value!r} is not {inside}: it must be {base!r} or a path below it"
    for part in parts[len(_parts(base)):]:
        if part in (".", "..") or part.startswith("."):
            return None, f"{value!r}: a part may not be '.' or '..' or start with '.' ({part!r})"
        if UUID_LIKE.match(part):
            return None, f"{value!r}: part {part!r} is shaped like a checkpoint uuid (hex and dashes), which " \
                         "could name another checkpoint's directory; use a name with other letters"
        if part == PAI_OUTPUTS_DIR:
            return None, f"{value!r}: {PAI_OUTPUTS_DIR!r} is where OpenPAI jobs' outputs are kept"
        if "\\" in part or "\x00" in part:
            return None, f"{value!r}: a part may not hold a backslash or NUL"
    return "/".join(parts), ""
