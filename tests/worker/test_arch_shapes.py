"""Every fttui.core.models.archs entry builds as a native transformers model whose parameter count is
exactly param_count() and within 2% of the published count (meta device: no memory, no download)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from fttui.core.models.archs import ARCHS, param_count  # noqa: E402


def _meta_model(model_type: str, config: dict):
    cfg = transformers.AutoConfig.for_model(model_type, **config)
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(cfg)


@pytest.mark.parametrize("name", sorted(ARCHS))
def test_arch_builds_with_param_count(name):
    arch = ARCHS[name]
    model = _meta_model(arch.model_type, arch.config_dict())
    assert model.config.model_type == arch.model_type
    counted = sum(p.numel() for p in model.parameters())  # unique tensors: tied weights once
    assert counted == param_count(arch), name
    published = param_count(arch, count_tied_twice=arch.published_counts_tied_twice)
    assert abs(published / 1e9 - arch.params_b) / arch.params_b < 0.02
    cfg = model.config
    assert cfg.vocab_size == arch.config["vocab_size"]
    assert bool(cfg.tie_word_embeddings) is bool(arch.config.get("tie_word_embeddings",
                                                                 arch.model_type == "bloom"))


def test_shapes_of_the_mappings():
    glm = _meta_model("qwen2", ARCHS["chatglm3-6b"].config_dict())
    attn = glm.model.layers[0].self_attn
    # ChatGLM3 query_key_value: 4096 -> 4608 (32 query heads + 2 x 2 key/value heads of 128) + bias
    qkv_out = attn.q_proj.out_features + attn.k_proj.out_features + attn.v_proj.out_features
    assert qkv_out == 4608 and attn.q_proj.bias is not None and attn.o_proj.bias is None
    assert glm.model.layers[0].mlp.gate_proj.out_features == 13696  # dense_h_to_4h = 2 x 13696
    qwen = _meta_model("qwen2", ARCHS["qwen-7b"].config_dict())
    attn = qwen.model.layers[0].self_attn
    assert attn.k_proj.out_features == 4096 and attn.k_proj.bias is not None  # c_attn 4096 -> 12288
    assert qwen.model.layers[0].mlp.up_proj.out_features == 22016 // 2  # w1/w2
    bai = _meta_model("llama", ARCHS["baichuan2-7b"].config_dict())
    assert tuple(bai.lm_head.weight.shape) == (125696, 4096)  # NormHead: same shape
    assert bai.model.layers[0].self_attn.q_proj.bias is None  # W_pack has no bias
    bloom = _meta_model("bloom", ARCHS["bloom-2b6"].config_dict())
    assert tuple(bloom.transformer.word_embeddings.weight.shape) == (46145, 2560)
    assert bloom.lm_head.weight is bloom.transformer.word_embeddings.weight
