"""The memory model the feasibility gates use (app/feasibility.py), against figures worked by hand."""

import re

import pytest

import scenarios
from app import feasibility, physics
from app.scenario import InstanceError, _version

H100 = physics.GPUS["H100"]


def test_ddp_8b_needs_checkpointing_on_an_h100():
    # 8B, bf16 AdamW: 16 + 16 + 32 GB of state; 32 layers x 3,960 tokens x 34 x 4096 B = 17.6 GB of
    # activations without checkpointing: 85 GB with the runtime, over the 90% budget (76.5 GB).
    bare = feasibility.training_memory(8e9, world=8, tokens_per_gpu=3960, hidden=4096, layers=32)
    assert round(bare.weights / 1e9) == 16 and round(bare.optimizer / 1e9) == 32
    assert 17 < bare.activations / 1e9 < 18 and not bare.fits(H100)
    ckpt = feasibility.training_memory(8e9, world=8, tokens_per_gpu=3960, hidden=4096, layers=32,
                                       checkpointing=True)
    assert ckpt.activations < 2e9 and ckpt.fits(H100) and 0.8 < ckpt.share_of(H100) < 0.83
    assert "activations 1.6" in ckpt.describe(H100)


def test_sharding_divides_what_each_stage_shards():
    kw = dict(world=8, tokens_per_gpu=2048, hidden=6656, layers=60, master_fp32=True)
    ddp = feasibility.training_memory(30e9, sharding="ddp", **kw)
    z2 = feasibility.training_memory(30e9, sharding="zero2", **kw)
    z3 = feasibility.training_memory(30e9, sharding="zero3", **kw)
    assert ddp.optimizer == 8 * z2.optimizer and ddp.grads == 8 * z2.grads and ddp.weights == z2.weights
    assert z3.weights < ddp.weights / 4  # its shard plus two gathered layers
    # 30B with fp32 masters under ZeRO-2 on 8 GPUs: 60 GB of bf16 weights alone, so it does not fit
    assert z2.weights == 60e9 and not z2.fits(H100) and z3.total < z2.total - 45e9


# -- explicit overrides past memory are refused by validation, before any build work ------------

# Per scenario (its current version, canonical params), an override a real job could not run
# because it does not fit in its GPU's memory, and one that fits.
PAST_MEMORY = {
    "ddp": {"model_params_b": "70"},  # 70B with bf16 AdamW on each GPU: ~1.1 TB of state
    "dataloader": {"model": "ViT-H/14", "batch_per_gpu": "1024", "image_px": "512"},  # activations
    "straggler": {"world_size": "4", "model_params_b": "70", "tokens_per_gpu": "32768"},
    "skinny-gemm": {"world_size": "2"},  # ZeRO-2 of Llama-2-13B over two GPUs
    "prefill": {"streams": "128", "context_tokens": "16384"},  # the KV cache of 2M tokens
    "launch-bound": {"model_params_b": "20", "weight_dtype": "bf16", "context_len": "32768",
                     "op_overhead_us": "100", "launch_us": "30"},  # 40 GB of weights + KV on a 48 GB L40S
}
FITS = {"ddp": {"model_params_b": "4"}, "dataloader": {"batch_per_gpu": "128"},
        "straggler": {"tokens_per_gpu": "1024"}, "skinny-gemm": {"dram_frac": "0.8"},
        "prefill": {"streams": "40"}, "launch-bound": {"context_len": "1024"}}
FIGURE = re.compile(r"needs [\d.]+ GB of the \w+'s [\d.]+ GB (HBM|GDDR)\w* .*: .+ [\d.]+ GB \+ ")


@pytest.mark.parametrize("sid", list(PAST_MEMORY))
def test_an_override_past_memory_is_refused_before_any_build_work(sid, monkeypatch):
    scn = scenarios.get(sid)
    assert set(PAST_MEMORY) == set(scenarios.REGISTRY)

    def no_build(*a, **k):
        raise AssertionError(f"{sid}: an override past memory reached the build")

    monkeypatch.setattr(scn, "build", no_build)
    with pytest.raises(InstanceError) as e:
        scn.instance("canonical", PAST_MEMORY[sid])
    msg = str(e.value)
    assert "\n" not in msg and FIGURE.search(msg), msg
    needed, hbm = (float(x) for x in re.search(r"needs ([\d.]+) GB of the \w+'s ([\d.]+) GB", msg).groups())
    assert needed > feasibility.HBM_BUDGET * hbm


@pytest.mark.parametrize("sid", list(FITS))
def test_an_override_that_fits_still_builds(sid):
    inst = scenarios.get(sid).instance("canonical", FITS[sid])
    assert inst.version == scenarios.get(sid).version and inst.key["params"]


@pytest.mark.parametrize("sid", list(PAST_MEMORY))
def test_canonical_and_drawn_params_pass_the_refusal(sid):
    """adjust_draw keeps seeds feasible: the refusal an override meets says nothing against them."""
    scn = scenarios.get(sid)
    for seed in ["canonical", *range(60)]:
        p = scn.params_for(seed)
        with _version(scn.version):
            assert p.refusal() is None, (seed, p.refusal())
