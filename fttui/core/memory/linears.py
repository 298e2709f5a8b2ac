"""The linear layers of one decoder layer, and the ones LoRA adapts.

Owns the (name, in, out) shapes of a decoder layer's linear layers: the native transformers
mapping (:func:`_native_linears`), the fused modules of remote-code originals such as Baichuan,
ChatGLM and Qwen v1 (:func:`_real_linears`), and :func:`lora_modules`, which resolves
``lora.target_modules`` against them. Pure Python; the shapes come from
:class:`fttui.core.models.numbers.ArchNumbers`.
"""

from __future__ import annotations

from fttui.core.models.numbers import ArchNumbers, arch_numbers
from fttui.core.profiles.typed import Profile

__all__ = ["lora_modules"]


def _native_linears(a: ArchNumbers) -> list[tuple[str, int, int]]:
    """(name, in, out) of the linear layers of one decoder layer, native transformers names."""
    h, q, kv, i = a.hidden, a.q_dim, a.kv_dim, a.inter
    if a.model_type == "bloom":
        return [
            ("query_key_value", h, 3 * h),
            ("dense", h, h),
            ("dense_h_to_4h", h, 4 * h),
            ("dense_4h_to_h", 4 * h, h),
        ]
    if a.model_type == "phi3":  # transformers' Phi-3 fuses q, k, v and gate, up
        return [("qkv_proj", h, q + 2 * kv), ("o_proj", q, h), ("gate_up_proj", h, 2 * i), ("down_proj", i, h)]
    return [
        ("q_proj", h, q),
        ("k_proj", h, kv),
        ("v_proj", h, kv),
        ("o_proj", q, h),
        ("gate_proj", h, i),
        ("up_proj", h, i),
        ("down_proj", i, h),
    ]


def _real_linears(a: ArchNumbers) -> list[tuple[str, int, int]] | None:
    """The linear layers of the original (remote-code) model, fused modules as one, or None
    when the original has the native names."""
    h, q, kv, i = a.hidden, a.q_dim, a.kv_dim, a.inter
    name = a.arch_name or ""
    if name.startswith("baichuan"):
        return [
            ("W_pack", h, q + 2 * kv),
            ("o_proj", q, h),
            ("gate_proj", h, i),
            ("up_proj", h, i),
            ("down_proj", i, h),
        ]
    if name.startswith("chatglm"):
        return [
            ("query_key_value", h, q + 2 * kv),
            ("dense", q, h),
            ("dense_h_to_4h", h, 2 * i),
            ("dense_4h_to_h", i, h),
        ]
    if name.startswith("qwen-"):
        # attention c_proj and mlp c_proj share a name: both match "c_proj"
        return [("c_attn", h, q + 2 * kv), ("c_proj", q, h), ("w1", h, i), ("w2", h, i), ("c_proj", i, h)]
    return None


def lora_modules(
    prof: Profile, a: ArchNumbers | None = None, notes: list[str] | None = None
) -> list[tuple[str, int, int]]:
    """The (name, in, out) linear layers of one decoder layer that LoRA adapts.

    ``all-linear`` = every linear layer but the output layer. With ``model.init = "pretrained"``
    and an original that fuses modules (Baichuan ``W_pack``, ChatGLM ``query_key_value``, Qwen
    ``c_attn``) the original's modules are used; with ``random`` the native mapping's. A name of
    the other naming is mapped onto the layer it stands for (``q_proj`` on Baichuan: the q part
    of ``W_pack``; ``W_pack`` on the native mapping: q, k and v)."""
    a = a or arch_numbers(prof.model)
    native = _native_linears(a)
    real = _real_linears(a)
    pretrained = prof.model.init == "pretrained"
    layers = real if (real is not None and pretrained) else native
    other = native if layers is not native else (real or [])
    targets = prof.lora.target_modules
    if targets == "all-linear":
        return list(layers)
    if isinstance(targets, str):
        targets = (targets,)
    chosen: list[tuple[str, int, int]] = []
    for t in targets:
        t = str(t).rsplit(".", 1)[-1]
        hits = [m for m in layers if m[0] == t]
        if not hits:
            alt = [m for m in other if m[0] == t]
            if alt:
                hits = alt  # same shapes seen through the other naming
                if notes is not None:
                    notes.append(
                        f"lora target {t!r} is a name of the "
                        f"{'native mapping' if other is native else 'original model'}; "
                        "counted with its shape"
                    )
            elif notes is not None:
                notes.append(f"lora target {t!r} matches no linear layer of this architecture")
        for m in hits:
            if m not in chosen or m[0] == "c_proj":
                chosen.append(m)
    # c_proj may have been appended twice through duplicates in targets
    seen: list[tuple[str, int, int]] = []
    for m in chosen:
        if chosen.count(m) > 1 and m in seen:
            continue
        seen.append(m)
    return seen
