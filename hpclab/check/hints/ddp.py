"""Hints for chapter 06's DDP and ring exercises (checks in ``hpclab/check/ddp.py``)."""

from hpclab.check.hints import Exercise

EXERCISES = (
    Exercise(
        "ddp_training",
        (("function", "train_ddp(ctx, steps, per_rank_batch, seed) returning flat parameters"),),
        (
            "Data parallel: every rank trains a replica on its own share of each batch, and the "
            "gradients are averaged so that the replicas stay equal.",
            "A DistributedSampler (num_replicas and rank from ctx, the given seed) splits each "
            "epoch among the ranks; DistributedDataParallel averages gradients during backward; "
            "telling the sampler the epoch number at the start of every epoch reshuffles as the "
            "serial loop does.",
            "A sampler, a DataLoader of per_rank_batch with that sampler, the model wrapped in "
            "DDP, an SGD optimizer with LR; an outer loop over epochs (the sampler's set_epoch) "
            "around an "
            "inner loop over batches calling train_step, stopping after `steps` steps.",
        ),
    ),
    Exercise(
        "ring",
        (("function", "my_ring(tensor, rank, world_size), summing tensor in place"),),
        (
            "A ring all-reduce is a reduce-scatter (each rank ends with the full sum of one "
            "chunk) followed by an all-gather (every rank receives every summed chunk).",
            "Split the tensor into n chunks that are views of it. In each of n - 1 steps every "
            "rank sends one chunk to its right neighbour and receives one from its left; phase "
            "one adds what arrives, phase two copies it; the chunk index moves by one per step. "
            "Send with dist.isend and receive with dist.recv, or every rank waits forever.",
            "Two loops of n - 1 steps with the same shape: from the rank and the step (modulo "
            "n) pick the chunk to send and the chunk to receive; isend, recv into a buffer, "
            "wait, then add into (phase one) or copy into (phase two) the received chunk.",
        ),
    ),
)
