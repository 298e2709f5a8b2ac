"""Builds tests/data/memory_snapshot_lora.json: a CUDA allocator snapshot of a tiny LoRA run at an
out of memory in its backward, in exactly the format of ``torch.cuda.memory._snapshot()``
(``segments`` -> ``blocks`` with ``address``, ``size``, ``requested_size``, ``state``, ``frames``
of ``filename``, ``line``, ``name``; ``device_traces`` with an ``oom`` entry carrying ``size`` and
``device_free``), with the ``memory_tensors.json`` record the worker writes beside it.

NOT RECORDED ON A CARD: no GPU was lent when it was made. The blocks are laid out as the caching
allocator lays them out (sizes rounded up to 512 bytes; blocks of 1 MiB or less in 2 MiB "small"
segments, larger ones in segments of their own rounded to 2 MiB; cached blocks left ``inactive``),
and the frames are those such a run's allocations carry: none for the weights (loaded before the
history was turned on), a module's ``forward`` for the activations, the autograd engine's C++
frames for the backward (it runs on the engine's device thread: no Python frame), AdamW's step
for its states and temporaries; the trace's entries carry none (the worker records with
``context="state"``). bench/gpu_verify.sh holds the check of the real thing on a card.

    python tests/data/make_memory_snapshot.py     # rewrites the fixture (stdlib only)

:func:`build` returns ``(snapshot, tensors, expected)``: ``expected`` is the bytes of each
category by construction (what fttui.core.run.row.oomheld must find) and the largest site.
"""

from __future__ import annotations

import json
from pathlib import Path

FIXTURE = Path(__file__).with_name("memory_snapshot_lora.json")

# the tiny LoRA run: fp32, Llama-shaped
VOCAB, HIDDEN, LAYERS, INTER, HEADS = 2048, 512, 2, 1376, 8
MICRO, SEQ, RANK, F32 = 4, 256, 8, 4
TARGETS = ("q_proj", "v_proj")

SITE = "/usr/local/lib/python3.11/site-packages"
FWD = [
    {"filename": "??", "line": 0, "name": "at::native::empty_cuda(...)"},
    {"filename": f"{SITE}/torch/nn/modules/linear.py", "line": 134, "name": "forward"},
    {"filename": f"{SITE}/torch/nn/modules/module.py", "line": 1786, "name": "_call_impl"},
]
BWD = [
    {"filename": "??", "line": 0, "name": "at::native::empty_cuda(...)"},
    {"filename": "??", "line": 0, "name": "torch::autograd::Engine::evaluate_function(...)"},
    {"filename": "??", "line": 0, "name": "torch::autograd::Engine::thread_main(...)"},
]
OPT = [
    {"filename": f"{SITE}/torch/optim/adamw.py", "line": 540, "name": "_multi_tensor_adamw"},
    {"filename": f"{SITE}/torch/optim/optimizer.py", "line": 517, "name": "step"},
]
INIT = [
    {"filename": f"{SITE}/torch/optim/adam.py", "line": 172, "name": "_init_group"},
    {"filename": f"{SITE}/torch/optim/optimizer.py", "line": 517, "name": "step"},
]
DATA = [{"filename": f"{SITE}/transformers/data/data_collator.py", "line": 96, "name": "torch_default_data_collator"}]


def model_frames(line: int, name: str = "forward") -> list[dict]:
    return FWD + [{"filename": f"{SITE}/transformers/models/llama/modeling_llama.py", "line": line, "name": name}]


def _round(n: int) -> int:
    return -(-n // 512) * 512


def build():
    blocks: list[dict] = []  # (size, requested, state, frames, term or None, category)
    tensors: list[list] = []
    expected: dict[str, int] = {}

    def alloc(nbytes: int, category: str, frames: list | None = None, term: str | None = None, state="active_allocated"):
        blocks.append({"requested_size": nbytes, "size": _round(nbytes), "state": state, "frames": frames or [],
                       "_term": term, "_cat": category})
        if state == "active_allocated":
            expected[category] = expected.get(category, 0) + _round(nbytes)

    # weights: loaded before the history was on (no frames), classed by identity
    alloc(VOCAB * HIDDEN * F32, "weights", term="weights")  # embed_tokens
    for _ in range(LAYERS):
        for shape in [(HIDDEN, HIDDEN)] * 4 + [(INTER, HIDDEN)] * 3 + [(HIDDEN, 1)] * 2:
            alloc(shape[0] * shape[1] * F32, "weights", term="weights")
    alloc(HIDDEN * F32, "weights", term="weights")  # norm
    alloc(VOCAB * HIDDEN * F32, "weights", term="weights")  # lm_head
    # the adapter: A and B of each target, their gradients (the backward) and AdamW's two states
    for _ in range(LAYERS):
        for _t in TARGETS:
            for shape in ((RANK, HIDDEN), (HIDDEN, RANK)):
                n = shape[0] * shape[1] * F32
                alloc(n, "lora", term="lora")
                alloc(n, "lora", BWD, term="lora")
                alloc(n, "lora", INIT, term="lora")
                alloc(n, "lora", INIT, term="lora")
    # the forward's saved activations, per layer
    tok = MICRO * SEQ
    for _ in range(LAYERS):
        alloc(tok * HIDDEN * F32, "activations", model_frames(74, "forward"))  # input_layernorm out
        alloc(tok * HIDDEN * F32 * 3, "activations", model_frames(263))  # q, k, v
        alloc(MICRO * HEADS * SEQ * SEQ * F32, "activations", model_frames(301, "eager_attention_forward"))
        alloc(tok * HIDDEN * F32, "activations", model_frames(74, "forward"))  # post_attention_layernorm
        alloc(tok * INTER * F32 * 3, "activations", model_frames(176))  # gate, up, act(gate) * up
    alloc(tok * VOCAB * F32, "activations", model_frames(478))  # logits
    # the backward: gradients of activations in flight
    alloc(tok * INTER * F32, "backward", BWD)
    alloc(tok * INTER * F32, "backward", BWD)
    alloc(tok * HIDDEN * F32, "backward", BWD)
    # the batch (the collator's tensors) and a workspace allocated while the history was off
    alloc(tok * 8 * 2, "other", DATA)
    alloc(tok * 8, "unrecorded")
    # cached, not live: the last step's optimizer temporaries and a freed activation
    alloc(tok * HIDDEN * F32, "inactive", OPT, state="inactive")
    alloc(tok * INTER * F32, "inactive", model_frames(176), state="inactive")

    # lay the blocks out in segments as the caching allocator does
    segments, small, addr = [], None, 0x7F0000000000
    mib = 1 << 20
    for b in blocks:
        size = b["size"]
        if size <= mib:
            if small is None or small["_used"] + size > 2 * mib:
                small = {"address": addr, "total_size": 2 * mib, "segment_type": "small", "blocks": [], "_used": 0}
                segments.append(small)
                addr += 2 * mib
            b["address"] = small["address"] + small["_used"]
            small["_used"] += size
            small["blocks"].append(b)
        else:
            total = -(-size // (2 * mib)) * (2 * mib)
            seg = {"address": addr, "total_size": total, "segment_type": "large", "blocks": [b], "_used": size}
            b["address"] = addr
            segments.append(seg)
            addr += total
    out_segments = []
    for seg in segments:
        blist = []
        for b in seg["blocks"]:
            if b["_term"] is not None:
                tensors.append([b["address"], b["requested_size"], b["_term"]])
            blist.append({k: b[k] for k in ("address", "size", "requested_size", "state", "frames")})
        if seg["_used"] < seg["total_size"]:  # the segment's free tail
            blist.append({"address": seg["address"] + seg["_used"], "size": seg["total_size"] - seg["_used"],
                          "requested_size": 0, "state": "inactive", "frames": []})
        allocated = sum(b["size"] for b in blist if b["state"] == "active_allocated")
        out_segments.append({
            "device": 0, "address": seg["address"], "total_size": seg["total_size"], "stream": 0,
            "segment_type": seg["segment_type"], "segment_pool_id": [0, 0], "allocated_size": allocated,
            "active_size": allocated, "requested_size": sum(b["requested_size"] for b in blist),
            "is_expandable": False, "frames": [], "blocks": blist,
        })
    request = tok * INTER * F32
    # the worker records with context="state": the trace's entries carry no frames
    traces = [[
        {"action": "alloc", "addr": blocks[-3]["address"], "size": blocks[-3]["size"], "stream": 0, "frames": []},
        {"action": "oom", "size": request, "stream": 0, "device_free": 3 * mib // 2, "frames": []},
    ]]
    snapshot = {"segments": out_segments, "device_traces": traces,
                "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "expandable_segments": False}}
    ranges = {"device": "cuda:0", "t": 0.0, "ranges": sorted(tensors)}
    largest = max(
        ((b["size"], b["_cat"]) for b in blocks if b["state"] == "active_allocated" and b["frames"]),
    )
    expected_out = {"by_category": expected, "oom_request": request, "largest_block": largest,
                    "reserved": sum(s["total_size"] for s in out_segments)}
    return snapshot, ranges, expected_out


def main() -> None:
    snapshot, ranges, _ = build()
    FIXTURE.write_text(json.dumps({"recorded_on_a_card": False, "snapshot": snapshot, "tensors": ranges}, indent=0) + "\n")
    print(f"wrote {FIXTURE.name}")


if __name__ == "__main__":
    main()
