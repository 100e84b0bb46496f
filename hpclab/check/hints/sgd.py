"""Hints for chapter 05's exercises (checks in ``hpclab/check/sgd.py``)."""

from hpclab.check.hints import Exercise

EXERCISES = (
    Exercise(
        "hogwild_loop",
        (("function", "my_hogwild_worker(ctx, problem, model, steps, lr)"),),
        (
            "Hogwild!: every process runs plain SGD on one shared model, without a lock.",
            "Build an optimizer over the model you were given (its parameters are in shared "
            "memory) with lr as given. Every step draws a fresh random minibatch of 32 training "
            "samples, zeroes the gradients, backpropagates problem.loss_fn, and steps.",
            "An SGD optimizer, then a loop of `steps` iterations: random indices (torch.randint "
            "below problem.n_train), zero_grad, the minibatch's loss, backward, step.",
        ),
    ),
    Exercise(
        "apply_gradient",
        (("function", "my_apply_gradient(shard, grad, grad_version) returning the staleness"),),
        (
            "Staleness counts the updates a shard received since the trainer read the "
            "parameters its gradient was computed on.",
            "The shard has .version, .params and .lr. Staleness = the shard's version now minus "
            "grad_version; then one SGD step with the shard's lr, then the version advances.",
            "Compute the staleness first, update the parameters in place, increment the "
            "version, return the staleness.",
        ),
    ),
)
