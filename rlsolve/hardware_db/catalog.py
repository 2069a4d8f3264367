"""Loading and looking up the hardware catalog (see the package docstring)."""
from __future__ import annotations

import os
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from rlsolve.errors import SpecError, did_you_mean
from rlsolve.reader import parse_yaml, read_text
from rlsolve.hardware_db.schema import GPU, Catalog, Efficiency, Network, Sourced

__all__ = [
    "GPU", "Network", "Efficiency", "Sourced", "Catalog", "OVERLAY_ENV",
    "load_catalog", "find_gpu", "find_network", "inline_network", "list_gpus", "list_networks",
]

OVERLAY_ENV = "RLSOLVE_CATALOG_DIR"
_BUILTIN_FILES = ("gpus.yaml", "networks.yaml")
_SECTIONS: dict[str, type[BaseModel]] = {"gpus": GPU, "networks": Network}
# Inline networks borrow their efficiency and latency from this entry.
_REFERENCE_NETWORK = "IB-NDR-400"

_M = TypeVar("_M", GPU, Network)


def _error(message: str, user: bool) -> ValueError:
    """Overlay files are user input (SpecError, exit code 2); a bad built-in file is a bug."""
    return SpecError(message, field=OVERLAY_ENV) if user else ValueError(message)


def _merge(text: str, origin: str, into: dict[str, dict[str, Any]], user: bool) -> None:
    """Validate one YAML document and add its entries, replacing same-named ones."""
    try:
        data = parse_yaml(text, origin, OVERLAY_ENV if user else "hardware catalog") or {}
    except SpecError as e:
        raise _error(f"{origin} is not valid YAML: {e}", user) from None
    unknown = set(data) - set(_SECTIONS) if isinstance(data, dict) else {"<not a mapping>"}
    if unknown:
        raise _error(f"{origin}: expected top-level keys {sorted(_SECTIONS)}, "
                     f"got {sorted(map(str, unknown))}", user)
    for section, model in _SECTIONS.items():
        for entry in data.get(section) or []:
            try:
                item = model.model_validate(entry)
            except ValidationError as e:
                name = entry.get("name") if isinstance(entry, dict) else entry
                raise _error(f"{origin}: {section} entry {name!r} is invalid: {e}", user) from e
            into[section][item.name.lower()] = item


def _overlay_files() -> list[Path]:
    directory = os.environ.get(OVERLAY_ENV)
    if not directory:
        return []
    path = Path(directory).expanduser()
    if not path.is_dir():
        raise SpecError(f"{directory!r} is not a directory", field=OVERLAY_ENV)
    # Sorted, so when two overlay files define one name the later file name wins predictably.
    return sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())


@lru_cache(maxsize=None)
def load_catalog() -> Catalog:
    """Built-in catalog plus the $RLSOLVE_CATALOG_DIR overlay, validated. Cached: call
    `load_catalog.cache_clear()` after changing the environment variable or the files."""
    merged: dict[str, dict[str, Any]] = {section: {} for section in _SECTIONS}
    package = resources.files(__package__)  # the package directory, where the YAML files are
    for name in _BUILTIN_FILES:
        _merge(package.joinpath(name).read_text(encoding="utf-8"), name, merged, user=False)
    overlays = _overlay_files()
    for path in overlays:
        _merge(read_text(path, OVERLAY_ENV), str(path), merged, user=True)
    catalog = Catalog(gpus=list(merged["gpus"].values()), networks=list(merged["networks"].values()))
    for items in (catalog.gpus, catalog.networks):
        try:  # fail at load, not at first lookup, if two entries claim one name
            _index(items)
        except ValueError as e:
            raise _error(str(e), user=bool(overlays)) from None
    return catalog


def _index(items: list[_M]) -> dict[str, _M]:
    """Lowercased name and aliases -> entry. A key claimed by two entries is ambiguous."""
    index: dict[str, _M] = {}
    for item in items:
        for key in (item.name, *item.aliases):
            other = index.setdefault(key.lower(), item)
            if other is not item:
                raise ValueError(f"catalog: {key!r} names both {other.name} and {item.name}")
    return index


def _find(items: list[_M], name: str, kind: str, field: str, hint: str) -> _M:
    found = _index(items).get(str(name).strip().lower())
    if found is None:
        suggestion = did_you_mean(str(name), [item.name for item in items])
        raise SpecError(f"unknown {kind} {name!r}; {suggestion} (see `{hint}`)", field=field)
    return found


def find_gpu(name: str, field: str = "cluster.gpu") -> GPU:
    """Catalog GPU by name or alias, case-insensitive."""
    return _find(load_catalog().gpus, name, "GPU", field, "rlsolve gpus")


def find_network(name: str, field: str = "cluster.network") -> Network:
    """Catalog network by name or alias, case-insensitive."""
    return _find(load_catalog().networks, name, "network", field, "rlsolve gpus --networks")


def inline_network(gbps: float, latency_us: float | None = None) -> Network:
    """A network given only by its line rate. Efficiency (and latency, unless given) come from
    the catalog's IB-NDR-400 entry: NCCL's per-NIC efficiency is protocol-bound, not rate-bound."""
    if not gbps > 0 or (latency_us is not None and not latency_us > 0):
        raise SpecError(f"an inline network needs gbps > 0 and latency_us > 0, got gbps={gbps!r}, "
                        f"latency_us={latency_us!r}", field="cluster.network")
    ref = find_network(_REFERENCE_NETWORK)
    return Network(
        name=f"custom-{gbps:g}G",
        gbps_per_nic=gbps,
        latency_us=ref.latency_us if latency_us is None else latency_us,
        busbw_fraction=Sourced(value=ref.busbw_fraction.value,
                               source=f"copied from {ref.name}: {ref.busbw_fraction.source}"),
        source=f"inline network given as {gbps:g} Gbit/s per NIC; busbw_fraction"
               + ("" if latency_us is not None else " and latency_us")
               + f" copied from catalog entry {ref.name}",
    )


def list_gpus() -> list[GPU]:
    return list(load_catalog().gpus)


def list_networks() -> list[Network]:
    return list(load_catalog().networks)
