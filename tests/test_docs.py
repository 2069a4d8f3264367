"""Every field of the input and output schemas explains itself (it feeds --help, `rlsolve
schema` and editors' completion)."""
from __future__ import annotations

from pydantic import BaseModel

from rlsolve.plan import Plan
from rlsolve.spec import Spec


def _undocumented(model: type[BaseModel], seen: set, out: list[str]) -> list[str]:
    if model in seen:
        return out
    seen.add(model)
    for name, field in model.model_fields.items():
        if not field.description:
            out.append(f"{model.__name__}.{name}")
        ann = field.annotation
        for t in (*getattr(ann, "__args__", ()), ann):
            if isinstance(t, type) and issubclass(t, BaseModel):
                _undocumented(t, seen, out)
    return out


def test_every_spec_field_has_a_description():
    assert _undocumented(Spec, set(), []) == []


def test_every_plan_field_has_a_description():
    assert _undocumented(Plan, set(), []) == []
