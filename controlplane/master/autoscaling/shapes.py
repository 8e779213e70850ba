"""A pool's instance types (the planner's `Shape`s) from its `provider:` block.

Two forms. Determined's: one `instance_type` (aws) / `machine_type` (gcp) (or a list of
alternatives) with `slots_per_instance`: every type has that many slots, its GPU model and
prices from the catalogue. The mixed form: `instance_types` (aws) / `machine_types` (gcp), a
list whose items are a type name (slots and GPU model from `controlplane/autoscaler/catalog.py`)
or `{type: g5.xlarge, slots: 1, gpu_model: A10G}`. Either way `prices:` overrides the catalogue's
prices: `{g5.xlarge: 1.006}` (on demand) or `{g5.xlarge: {on_demand: 1.006, spot: 0.35}}`.
Every mistake of the block is reported at once, each naming its field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controlplane.autoscaler import Shape
from controlplane.autoscaler.catalog import lookup
from controlplane.config import fields as f
from controlplane.config.errors import ConfigError, raise_all

SINGLE_KEYS = ("instance_type", "machine_type")  # Determined's: one type (or alternatives) + slots_per_instance
MIXED_KEYS = ("instance_types", "machine_types")
ITEM_FIELDS = {"type", "slots", "gpu_model"}
PRICE_FIELDS = {"on_demand", "spot"}
DEFAULT_TYPE = "default"


def mixed_key(provider: Mapping[str, Any]) -> str | None:
    """The mixed form's key the block uses (None: Determined's single form)."""
    return next((k for k in MIXED_KEYS if provider.get(k) is not None), None)


def _price(value: Any, path: str, errors: list[ConfigError]) -> tuple[float | None, float | None]:
    """(on demand, spot) from a number (on demand) or {on_demand, spot}; None where not given."""
    def number(v: Any, p: str) -> float | None:
        try:
            out = f.number(v, p)
        except ConfigError as e:
            errors.append(e)
            return None
        if out < 0:
            errors.append(ConfigError(p, f"must be >= 0 (USD per hour), got {out}"))
            return None
        return float(out)

    if isinstance(value, Mapping):
        for key in value:
            if key not in PRICE_FIELDS:
                errors.append(ConfigError(f"{path}.{key}", "unknown field (allowed: on_demand, spot)"))
        return (number(value["on_demand"], f"{path}.on_demand") if "on_demand" in value else None,
                number(value["spot"], f"{path}.spot") if "spot" in value else None)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        errors.append(ConfigError(path, "must be USD per hour on demand, or {on_demand: N, spot: N}, "
                                        f"got {value!r}"))
        return None, None
    return number(value, path), None


def _prices(raw: Any, path: str, errors: list[ConfigError]) -> dict[str, tuple[float | None, float | None]]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        errors.append(ConfigError(path, f"must be a mapping of instance type to price, got {type(raw).__name__}"))
        return {}
    return {str(t): _price(v, f"{path}.{t}", errors) for t, v in raw.items()}


def _priced(shape: Shape, price: tuple[float | None, float | None] | None) -> Shape:
    if price is None:
        return shape
    on_demand, spot = price
    return Shape(shape.instance_type, shape.slots,
                 shape.usd_per_hour if on_demand is None else on_demand,
                 shape.spot_usd_per_hour if spot is None else spot, shape.gpu_model)


def _mixed(provider: Mapping[str, Any], key: str, path: str, errors: list[ConfigError]) -> list[Shape]:
    raw = provider.get(key)
    if not isinstance(raw, list) or not raw:
        errors.append(ConfigError(f"{path}.{key}", "must be a non-empty list of instance types "
                                                    "(a name, or {type: NAME, slots: N, gpu_model: MODEL})"))
        return []
    if provider.get("slots_per_instance") is not None:
        errors.append(ConfigError(f"{path}.slots_per_instance",
                                  f"not with {key}: each type's slots come from its item or the catalogue"))
    out: list[Shape] = []
    for i, item in enumerate(raw):
        where = f"{path}.{key}[{i}]"
        name: Any
        slots: Any
        gpu: Any
        if isinstance(item, str):
            name, slots, gpu = item, None, None
        elif isinstance(item, Mapping):
            for k in item:
                if k not in ITEM_FIELDS:
                    errors.append(ConfigError(f"{where}.{k}", "unknown field (allowed: type, slots, gpu_model)"))
            name, slots, gpu = item.get("type"), item.get("slots"), item.get("gpu_model")
            if slots is not None:
                try:
                    slots = f.integer(slots, f"{where}.slots", minimum=1)
                except ConfigError as e:
                    errors.append(e)
                    continue
            if gpu is not None and not isinstance(gpu, str):
                errors.append(ConfigError(f"{where}.gpu_model", f"must be a string, got {gpu!r}"))
                gpu = None
        else:
            errors.append(ConfigError(where, f"must be a type name or {{type, slots, gpu_model}}, got {item!r}"))
            continue
        if not isinstance(name, str) or not name:
            errors.append(ConfigError(f"{where}.type" if isinstance(item, Mapping) else where,
                                      "must name an instance type"))
            continue
        if any(s.instance_type == name for s in out):
            errors.append(ConfigError(where, f"{name!r} is listed twice"))
            continue
        known = lookup(name)
        if slots is None and known is None:
            errors.append(ConfigError(where, f"unknown instance type {name!r}: not in the built-in catalogue, "
                                             f"so give its slots ({{type: {name}, slots: N}})"))
            continue
        shape = known.shape(slots) if known is not None else Shape(name, int(slots or 1))
        if gpu is not None:
            shape = Shape(shape.instance_type, shape.slots, shape.usd_per_hour, shape.spot_usd_per_hour, gpu)
        out.append(shape)
    return out


def _single(provider: Mapping[str, Any], path: str, errors: list[ConfigError]) -> list[Shape]:
    key = next((k for k in SINGLE_KEYS if provider.get(k)), None)
    raw = provider.get(key) if key else DEFAULT_TYPE
    names = [raw] if isinstance(raw, str) else raw
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
        errors.append(ConfigError(f"{path}.{key}", f"must be an instance type name (or a list of them), got {raw!r}"))
        return []
    try:
        given = provider.get("slots_per_instance")
        slots = f.integer(1 if given is None else given, f"{path}.slots_per_instance", minimum=1)
    except ConfigError as e:
        errors.append(e)
        return []
    out = []
    for name in dict.fromkeys(names):
        known = lookup(name)
        out.append(known.shape(slots) if known is not None else Shape(name, slots))
    return out


def _listed(raw: Any) -> list[str]:
    """The names a mixed list gives, readable or not (so a price never blames a type that is listed)."""
    items = raw if isinstance(raw, list) else []
    return [str(i.get("type")) if isinstance(i, Mapping) else str(i) for i in items]


def shapes_of(provider: Mapping[str, Any], path: str, errors: list[ConfigError]) -> tuple[Shape, ...]:
    """The pool's shapes, priced; each mistake is appended to ``errors`` (the caller raises them)."""
    key = mixed_key(provider)
    if key is not None:
        for other in (*SINGLE_KEYS, *MIXED_KEYS):
            if other != key and provider.get(other) is not None:
                errors.append(ConfigError(f"{path}.{other}", f"give either {key} or {other}, not both"))
        shapes = _mixed(provider, key, path, errors)
    else:
        shapes = _single(provider, path, errors)
    prices = _prices(provider.get("prices"), f"{path}.prices", errors)
    listed = _listed(provider.get(key)) if key else [s.instance_type for s in shapes]
    for name in prices:
        if listed and name not in listed:
            errors.append(ConfigError(f"{path}.prices.{name}",
                                      f"not one of this pool's instance types ({', '.join(dict.fromkeys(listed))})"))
    return tuple(_priced(s, prices.get(s.instance_type)) for s in shapes)


def type_names(provider: Mapping[str, Any], path: str) -> list[str]:
    """The types a provisioner may be asked to launch, in the config's order (raises the block's mistakes)."""
    errors: list[ConfigError] = []
    shapes = shapes_of(provider, path, errors)
    raise_all(errors)
    return [s.instance_type for s in shapes]
