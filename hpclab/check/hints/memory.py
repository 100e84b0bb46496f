"""Hints for chapter 09 part 1's exercises (checks in ``hpclab/check/memory.py``)."""

from hpclab.check.hints import Exercise

EXERCISES = (
    Exercise(
        "step_memory",
        (("function", "my_step_bytes(params, optimizer, precision, batch, act_per_sample)"),),
        (
            "A step keeps weights, gradients, the optimizer's state and the activations; the "
            "first three scale with the parameters, the last with the batch.",
            "Bytes per parameter: fp32 4 weights + 4 gradients + 4 per state; mixed precision "
            "2 + 2 + 4 (fp32 master weights) + 4 per state. States: SGD 0, momentum 1, Adam 2.",
            "A dictionary of states per optimizer, one line for the bytes per parameter of the "
            "precision, and return bytes_per_param x params + batch x act_per_sample.",
        ),
    ),
    Exercise(
        "checkpoint_segments",
        (("function", "my_segments(depth, input_bytes, block_bytes, budget_bytes)"),),
        (
            "Checkpointing trades memory for recomputation: use it only when the plain run "
            "does not fit.",
            "In segments of k blocks, forward keeps ceil(L/k) segment inputs and backward "
            "recomputes one segment (k blocks of activations) at a time.",
            "Return 0 if depth x block_bytes fits; else try every k from 1 to depth, keep the "
            "one with the least ceil(depth/k) x input + k x block, and return it or -1.",
        ),
    ),
)
