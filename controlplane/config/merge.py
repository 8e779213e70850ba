"""A template under an experiment config: Determined's merge rule (``master/pkg/schemas/merge.go``).

``merge_template(config, template)`` returns a new config, neither input changed:

- the config wins: every value it sets is kept, whatever the template says;
- a key the config leaves out, or sets to null (Go's nil), comes from the template;
- mappings merge key by key, at any depth;
- lists are not merged: the config's list (even ``[]``) replaces the template's. Determined's two
  mergeable lists are the exception: ``bind_mounts`` and ``resources.devices`` keep the config's
  entries and add the template's whose ``container_path`` the config does not use;
- unions (``checkpoint_storage`` by ``type``, ``searcher`` by ``name``, each hyperparameter by
  ``type``): when the two name different members, the config's member is kept whole and only the
  fields every member shares (``save_*``; ``metric``, ``smaller_is_better``, ``source_*``) come
  from the template;
- ``environment.image`` and ``environment.environment_variables`` may be one value for every
  device type or a ``{cpu, cuda, rocm}`` mapping; when the two use different forms, the single
  value stands for all three before they merge, as Determined reads them.

Both inputs are bounded in size and depth before they get here (``limits.check_plain``).
"""

from __future__ import annotations

from typing import Any

# (path of the union, its discriminator, the fields that are not a member's own)
UNIONS: dict[tuple[str, ...], tuple[str, frozenset[str]]] = {
    ("checkpoint_storage",): ("type", frozenset({"save_experiment_best", "save_trial_best", "save_trial_latest"})),
    ("searcher",): ("name", frozenset({"metric", "smaller_is_better", "source_trial_id", "source_checkpoint_uuid"})),
    ("hyperparameters", "*"): ("type", frozenset()),
}
MOUNT_LISTS = {("bind_mounts",), ("resources", "devices")}
PER_DEVICE = {("environment", "image"), ("environment", "environment_variables")}
DEVICE_TYPES = ("cpu", "cuda", "rocm")


def merge_template(config: dict[str, Any], template: dict[str, Any]) -> dict[str, Any]:
    """The experiment config with the template merged under it."""
    return _merge_maps(config, template, ())


def _matches(path: tuple[str, ...], patterns: Any) -> bool:
    return any(len(p) == len(path) and all(a in ("*", b) for a, b in zip(p, path, strict=True)) for p in patterns)


def _merge(obj: Any, src: Any, path: tuple[str, ...]) -> Any:
    if obj is None:
        return _copy(src)
    if src is None:
        return _copy(obj)
    if _matches(path, PER_DEVICE) and isinstance(obj, dict) != isinstance(src, dict):
        obj, src = _per_device(obj), _per_device(src)
    if isinstance(obj, dict) and isinstance(src, dict):
        return _merge_maps(obj, src, path)
    if isinstance(obj, list) and isinstance(src, list) and _matches(path, MOUNT_LISTS):
        used = {m.get("container_path") for m in obj if isinstance(m, dict)}
        return _copy(obj) + [_copy(m) for m in src if not (isinstance(m, dict) and m.get("container_path") in used)]
    return _copy(obj)  # scalars, lists, and values of different kinds: the config's


def _merge_maps(obj: dict[str, Any], src: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    union = next((u for p, u in UNIONS.items() if _matches(path, [p])), None)
    if union is not None:
        key, shared = union
        if obj.get(key) is not None and src.get(key) is not None and obj[key] != src[key]:
            src = {k: v for k, v in src.items() if k in shared}  # another member: only shared fields
    out = {k: _merge(v, src.get(k), (*path, k)) for k, v in obj.items()}
    out.update({k: _copy(v) for k, v in src.items() if k not in obj})
    return out


def _per_device(value: Any) -> Any:
    return value if isinstance(value, dict) else {device: _copy(value) for device in DEVICE_TYPES}


def _copy(value: Any) -> Any:
    """A deep copy of plain JSON data, so the result shares nothing with the inputs."""
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value
