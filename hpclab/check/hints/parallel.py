"""Hints for chapter 06 part 2's exercises (checks in ``hpclab/check/parallel.py``)."""

from hpclab.check.hints import Exercise

EXERCISES = (
    Exercise(
        "naive_averaging",
        (("function", "average_gradients(model)"),),
        (
            "Data parallel by hand: after backward every rank must hold the mean of all ranks' "
            "gradients.",
            "dist.all_reduce sums a tensor over the ranks, in place; dividing by "
            "dist.get_world_size() turns the sum into the mean.",
            "A loop over model.parameters(): all-reduce each parameter's .grad, then divide it "
            "in place.",
        ),
    ),
    Exercise(
        "bubble",
        (("function", "bubble_fraction(p, m) returning the idle fraction"),),
        (
            "The pipeline bubble: stages wait while the pipe fills and drains.",
            "Draw p = 3 stages and m = 2 micro-batches: the step lasts m + p - 1 slots, and "
            "each stage is busy in m of them.",
            "One fraction: a stage's idle slots over all the slots of the step.",
        ),
    ),
    Exercise(
        "micro_batches",
        (("function", "micro_batches_for(p, target) returning the least m"),),
        (
            "More micro-batches shrink the bubble: find the least m that brings it down to the "
            "target.",
            "Solve (p - 1) / (m + p - 1) <= target for m: m >= (p - 1)(1 - target) / target. m is "
            "a whole number, so round up; a float division can land just above a whole number.",
            "Compute the bound and round it up to an int, or count up from m = 1 until the "
            "bubble is at most the target.",
        ),
    ),
    Exercise(
        "column_forward",
        (("function", "column_forward(x, weight_shard, bias_shard) returning the full output"),),
        (
            "Column parallelism: each rank owns a slice of the output features; the full "
            "output needs every rank's slice.",
            "This rank's slice is the layer applied with its weight and bias shards. "
            "dist.all_gather fills a list of equally shaped tensors, one per rank, in rank "
            "order; the slices are columns of the output.",
            "Compute the local slice, make a list of world-size empty tensors shaped like it, "
            "all-gather into it, and concatenate along the last dimension.",
        ),
    ),
)
