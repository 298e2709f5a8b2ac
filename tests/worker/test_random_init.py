"""Random init drawn on a device one module at a time (``fttui.worker.model.random_on_host``, what
k-bit methods and DeepSpeed shardings use on a GPU): the same tensors, dtypes, ties and buffers as
the plain host build, with statistics of the same init. Drawn on the CPU here (the GPU path is the
same code with another device; bench/gpu_verify.sh runs it on a card)."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("arch,extra", [("llama", {}), ("qwen2", {"tie_word_embeddings": True})])
def test_random_on_host_matches_the_plain_build(arch, extra):
    import torch
    from transformers import AutoConfig

    from fttui.worker.model import random_on_host

    cfg = AutoConfig.for_model(arch, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=2, vocab_size=512, **extra)
    torch.manual_seed(0)
    ref = random_on_host(cfg, dtype=torch.float16, attn="sdpa", trust=False)
    torch.manual_seed(0)
    got = random_on_host(cfg, dtype=torch.float16, attn="sdpa", trust=False, draw_on=torch.device("cpu"))
    ref_sd, got_sd = ref.state_dict(), got.state_dict()
    assert ref_sd.keys() == got_sd.keys()
    for k, a in ref_sd.items():
        b = got_sd[k]
        assert (b.dtype, b.shape, b.device.type) == (a.dtype, a.shape, "cpu"), k
        assert not b.is_meta and torch.isfinite(b).all(), k
        a, b = a.float(), b.float()
        if a.std() == 0:  # norms (ones), biases (zeros): exactly the same values
            assert torch.equal(a, b), k
        else:  # normal(0, initializer_range): another draw of the same law
            assert abs(b.std().item() - cfg.initializer_range) < 0.1 * cfg.initializer_range, k
            assert abs(b.mean().item()) < 0.1 * cfg.initializer_range, k
    for (name, a), (_, b) in zip(ref.named_buffers(), got.named_buffers()):
        assert torch.equal(a, b), name  # rotary inv_freq and the like are computed, not drawn
    tied = got.lm_head.weight is got.model.embed_tokens.weight
    assert tied == (ref.lm_head.weight is ref.model.embed_tokens.weight) == bool(extra)
    x = torch.randint(0, 512, (2, 16))
    assert torch.isfinite(got.float()(input_ids=x, labels=x).loss)


def test_8bit_lora_checkpoints_reentrant_on_cuda_only():
    """bitsandbytes' 8-bit matmul on CUDA keeps its input outside what non-reentrant
    checkpointing frees, so 8-bit LoRA with checkpointing on a GPU checkpoints reentrant (and DDP
    does not search for unused parameters); every other case stays non-reentrant."""
    from fttui.worker.model import reentrant_checkpointing
    from fttui.worker.trainer import training_args

    from tests.helpers import profile_of

    from .conftest import make_profile

    gc = {"train.gradient_checkpointing": True}
    assert reentrant_checkpointing(profile_of(make_profile(method="lora-int8", **gc)), use_cuda=True)
    assert not reentrant_checkpointing(profile_of(make_profile(method="lora-int8", **gc)), use_cuda=False)
    assert not reentrant_checkpointing(profile_of(make_profile(method="lora-int8")), use_cuda=True)
    assert not reentrant_checkpointing(profile_of(make_profile(method="qlora", **gc)), use_cuda=True)
    args = training_args(profile_of(make_profile(method="lora-int8", **gc)), "/nonexistent-run-dir", world=1,
                         use_cuda=False)
    assert args.ddp_find_unused_parameters is None


def test_arch_list_without_suffixes_for_deepspeed(monkeypatch):
    """DeepSpeed 0.19's op builder cannot read '9.0a' (a fused Adam build failed on an H100 image
    whose TORCH_CUDA_ARCH_LIST had it): the worker rewrites the list without suffixes."""
    import os

    from fttui.worker.limits import plain_arch_list

    logged = []
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0 9.0a;10.0a+PTX")
    assert plain_arch_list(logged.append) == "9.0;10.0+PTX" == os.environ["TORCH_CUDA_ARCH_LIST"]
    assert logged and plain_arch_list(logged.append) is None
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST")
    assert plain_arch_list(logged.append) is None and "TORCH_CUDA_ARCH_LIST" not in os.environ
