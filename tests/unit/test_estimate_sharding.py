"""The estimator per rank under every sharding (DeepSpeed ZeRO-2 / ZeRO-3 with and without
offload, FSDP with and without offload), multi-card and multi-node: hand-computed figures, and
DeepSpeed's own estimators as a second computation (docs/estimate.md, "Sharding")."""

from __future__ import annotations

import argparse

import pytest

from fttui.core.base.errors import EstimateError, FttuiError
from fttui.core.memory import estimate
from fttui.core.memory.inputs import setup
from fttui.core.memory.sharding import deepspeed_reference, largest_layer_params
from fttui.core.profiles import Profile, load_profile
from tests.helpers import profile_of

MIB = 1 << 20
COMM = 2048 * MIB  # CONSTANTS["comm_bytes"]: NCCL + buffers per card when world size > 1
#: a Llama of 1.97M parameters on GPUs (the per-card figures are what is checked, no GPU needed)
ARCH = ["model.arch_config.hidden_size=256", "model.arch_config.intermediate_size=688",
        "model.arch_config.num_attention_heads=4", "model.arch_config.num_key_value_heads=2",
        "data.source=synthetic", "batch_size=2", "max_seq_len=64"]
H = 256


def _est(profile: str, sharding: str, *sets: str, **extra):
    r = load_profile(profile, [*ARCH, *sets]).to_dict()
    r["sharding"] = sharding
    for k, v in extra.items():
        r[k] = v
    return estimate(profile_of(r))


def _numbers(e):
    a = e.inputs
    return a["params"], a["lora_params"]


@pytest.mark.parametrize("gpus,nodes", [(1, 1), (4, 1), (4, 2)])
def test_zero2_per_rank(gpus, nodes):
    e = _est("tiny-full", "zero2", "train.precision=bf16", "gpus=0", f"devices.gpus={gpus}",
             f"devices.nodes={nodes}")
    P, _ = _numbers(e)
    N = gpus * nodes
    bd = e.breakdown
    assert bd["weights"] == 2 * P  # bf16 parameters, replicated on every rank
    assert bd["gradients"] == round((2 + 4) * P / N)  # bf16 partition + its fp32 copy
    assert bd["optimizer_states"] == round(12 * P / N)  # fp32 master + Adam m, v
    # two reduce buckets (overlap_comm) of h^2 bf16 elements, + NCCL with several ranks
    assert bd["communication"] == 2 * H * H * 2 + (COMM if N > 1 else 0)
    assert len(e.gpu_peak_bytes) == gpus
    assert e.inputs["sharding"] == "zero2"


@pytest.mark.parametrize("gpus,nodes", [(2, 1), (4, 2)])
def test_zero3_per_rank(gpus, nodes):
    e = _est("tiny-full", "zero3", "train.precision=bf16", f"devices.gpus={gpus}", f"devices.nodes={nodes}")
    P, _ = _numbers(e)
    N = gpus * nodes
    bd = e.breakdown
    # bf16 partition + everything gathered (P < stage3_max_reuse_distance) + the prefetch bucket
    assert bd["weights"] == round(2 * P / N + 2 * (P + int(0.9 * H * H)))
    assert bd["gradients"] == round(6 * P / N)
    assert bd["optimizer_states"] == round(12 * P / N)
    assert bd["communication"] == H * H * 2 + COMM  # one reduce bucket
    # the card held the whole bf16 model before DeepSpeed partitioned it: reserved at least that
    assert e.gpu_peak_bytes[0] - bd["cuda_context"] - bd["communication"] >= 2 * P - H * H * 2


def test_zero3_gathers_no_more_than_its_reuse_distance_and_prefetches_no_more_than_its_live_limit():
    """[deepspeed] stage3_max_reuse_distance bounds what stays gathered, stage3_max_live_parameters
    the prefetch bucket; unset, DeepSpeed's 1e9 (a tiny model stays whole)."""
    def weights(*sets):
        e = _est("tiny-full", "zero3", "train.precision=bf16", "devices.gpus=2", *sets)
        return _numbers(e)[0], e.breakdown["weights"]

    P, whole = weights()
    bucket = int(0.9 * H * H)
    assert whole == round(2 * P / 2 + 2 * (P + bucket))
    reuse = P // 7  # a 7B model's share under the default: 1e9 of 7e9
    assert weights(f"deepspeed.stage3_max_reuse_distance={reuse}")[1] == round(2 * P / 2 + 2 * (reuse + bucket))
    assert weights(f"deepspeed.stage3_max_reuse_distance={10 * P}")[1] == whole  # more than the model: all of it
    assert weights(f"deepspeed.stage3_max_reuse_distance={reuse}", "deepspeed.stage3_max_live_parameters=100")[1] \
        == round(2 * P / 2 + 2 * (reuse + 100))


def test_zero3_partitions_more_with_more_ranks():
    peaks = []
    for n in (2, 4, 8):
        e = _est("tiny-full", "zero3", "train.precision=bf16", f"devices.gpus={n}")
        peaks.append(e.breakdown["gradients"] + e.breakdown["optimizer_states"])
    assert peaks[0] == 2 * peaks[1] == 4 * peaks[2]


def test_offload_moves_states_to_the_host_per_node():
    P = _numbers(_est("tiny-full", "zero2", "train.precision=bf16"))[0]
    z2 = _est("tiny-full", "zero2-offload", "train.precision=bf16", "devices.gpus=4")
    assert z2.breakdown["weights"] == 2 * P
    assert z2.breakdown["gradients"] == z2.breakdown["optimizer_states"] == 0
    hb = z2.host_breakdown
    # one node holds its 4 ranks' shares = the whole model's states
    assert (hb["offload_master_params"], hb["offload_optimizer_states"], hb["offload_gradients"]) == \
        (4 * P, 8 * P, 4 * P)
    z3 = _est("tiny-full", "zero3-offload", "train.precision=bf16", "devices.gpus=4", "devices.nodes=2")
    hb = z3.host_breakdown
    # two nodes: each holds half of every offloaded state
    assert (hb["offload_master_params"], hb["offload_optimizer_states"], hb["offload_gradients"],
            hb["offload_param_partitions"]) == (2 * P, 4 * P, 2 * P, P)
    assert z3.breakdown["optimizer_states"] == z3.breakdown["gradients"] == 0
    # the parameters live on the host: the card holds only what is gathered
    assert z3.breakdown["weights"] == 2 * (P + int(0.9 * H * H))


def test_deepspeed_settings_choose_what_is_offloaded():
    keep = {"offload_optimizer": True, "offload_params": False, "pin_memory": True}
    e = _est("tiny-full", "zero3-offload", "train.precision=bf16", "devices.gpus=2", deepspeed=keep)
    P = e.inputs["params"]
    assert e.host_breakdown["offload_param_partitions"] == 0
    assert e.breakdown["weights"] == round(2 * P / 2 + 2 * (P + int(0.9 * H * H)))
    # a profile.json written before sharding: the same settings under [zero3]
    old = load_profile("tiny-full", [*ARCH, "train.precision=bf16", "devices.gpus=2"]).to_dict()
    old.pop("deepspeed", None)
    old.update(method="full-zero3-offload", zero3=keep)
    old.pop("sharding", None)
    assert estimate(profile_of(old)).breakdown == e.breakdown


@pytest.mark.parametrize("n", [2, 4])
def test_fsdp_per_rank(n):
    e = _est("tiny-full", "fsdp", f"devices.gpus={n}", "model.init=pretrained",
             "model.name_or_path=some/llama")
    P, _ = _numbers(e)
    a = setup(load_profile("tiny-full", [*ARCH, "model.init=pretrained", "model.name_or_path=x"]), [])
    root = a.embed + a.head
    layer = (P - root) / a.a.layers
    bd = e.breakdown
    # fp32 shards; the root (embeddings, output layer) gathered, and in a layer's backward that
    # layer and the next
    assert bd["weights"] - round(4 * P / n) in (round(4 * root), round(4 * (root + 2 * layer)))
    # fp32 gradient shards + the root's unsharded gradients until the end of the backward
    assert bd["gradients"] == round(4 * P / n + 4 * root)
    assert bd["optimizer_states"] == round(8 * P / n)
    # pretrained: sharded from the host, no cached whole copy on the card
    assert bd["allocator"] < 4 * P / 2


def test_fsdp_offload_keeps_only_gathered_units_on_the_card():
    e = _est("tiny-full", "fsdp-offload", "devices.gpus=4")
    P, _ = _numbers(e)
    hb = e.host_breakdown
    assert (hb["offload_param_partitions"], hb["offload_gradients"], hb["offload_optimizer_states"]) == \
        (4 * P, 4 * P, 8 * P)
    assert e.breakdown["optimizer_states"] == 0


def test_lora_frozen_base_replicated_under_zero2_sharded_under_zero3_and_fsdp():
    sets = ("train.precision=bf16", "devices.gpus=4", "lora.target_modules=all-linear")
    z2, z3 = _est("tiny-lora", "zero2", *sets), _est("tiny-lora", "zero3", *sets)
    P, Lp = _numbers(z2)
    assert z2.breakdown["weights"] == 2 * P  # the bf16 base on every rank
    assert z2.breakdown["lora"] == 2 * Lp  # DeepSpeed casts the adapters to bf16 too
    # only the adapters have gradients and states, partitioned over 4 ranks
    for e in (z2, z3):
        assert e.breakdown["gradients"] == round(6 * Lp / 4)
        assert e.breakdown["optimizer_states"] == round(12 * Lp / 4)
    assert z3.breakdown["weights"] == round(2 * (P + Lp) / 4 + 2 * (P + int(0.9 * H * H)))
    f = _est("tiny-lora", "fsdp", "devices.gpus=4", "lora.target_modules=all-linear")
    assert f.breakdown["gradients"] == round(4 * Lp / 4) and f.breakdown["optimizer_states"] == round(8 * Lp / 4)


def test_old_method_reads_as_full_with_zero3_offload():
    old = load_profile("tiny-full", [*ARCH, "train.precision=bf16", "gpus=2"]).to_dict()
    old["method"], old["sharding"] = "full-zero3-offload", "none"
    new = load_profile("tiny-full", [*ARCH, "train.precision=bf16", "gpus=2"]).to_dict()
    new["sharding"] = "zero3-offload"
    a, b = estimate(profile_of(old)), estimate(profile_of(new))
    assert a.breakdown == b.breakdown and a.host_breakdown == b.host_breakdown
    assert a.inputs["sharding"] == "zero3-offload"


def test_unsupported_sharding_is_one_line():
    r = load_profile("tiny-full").to_dict()
    r["sharding"] = "zero4"
    with pytest.raises(EstimateError) as ei:
        estimate(profile_of(r))
    msg = str(ei.value)
    assert "\n" not in msg and "'zero4'" in msg and "zero2-offload" in msg and "fsdp" in msg
    r["sharding"], r["method"] = "zero3", "lora-int8"
    with pytest.raises(EstimateError, match="lora-int8 cannot run with sharding zero3.*runs with none, zero2"):
        estimate(profile_of(r))
    r["method"], r["sharding"] = "full-zero3-offload", "zero2"
    with pytest.raises(EstimateError, match="method full"):
        estimate(Profile.from_dict(r))  # the name as given: read as a profile.json, it is full + zero2


def test_cli_gives_the_estimators_line_and_exit_2():
    from fttui.cli.estimate_cmd import cmd_estimate

    def resolve(_a):
        r = load_profile("tiny-full").to_dict()
        r["sharding"] = "zero4"
        return profile_of(r)

    ns = argparse.Namespace(profile="tiny-full", overrides=[], json=True, max=None, gpu_memory=None,
                            calibrate=False)
    with pytest.raises(FttuiError) as ei:
        cmd_estimate(ns, resolve)
    assert ei.value.exit_code == 2 and "sharding 'zero4'" in str(ei.value)


def test_json_weights_are_bytes_per_card(capsys):
    import json

    from fttui.cli.estimate_cmd import cmd_estimate

    ns = argparse.Namespace(profile="tiny-full", overrides=[*ARCH, "train.precision=bf16", "gpus=4",
                                                           "sharding=zero3"],
                            json=True, max=None, gpu_memory=None, calibrate=False)
    assert cmd_estimate(ns, lambda a: load_profile(a.profile, a.overrides)) == 0
    d = json.loads(capsys.readouterr().out)
    P = d["inputs"]["params"]
    assert d["inputs"]["sharding"] == "zero3"
    assert d["breakdown"]["weights"] == round(2 * P / 4 + 2 * (P + int(0.9 * H * H)))
    assert sum(d["breakdown"].values()) == d["gpu_peak_bytes"][0]


# --- DeepSpeed's own estimators: a second computation -------------------------------------------

def _ds():
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs as z3
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs as z2

    return z2, z3


SETUPS = [(1, 1), (2, 1), (8, 1), (4, 2)]


@pytest.mark.parametrize("gpus,nodes", SETUPS)
def test_deepspeed_reference_is_deepspeeds_estimator(gpus, nodes):
    z2, z3 = _ds()
    for sharding in ("zero2", "zero2-offload", "zero3", "zero3-offload"):
        r = load_profile("qwen-7b-lora", ["method=full", f"gpus={gpus}", f"devices.nodes={nodes}"]).to_dict()
        r["sharding"] = sharding
        c = setup(profile_of(r), [])
        P = c.a.params
        off = sharding.endswith("offload")
        if sharding.startswith("zero2"):
            cpu, gpu = z2(P, gpus, nodes, cpu_offload=off, additional_buffer_factor=1.5)
        else:
            cpu, gpu, _ = z3(P, largest_layer_params(c), gpus, nodes, cpu_offload=off,
                             cpu_offload_params=off, zero_init=False, additional_buffer_factor=1.5)
        mine_gpu, mine_cpu = deepspeed_reference(c)
        assert (int(mine_gpu), int(mine_cpu)) == (gpu, cpu), sharding


@pytest.mark.parametrize("gpus,nodes", SETUPS)
def test_model_states_against_deepspeeds_estimator(gpus, nodes):
    """fttui's per-card and per-node model states of a full fp16 7B run, against DeepSpeed's
    estimators (additional_buffer_factor 1: the bytes themselves). Where they differ, by what.
    fp16: the worker loads fp32 weights (4 bytes per parameter on the host, as DeepSpeed assumes)
    and DeepSpeed casts them to fp16."""
    z2, z3 = _ds()
    N = gpus * nodes

    def est(sharding):
        r = load_profile("qwen-7b-lora", ["method=full", "train.precision=fp16", f"gpus={gpus}",
                                          f"devices.nodes={nodes}"]).to_dict()
        r["sharding"] = sharding
        return estimate(profile_of(r))

    e = est("zero2")
    P = e.inputs["params"]
    states = e.breakdown["weights"] + e.breakdown["gradients"] + e.breakdown["optimizer_states"]
    _cpu, gpu = z2(P, gpus, nodes, cpu_offload=False, additional_buffer_factor=1)
    assert abs(states - gpu) <= N  # 2P + 18P/N: the same count (rounding per term)

    e = est("zero2-offload")
    cpu, gpu = z2(P, gpus, nodes, cpu_offload=True, additional_buffer_factor=1)
    assert e.breakdown["weights"] == gpu  # 2P on the card
    hb = e.host_breakdown
    states = sum(v for k, v in hb.items() if k.startswith("offload_") and k != "offload_pinned_buffers")
    assert abs(states - 16 * P / nodes) <= 4  # fp32 master, Adam m and v, fp32 grads per node
    pinned = hb["offload_pinned_buffers"]
    assert abs(pinned - 2 * P / nodes) <= 4  # the fp16 staging copy of the partitions
    # the init copies (4 bytes x ranks of the node) or the states, the larger
    assert abs(states + pinned + hb["model_load"] - max(4 * gpus * P, states + pinned)) <= 4
    if nodes == 1:
        assert cpu == max(4 * gpus, 16) * P  # DeepSpeed's figure is the same maximum
    else:
        # DeepSpeed's ZeRO-2 estimator counts every rank's init copy on one host (4 x all
        # ranks); fttui counts per node, as DeepSpeed's ZeRO-3 estimator does
        assert cpu == max(4 * N, 16) * P

    e = est("zero3")
    c = setup(load_profile("qwen-7b-lora", ["method=full", f"gpus={gpus}", f"devices.nodes={nodes}",
                                            "sharding=zero3"]), [])
    _cpu, gpu, largest = z3(P, largest_layer_params(c), gpus, nodes, cpu_offload=False,
                            cpu_offload_params=False, zero_init=False, additional_buffer_factor=1)
    part = e.breakdown["weights"] - 2 * (min(P, 10**9) + int(0.9 * c.a.hidden ** 2))
    states = part + e.breakdown["gradients"] + e.breakdown["optimizer_states"]
    # DeepSpeed: 18 bytes per parameter and rank; fttui also keeps the bf16 gradient partition
    # (DeepSpeed's grad_partitions_flat_buffer) next to its fp32 copy: 20
    assert abs(states - (gpu - largest + 2 * P / N)) <= N

    for zero_init in (True, False):
        r = load_profile("qwen-7b-lora", ["method=full", "train.precision=fp16", f"gpus={gpus}",
                                          f"devices.nodes={nodes}", "sharding=zero3-offload",
                                          f"deepspeed.zero3_init={str(zero_init).lower()}"])
        e = estimate(r)
        cpu, _gpu, _l = z3(P, largest_layer_params(c), gpus, nodes, cpu_offload=True, cpu_offload_params=True,
                           zero_init=zero_init, additional_buffer_factor=1)
        hb = e.host_breakdown
        states = sum(v for k, v in hb.items() if k.startswith("offload_") and k != "offload_pinned_buffers")
        assert abs(states - 18 * P / nodes) <= 4  # fp32 master, Adam m and v, fp32 grads, fp16 params
        pinned = hb["offload_pinned_buffers"]
        if zero_init:
            # zero.Init: no init copy per rank; the host holds the states (DeepSpeed: 18 / nodes),
            # rank 0's checkpoint read (4 B per parameter under fp16) stays below them
            assert hb["model_load"] == 0 and abs(states - cpu) <= 4
            assert e.host_load_peak_bytes < e.host_train_peak_bytes == e.host_peak_bytes
        else:
            # per node: the init copies (4 bytes x ranks of the node) or the states, the larger, as
            # DeepSpeed's max(4 x gpus per node, 18 / nodes); fttui adds its pinned staging buffers
            assert abs(states + pinned + hb["model_load"] - max(cpu, states + pinned)) <= 4


def test_calibration_uses_rows_of_the_same_sharding():
    from fttui.core.memory import calibration_from_store

    r = load_profile("tiny-full", ["sharding=zero2", "devices.cpu_processes=2"])
    base = {"model": r.model.name_or_path, "method": "full", "precision": "fp32",
            "gradient_checkpointing": 0, "num_gpus": 0, "status": "completed", "max_seq_len": 128}
    rows = [{**base, "sharding": "zero2", "batch_size": 4, "peak_host_rss_mb": 990.0},
            {**base, "sharding": "zero2", "batch_size": 8, "peak_host_rss_mb": 1010.0},
            {**base, "sharding": "none", "batch_size": 8, "peak_host_rss_mb": 5000.0},
            {**base, "batch_size": 8, "peak_host_rss_mb": 5000.0}]  # stored before sharding: none
    cal = calibration_from_store(r, rows)
    assert cal is not None and cal.rows == 2
    old = {**base, "method": "full-zero3-offload", "batch_size": 4, "peak_host_rss_mb": 990.0}
    z3 = load_profile("tiny-full", ["sharding=zero3-offload", "devices.cpu_processes=2"])
    assert calibration_from_store(z3, [old]).rows == 1
    assert calibration_from_store(r, [old]) is None


@pytest.mark.parametrize("sharding", ["zero2", "zero3", "zero3-offload", "fsdp"])
def test_max_batch_under_sharding_is_exact(sharding):
    from fttui.core.memory import solve_max
    from fttui.core.memory.inputs import _with

    r = load_profile("qwen-7b-lora", ["method=full", "gpus=4", f"sharding={sharding}"])
    card = 80 * 1024 * MIB
    best = solve_max(r, "batch_size", card)
    assert best >= 1

    def peak(v):
        return max(estimate(_with(r, "batch_size", v), device_bytes=card).gpu_peak_bytes)

    assert peak(best) <= card < peak(best + 1)


def test_fsdp_random_init_is_sharded_from_the_host_as_a_pretrained_model():
    """The worker keeps a random-init model for FSDP on the host (drawn on the card one module
    at a time), as from_pretrained does: accelerate shards it from there. Wrapping a model built
    on the card held it twice there (a Llama-2-7B LoRA on one H100: torch allocated 26.0 GB
    against 13.5 GB of weights), so the card figures and the host load equal the pretrained
    model's. RAM-efficient loading: the lowest rank alone holds that host copy (the others build
    on the meta device), once per node, not per rank."""
    sets = ["method=full", "gpus=8", "devices.nodes=2", "sharding=fsdp"]
    rnd = estimate(load_profile("qwen-7b-lora", [*sets, "model.init=random"]))
    pre = estimate(load_profile("qwen-7b-lora", sets))
    P = rnd.inputs["params"]
    ctx_comm = rnd.breakdown["cuda_context"] + rnd.breakdown["communication"]
    assert rnd.gpu_peak_bytes == pre.gpu_peak_bytes
    assert rnd.gpu_peak_bytes[0] - ctx_comm < 2 * P  # a sixteenth of it, + what is gathered
    assert rnd.gpu_load_peak_bytes == pre.gpu_load_peak_bytes == 0
    for e in (rnd, pre):
        assert e.host_load_peak_bytes - e.host_breakdown["process"] - e.host_breakdown["cuda_runtime"] == 2 * P


def test_zero3_card_smaller_than_the_whole_model_does_not_fit():
    """ZeRO-3 without zero.Init (``[deepspeed] zero3_init = false``): each card first holds the
    whole half-precision model, so a card smaller than it does not fit however small the
    partitioned states are (qwen-72b-lora: 134.6 GiB of bf16 weights on 80 GiB cards); a card
    that holds it fits. With zero.Init (the default) the 80 GiB card fits."""
    assert estimate(load_profile("qwen-72b-lora"), device_bytes=80 * (1 << 30)).fits is True
    r = load_profile("qwen-72b-lora", ["deepspeed.zero3_init=false"])
    GiB = 1 << 30
    whole = estimate(r).inputs["params"] * 2
    small = estimate(r, device_bytes=80 * GiB)
    assert small.fits is False and max(small.gpu_peak_bytes) >= whole
    assert any("does not fit: the card first holds the whole model" in n for n in small.notes)
    big = estimate(r, device_bytes=192 * GiB)
    assert big.fits is True and not any("does not fit" in n for n in big.notes)


def test_qlora_under_zero3_and_fsdp_loads_the_quantised_model_whole_on_every_card():
    """QLoRA under ZeRO-3 / FSDP (4-bit weights stored in the compute dtype so the engine shards
    them): every rank loads the whole quantised model on its card before the engine shards it (no
    zero.Init and no RAM-efficient loading for 4-bit weights), then holds its share of it."""
    for sharding in ("zero3", "fsdp"):
        plain = estimate(load_profile("qwen-72b-qlora", ["gpus=2"]))
        # (the profile's paged AdamW cannot step FSDP's DTensor shards: torch's under FSDP)
        opt = ["train.optimizer=adamw_torch"] if sharding == "fsdp" else []
        e = estimate(load_profile("qwen-72b-qlora", ["gpus=2", f"sharding={sharding}", *opt]))
        quant = plain.breakdown["weights"] + plain.breakdown["quantisation"]
        assert e.gpu_load_peak_bytes >= 0.8 * quant  # the whole quantised model, loaded
        assert e.breakdown["weights"] < plain.breakdown["weights"]  # then its half of it
        assert any("quantised" in n for n in e.notes)
