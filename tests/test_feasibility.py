"""The memory model the feasibility gates use (app/feasibility.py), against figures worked by hand."""

from app import feasibility, physics

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
