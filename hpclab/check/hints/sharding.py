"""Hints for chapter 09 part 2's exercises (checks in ``hpclab/check/sharding.py``)."""

from hpclab.check.hints import Exercise

EXERCISES = (
    Exercise(
        "zero1_step",
        (("function", "zero1_step(flat, grad, update)"),),
        (
            "ZeRO-1: every rank keeps all the weights but optimizer state for only its 1/N "
            "slice of them.",
            "dist.reduce_scatter_tensor(out, grad) leaves in `out` the sum over ranks of this "
            "rank's slice; dist.all_gather_into_tensor(flat, mine) puts every rank's slice back "
            "in rank order.",
            "Three moves: the slice's mean gradient (reduce-scatter, then divide by the world "
            "size); update(flat[lo:hi], that gradient); all-gather a copy of flat[lo:hi] into "
            "flat.",
        ),
    ),
    Exercise(
        "zero_memory",
        (("function", "zero_gb(psi_b, n_d, stage) returning GB per device"),),
        (
            "Model states of mixed-precision Adam: 2 + 2 + 12 = 16 bytes a parameter.",
            "Stage 1 divides the optimizer's 12 by N_d, stage 2 also the gradient's 2, stage 3 "
            "also the weight's 2.",
            "Sum three terms, each divided by N_d or not by comparing the stage with 1, 2 and 3; "
            "Psi in billions times bytes gives GB.",
        ),
    ),
    Exercise(
        "stage_that_fits",
        (("number", "the lowest ZeRO stage, 0 to 3"),),
        (
            "Use your zero_gb for 10 B parameters on 16 GPUs, stage by stage.",
            "An A100 here holds 40 GB; count model states only.",
            "The answer is the first stage whose GB are at most 40.",
        ),
    ),
    Exercise(
        "hsdp_inter_node",
        (("function", "hsdp_inter_gb(psi_b, nodes, per_node) returning GB per GPU and step"),),
        (
            "HSDP is ZeRO-3 inside each node; across nodes it only keeps the replicas equal.",
            "Each GPU holds a 1/per_node shard; the GPUs holding the same shard, one a node, "
            "all-reduce its gradient (2 bytes a parameter in bf16).",
            "A ring all-reduce of B bytes over n ranks sends 2 (n-1)/n B per rank: here B = 2 x "
            "psi_b / per_node GB and n = nodes.",
        ),
    ),
    Exercise(
        "reshard_load",
        (("function", "load_checkpoint(net, opt, path)"),),
        (
            "A sharded checkpoint is read into tensors you allocate first, shaped for the "
            "world that loads it.",
            "torch.distributed.checkpoint.state_dict.get_state_dict(net, opt) gives this "
            "world's (sharded) model and optimizer state dicts; dcp.load fills a dict of them "
            "in place from the checkpoint's path.",
            "Three calls: get_state_dict, dcp.load on {'model': ..., 'optim': ...}, then "
            "set_state_dict(net, opt, model_state_dict=..., optim_state_dict=...).",
        ),
    ),
)
