"""The QLoRA activations' growth with the sequence length, tensor by tensor (CPU, bitsandbytes 4-bit).

For each setting one CPU step (forward, loss, backward, AdamW step; gradient checkpointing on,
bf16 autocast) is measured at two sequence lengths by fttui.worker.memtrace.check_slope, and
the bytes per token its live tensors grow by are compared with the growth of the estimate's
activations. Two vocabularies: the default 512 entries (a decoder layer's backward is the
peak) and 4,096 (the loss's backward is the peak, as on a real model: checked on the peak's
tensors; 32,000 was the same regime at four times the CPU). Separately, the
checkpoints at the peak (the layer outputs, ``add``) are read from the tracker: fp32 under
peft's prepare_model_for_kbit_training (fp32 embeddings: an fp32 residual stream), bf16
without it, which is the part of the slope where qlora differs from lora.
"""

from __future__ import annotations

import pytest

pytest.importorskip("bitsandbytes")
from fttui.core.profiles import load_profile  # noqa: E402
from fttui.worker.memtrace import SMALL_ARCH, check_slope  # noqa: E402


GC = ["train.precision=bf16", "train.gradient_checkpointing=true"]
ARCH = [x for x in SMALL_ARCH if not x.startswith("max_seq_len")]
BIG_VOCAB = ["model.arch_config.vocab_size=4096"]
#: the loss's operators (transformers' ForCausalLMLoss: fp32 log-softmax, NLL and their gradients)
LOSS_OPS = ("_log_softmax", "nll_loss_backward", "_log_softmax_backward_data")
LENGTHS = (128, 512)

CASES = [
    ("tiny-qlora", GC, 4), ("tiny-qlora", GC + BIG_VOCAB, 4),
    ("tiny-qlora", GC + BIG_VOCAB + ["quant.prepare=none"], 2),
    ("tiny-lora", GC + BIG_VOCAB + ["lora.target_modules=all-linear"], 2),
]


@pytest.mark.slow  # a few CPU-seconds a case (the 4-bit model is saved and loaded back)
@pytest.mark.parametrize("profile,sets,ckpt_bytes", CASES,
                         ids=[f"{p}:{','.join(s[2:]) or 'gc'}" for p, s, _b in CASES])
def test_per_token_slope_matches_live_tensors(profile, sets, ckpt_bytes):
    c = check_slope(profile, ARCH + sets, LENGTHS)
    # measured within 3% on every case when written (docs/estimate.md)
    assert abs(c["error"]) <= 0.10, (f"{profile} {sets}: predicted {c['predicted']:.0f} B/token, "
                                     f"live tensors {c['measured']:.0f} B/token ({c['error']:+.1%}); "
                                     f"peaks {c['peaks'][1][:6]}")
    if BIG_VOCAB[0] in sets:  # the regime the large vocabulary is there for: the loss's backward is the peak
        assert c["peaks"][1][0][0] in LOSS_OPS, c["peaks"][1][:6]
    # the checkpoints at the peak, one per decoder layer in the residual's dtype: the first
    # layer's input is the embedding's output, the others the previous layer's (``add``)
    r = load_profile(profile, ARCH + sets)
    a = r.model.arch_config
    tokens = int(r.train.batch_size) * LENGTHS[1]
    dtype = {4: "float32", 2: "bfloat16"}[ckpt_bytes]
    held = sum(n for op, dt, n in c["peaks"][1] if op in ("add", "embedding") and dt == dtype)
    assert held >= a["num_hidden_layers"] * tokens * a["hidden_size"] * ckpt_bytes, c["peaks"][1]
