"""Model catalog and resolver. Reference figures are recomputed-from-config.json counts in
shared/research/export_and_specs.md section 3."""
import pytest

from rlsolve.errors import SpecError
from rlsolve.models import Architecture, find_model, list_models, resolve_model

# name: (total B, active B)
PUBLISHED = {
    "llama-3.1-8b": (8.03, 8.03),
    "llama-3.1-70b": (70.55, 70.55),
    "llama-3.1-405b": (405.85, 405.85),
    "qwen2.5-0.5b": (0.49, 0.49),
    "qwen2.5-1.5b": (1.54, 1.54),
    "qwen2.5-7b": (7.62, 7.62),
    "qwen2.5-32b": (32.76, 32.76),
    "qwen2.5-72b": (72.71, 72.71),
    "qwen3-8b": (8.19, 8.19),
    "qwen3-32b": (32.76, 32.76),
    "qwen3-30b-a3b": (30.53, 3.35),
    "qwen3-235b-a22b": (235.1, 22.2),
    "deepseek-v2": (235.7, 21.4),
    "deepseek-v3": (671.0, 37.5),
    "mixtral-8x7b": (46.7, 12.9),
    "mixtral-8x22b": (140.6, 39.2),
}

KV_KIB_BF16 = {
    "llama-3.1-8b": 128, "llama-3.1-70b": 320, "qwen3-32b": 256,
    "qwen3-30b-a3b": 96, "deepseek-v2": 67.5, "deepseek-v3": 68.625,
}

REQUIRED_IDS = """llama-3.1-8b llama-3.1-70b llama-3.1-405b llama-2-7b llama-2-70b llama-3-8b
llama-3.3-70b qwen2.5-0.5b qwen2.5-1.5b qwen2.5-3b qwen2.5-7b qwen2.5-14b qwen2.5-32b qwen2.5-72b
qwen3-8b qwen3-32b qwen3-30b-a3b qwen3-235b-a22b deepseek-v2 deepseek-v3 mixtral-8x7b
mixtral-8x22b gpt3-175b deepseek-r1-distill-qwen-1.5b gpt-oss-120b gpt-oss-20b""".split()


def test_catalog_entries_valid_and_sourced():
    models = list_models()
    names = [m.name for m in models]
    assert sorted(names) == sorted(REQUIRED_IDS)
    for m in models:
        assert isinstance(m, Architecture)
        assert m.name == m.name.lower()
        assert m.source and m.source != "inline", m.name
        assert m.params_b, m.name
        # headline size is informational but should not be far from the shape's count
        assert abs(m.total_params / 1e9 / m.params_b - 1) < 0.2, m.name


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_counts(name):
    total, active = PUBLISHED[name]
    m = find_model(name)
    assert m.total_params / 1e9 == pytest.approx(total, rel=0.01)
    assert m.active_params / 1e9 == pytest.approx(active, rel=0.01)


@pytest.mark.parametrize("name", sorted(KV_KIB_BF16))
def test_kv_bytes_per_token(name):
    assert find_model(name).kv_bytes_per_token(2) / 1024 == pytest.approx(KV_KIB_BF16[name])


def test_qwen3_head_dim_is_not_hidden_over_heads():
    m = find_model("qwen3-32b")
    assert m.d_head == 128 and m.hidden // m.heads == 80
    assert m.q_width == 64 * 128
    a3b = find_model("qwen3-30b-a3b")
    assert a3b.d_head == 128 and a3b.moe_layers == 48 and a3b.d_moe_ffn == 768


def test_deepseek_shapes():
    v3 = find_model("deepseek-v3")
    assert v3.is_mla and v3.moe_layers == 58
    assert find_model("deepseek-v2").moe_layers == 59


def test_lookup_by_hf_id_alias_and_case():
    assert find_model("meta-llama/Llama-3.1-70B").name == "llama-3.1-70b"
    assert find_model("META-LLAMA/llama-3.1-70b-instruct").name == "llama-3.1-70b"
    assert find_model("Qwen2.5-7B").name == "qwen2.5-7b"
    assert find_model(" Llama-3.1-8B ").name == "llama-3.1-8b"
    assert resolve_model("Qwen/Qwen3-30B-A3B").name == "qwen3-30b-a3b"
    assert resolve_model({"name": "DeepSeek-V3"}).name == "deepseek-v3"


def test_unknown_model_suggests_close_id():
    with pytest.raises(SpecError) as e:
        find_model("llama-3.1-7b")
    assert e.value.field == "model.policy"
    assert "'llama-3.1-8b'" in str(e.value) and "rlsolve models" in str(e.value)
    with pytest.raises(SpecError) as e:
        resolve_model("qwen-7b", field="model.reference")
    assert e.value.field == "model.reference"


def test_inline_architecture_defaults():
    m = resolve_model({"layers": 2, "hidden": 512, "heads": 8})
    assert m.name == "inline" and m.n_kv_heads == 8 and m.d_head == 64 and m.vocab == 32000
    named = resolve_model({"name": "llama-3.1-8b", "layers": 2, "hidden": 512, "heads": 8})
    assert named.layers == 2 and named.name == "llama-3.1-8b"  # shape wins, name is a label


def test_inline_missing_hidden_names_the_field():
    with pytest.raises(SpecError) as e:
        resolve_model({"layers": 32, "heads": 32})
    assert e.value.field == "model.policy.hidden"
    assert "layers, hidden and heads" in str(e.value)


def test_inline_validation_errors_become_spec_errors():
    with pytest.raises(SpecError) as e:
        resolve_model({"layers": 2, "hidden": 512, "heads": 8, "hiden_act": "silu"})
    assert e.value.field == "model.policy.hiden_act" and "allowed fields" in str(e.value)
    with pytest.raises(SpecError) as e:
        resolve_model({"layers": 0, "hidden": 512, "heads": 8})
    assert e.value.field == "model.policy.layers"
    with pytest.raises(SpecError) as e:
        resolve_model({"layers": 2, "hidden": 512, "heads": 8, "kv_heads": 3})
    assert "multiple of kv_heads" in str(e.value)


def test_inline_moe_needs_experts_per_token():
    with pytest.raises(SpecError) as e:
        resolve_model({"layers": 4, "hidden": 1024, "heads": 8, "experts": 8, "moe_ffn": 512})
    assert "experts_per_token" in str(e.value)


def test_inline_shapes_that_would_break_the_arithmetic_are_rejected():
    with pytest.raises(SpecError, match="dense_layers"):
        resolve_model({"layers": 4, "hidden": 1024, "heads": 8, "experts": 8,
                       "experts_per_token": 2, "dense_layers": 5})
    with pytest.raises(SpecError, match="v_head_dim"):
        resolve_model({"layers": 4, "hidden": 1024, "heads": 8, "kv_lora_rank": 512})


@pytest.mark.parametrize("n", [0.5, 1, 3, 7, 8, 13, 34, 70, 175, 405, 1000])
def test_generic_dense_from_params_b(n):
    m = resolve_model({"params_b": n})
    assert m.total_params / 1e9 == pytest.approx(n, rel=0.03)
    assert m.hidden % 128 == 0 and m.d_head == 128 and m.vocab == 128256
    assert not m.is_moe and m.activation == "swiglu"
    if m.heads >= 8:
        assert m.n_kv_heads * 8 == m.heads
    if n >= 7:  # the aspect-ratio rule; small sizes are dominated by the embedding
        assert 64 <= m.hidden / m.layers <= 256


def test_generic_dense_name_and_bad_size():
    assert resolve_model({"params_b": 70, "name": "my-70b"}).name == "my-70b"
    with pytest.raises(SpecError) as e:
        resolve_model({"params_b": -1})
    assert e.value.field == "model.policy.params_b"


def test_non_dict_value_rejected():
    with pytest.raises(SpecError):
        resolve_model(42)


def test_inline_shape_without_activation_takes_the_one_its_stated_size_implies():
    """GPT shapes (ffn = 4h, gelu) are often given without `activation`; the default
    swiglu would add a third MLP matrix. The stated size decides; without one, ffn = 4h."""
    gpt = {"layers": 48, "hidden": 6144, "heads": 64, "ffn": 24576, "vocab": 51200}
    assert resolve_model({**gpt, "params_b": 22}).activation == "gelu"
    assert resolve_model(gpt).activation == "gelu"
    llama = {"layers": 32, "hidden": 4096, "heads": 32, "ffn": 11008, "vocab": 32000}
    assert resolve_model({**llama, "params_b": 6.7}).activation == "swiglu"
    assert resolve_model(llama).activation == "swiglu"
    assert resolve_model({**gpt, "activation": "swiglu"}).activation == "swiglu"  # stated wins
