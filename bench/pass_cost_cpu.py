"""A forward and backward pass's time against its FLOPs on this machine's CPU, one thread: the
forecast's step model (docs/forecast.md) checked on a grid of micro-batch x length.

    OMP_NUM_THREADS=1 .venv/bin/python bench/pass_cost_cpu.py [--profile tiny-lora] [--cal 8x128]

Builds the profile's model (random init, as the worker does: peft LoRA for adapter methods),
times the median of 9 passes per batch x length, and prints each pass's time beside the line
through the pass floor (one sample of 16 tokens) and the ``--cal`` setting (what one calibrating
run gives the forecast) and beside the least-squares line over the grid.
"""

from __future__ import annotations

import argparse
import sys
import time

GRID = "1x16,2x64,4x64,8x64,4x128,8x128,4x256,16x128,8x256,32x96,16x256,32x128,8x512,32x256"


def main() -> int:
    import torch

    from fttui.core.experiments.stepmodel import pass_flops
    from fttui.core.models.flops import ModelShape
    from fttui.core.profiles import load_profile

    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", default="tiny-lora")
    ap.add_argument("--cal", default="8x128")
    ap.add_argument("--grid", default=GRID)
    args = ap.parse_args()
    torch.set_num_threads(1)
    from transformers import LlamaConfig, LlamaForCausalLM

    p = load_profile(args.profile)
    cfg = LlamaConfig(**dict(p.model.arch_config))
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg)
    if p.method != "full":
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=p.lora.r, lora_alpha=p.lora.alpha, lora_dropout=p.lora.dropout,
                                                 target_modules=list(p.lora.target_modules)))
    model.train()
    total = sum(x.numel() for x in model.parameters())
    trainable = sum(x.numel() for x in model.parameters() if x.requires_grad)
    heads = cfg.num_attention_heads
    shape = ModelShape(total, trainable, cfg.vocab_size, cfg.hidden_size, cfg.num_hidden_layers,
                       heads * (cfg.hidden_size // heads), bool(cfg.tie_word_embeddings))

    def timed(b: int, s: int, n: int = 9) -> float:
        x = torch.randint(0, cfg.vocab_size, (b, s))
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            model(input_ids=x, labels=x, attention_mask=torch.ones_like(x)).loss.backward()
            out.append(time.perf_counter() - t0)
        model.zero_grad(set_to_none=True)
        return sorted(out)[n // 2]

    timed(8, 128, 3)
    cells = [tuple(int(v) for v in c.split("x")) for c in args.grid.split(",")]
    got = {(b, s): (pass_flops(shape, p.method, False, b * s, b * s * s), timed(b, s)) for b, s in cells}
    cal = tuple(int(v) for v in args.cal.split("x"))
    if cal not in got:
        got[cal] = (pass_flops(shape, p.method, False, cal[0] * cal[1], cal[0] * cal[1] ** 2), timed(*cal))
    (f0, t0), (f1, t1) = got[(1, 16)], got[cal]
    slope = (t1 - t0) / (f1 - f0)
    fixed = t0 - slope * f0
    pts = list(got.values())
    n = len(pts)
    mx, my = sum(f for f, _ in pts) / n, sum(t for _, t in pts) / n
    ls = sum((f - mx) * (t - my) for f, t in pts) / sum((f - mx) ** 2 for f, _ in pts)
    li = my - ls * mx
    print(f"{args.profile}: floor+{args.cal} line: {fixed * 1e3:.2f} ms + {1 / slope / 1e9:.1f} GFLOP/s; "
          f"least squares over the grid: {li * 1e3:.2f} ms + {1 / ls / 1e9:.1f} GFLOP/s")
    for (b, s), (f, t) in got.items():
        print(f"  {b:3d}x{s:<4d} {f / 1e9:7.3f} GFLOP  {t * 1e3:8.2f} ms  two-point {(fixed + slope * f) / t:5.2f}  "
              f"least squares {(li + ls * f) / t:5.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
