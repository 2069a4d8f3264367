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


def test_schema_plan_prints_the_versioned_output_schema():
    import json

    from click.testing import CliRunner

    from rlsolve.cli.main import main
    from rlsolve.plan import PLAN_VERSION
    out = json.loads(CliRunner().invoke(main, ["schema", "--plan"]).output)
    assert out["title"] == "Plan" and out["properties"]["plan_version"]["const"] == PLAN_VERSION
    assert "time_s" in out["properties"] and "cluster" not in out["properties"]
    assert "cluster" in json.loads(CliRunner().invoke(main, ["schema"]).output)["properties"]  # the input's


def test_a_plan_starts_with_its_version():
    import rlsolve
    from rlsolve.present import plan_dict
    from rlsolve.service.examples import TINY_SPEC
    data = plan_dict(rlsolve.solve(TINY_SPEC))
    assert next(iter(data)) == "plan_version" and data["plan_version"] == 1
    assert rlsolve.estimate(TINY_SPEC, data).plan_version == 1  # a stored plan is read back
