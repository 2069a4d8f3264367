"""The model catalog (catalog.yaml) and the resolver that turns a spec's model value into an
`Architecture`: a catalog name or HF id, an inline shape, or `{params_b: N}`."""
from __future__ import annotations

import math
from functools import lru_cache
from importlib import resources
from typing import Any

from pydantic import ValidationError

from rlsolve.errors import SpecError, did_you_mean
from rlsolve.models.arch import Architecture
from rlsolve.reader import parse_yaml

_REQUIRED = ("layers", "hidden", "heads")
_NAME_ONLY_KEYS = {"name", "params_b"}


@lru_cache(maxsize=None)
def _catalog() -> tuple[Architecture, ...]:
    text = resources.files("rlsolve.models").joinpath("catalog.yaml").read_text(encoding="utf-8")
    entries = parse_yaml(text, "catalog.yaml", "model catalog")["models"]
    models = []
    for entry in entries:
        try:
            models.append(Architecture.model_validate(entry))
        except ValidationError as e:  # a packaging bug, not user input: say which entry
            raise ValueError(f"catalog.yaml entry {entry.get('name')!r} is invalid: {e}") from e
    return tuple(models)


@lru_cache(maxsize=None)
def _index() -> dict[str, Architecture]:
    """Lowercased id, alias and HF id -> entry. A key claimed twice is a catalog bug."""
    index: dict[str, Architecture] = {}
    for m in _catalog():
        for key in (m.name, m.hf_id, *m.aliases):
            if not key:
                continue
            other = index.setdefault(key.lower(), m)
            if other is not m:
                raise ValueError(f"catalog.yaml: {key!r} names both {other.name} and {m.name}")
    return index


def list_models() -> list[Architecture]:
    """All catalog entries, in file order."""
    return list(_catalog())


def find_model(name: str, field: str = "model.policy") -> Architecture:
    """Catalog entry by id, alias or Hugging Face id (case-insensitive)."""
    found = _index().get(str(name).strip().lower())
    if found is None:
        hint = did_you_mean(str(name), [m.name for m in _catalog()])
        raise SpecError(f"unknown model {name!r}; {hint} (see `rlsolve models`)", field=field)
    return found


def resolve_model(value: Any, field: str = "model.policy") -> Architecture:
    """Turn a spec's model value into an Architecture.

    - ``"llama-3.1-70b"`` / ``"meta-llama/Llama-3.1-70B"``: catalog lookup.
    - ``{name: ...}`` alone: catalog lookup.
    - ``{params_b: N}`` (optionally with ``name``): a generic dense shape, see `generic_dense`.
    - any other dict: an inline Architecture; it must give layers, hidden and heads, other
      fields take arch.py's defaults. A ``name`` next to shape fields is only a label.
    """
    if isinstance(value, Architecture):
        return value
    if isinstance(value, str):
        return find_model(value, field)
    if not isinstance(value, dict):
        raise SpecError(f"expected a catalog name, an inline architecture or {{params_b: N}}, "
                        f"got {type(value).__name__}", field=field)
    keys = set(value)
    if keys == {"name"}:
        return find_model(value["name"], field)
    if "params_b" in keys and keys <= _NAME_ONLY_KEYS:
        return generic_dense(value["params_b"], name=value.get("name"), field=field)
    missing = [k for k in _REQUIRED if k not in value]
    if missing:
        raise SpecError("an inline architecture needs layers, hidden and heads; missing "
                        f"{', '.join(missing)} (or give a catalog name, or {{params_b: N}})",
                        field=f"{field}.{missing[0]}")
    try:
        arch = Architecture.model_validate(value, strict=True)  # as the spec: true is not 1
    except ValidationError as e:
        raise _spec_error(e, field) from None
    if "activation" not in value:
        arch = _infer_activation(arch)
    return arch


def _infer_activation(arch: Architecture) -> Architecture:
    """An inline shape without `activation`: the MLP type whose parameter count matches the
    stated size (a GPT 12h^2 layer and a swiglu 16h^2 layer at ffn = 4h differ by a third);
    without a stated size, ffn = 4*hidden is the GPT convention (gelu)."""
    if arch.ffn is None:
        return arch
    # validated afresh, not model_copy: a copy would carry the cached parameter counts
    options = [arch, Architecture.model_validate({**arch.model_dump(exclude_defaults=True), "activation": "gelu"})]
    if arch.params_b:
        return min(options, key=lambda a: abs(a.total_params / 1e9 - arch.params_b))
    return options[1] if arch.ffn == 4 * arch.hidden else arch


def _spec_error(e: ValidationError, field: str) -> SpecError:
    """First pydantic error as a SpecError on `field.<subfield>`, with what to do about it."""
    err = e.errors()[0]
    loc = ".".join(str(p) for p in err["loc"])
    where = f"{field}.{loc}" if loc else field
    if err["type"] == "extra_forbidden":
        allowed = ", ".join(Architecture.model_fields)
        return SpecError(f"unknown architecture field; allowed fields: {allowed}", field=where)
    msg = err["msg"].removeprefix("Value error, ")
    return SpecError(f"{msg} (got {err.get('input')!r})" if loc else msg, field=where)


# Generic dense shape for {params_b: N} ------------------------------------------------------
_ASPECT = 128  # hidden / layers
_HEAD_DIM = 128
_VOCAB = 128256  # Llama 3 tokenizer
_MAX_HIDDEN = 128 * 1024
_TOL = 0.02  # shapes this close to N compete on aspect ratio; near 30 layers one layer is ~3%


def _llama3_ffn(hidden: int) -> int:
    """Llama 3's SwiGLU width: 8/3*hidden * ffn_dim_multiplier 1.3, rounded up to 1024
    (gives 14336 for 4096 and 28672 for 8192, as in the released configs)."""
    return 1024 * math.ceil(1.3 * int(8 * hidden / 3) / 1024)


_MAX_LAYERS = 10_000


def generic_dense(params_b: Any, name: str | None = None,
                  field: str = "model.policy") -> Architecture:
    """A dense Llama-3-like SwiGLU decoder with about `params_b` billion parameters.

    Rule: head_dim 128 (heads = hidden/128, kv_heads = heads/8 once heads >= 8, so hidden
    is a multiple of 1024 from there on), vocab 128256, untied embeddings, FFN by the
    Llama 3 rule, and depth-to-width aspect ratio hidden/layers ~ 128. That ratio is what
    GPT-3 uses across its family (Brown et al. 2020, Table 2.1: 175B is 96 x 12288) and
    what Llama 3 uses (Dubey et al. 2024, Table 3: 8B 32 x 4096, 405B 126 x 16384);
    Kaplan et al. 2020 (Fig. 5) found loss within a few percent over ratios of ~20-200,
    so a planner can pick the shape freely near it. For each admissible hidden, layers is
    the count that best hits N; among shapes within 2% of N the one whose ratio is closest
    to 128 (in log terms) wins, else the closest total (rejected beyond 3%).
    """
    try:
        target = float(params_b) * 1e9
    except (TypeError, ValueError):
        target = float("nan")
    if not target > 0 or math.isinf(target):
        raise SpecError(f"params_b must be a positive number of billions, got {params_b!r}",
                        field=f"{field}.params_b")

    def shape(hidden: int, layers: int) -> Architecture:
        heads = hidden // _HEAD_DIM
        return Architecture(
            name=name or f"dense-{float(params_b):g}b", layers=layers, hidden=hidden,
            heads=heads, kv_heads=heads // 8 if heads >= 8 else heads, head_dim=_HEAD_DIM,
            ffn=_llama3_ffn(hidden), vocab=_VOCAB, params_b=float(params_b),
            source=f"generic dense Llama-3-like shape for params_b={float(params_b):g} "
                   "(hidden/layers ~ 128, GPT-3 / Llama 3)")

    best = None  # (error > _TOL, log aspect distance or error, arch)
    for hidden in range(_HEAD_DIM, _MAX_HIDDEN + 1, _HEAD_DIM):
        if hidden >= 8 * _HEAD_DIM and hidden % (8 * _HEAD_DIM):
            continue
        one, two = shape(hidden, 1), shape(hidden, 2)
        per_layer = two.total_params - one.total_params
        layers = max(1, round((target - (one.total_params - per_layer)) / per_layer))
        if layers > _MAX_LAYERS:  # too narrow for this size: the schema caps depth
            continue
        arch = shape(hidden, layers)
        err = abs(arch.total_params / target - 1)
        key = (err > _TOL, abs(math.log(hidden / layers / _ASPECT)) if err <= _TOL else err)
        if best is None or key < best[:2]:
            best = (*key, arch)
        if layers == 1 and one.total_params > target:  # wider only grows the total
            break
    if best is None:
        raise SpecError(f"no generic dense shape has {params_b}B parameters; give an inline architecture instead",
                        field=f"{field}.params_b")
    arch = best[2]
    if abs(arch.total_params / target - 1) > 0.03:
        raise SpecError(f"no generic dense shape comes within 3% of {params_b}B (closest "
                        f"{arch.total_params / 1e9:.3g}B); give an inline architecture instead",
                        field=f"{field}.params_b")
    return arch
