"""Hints for chapter 03's fixes of the patient (checks in ``hpclab/check/patient.py``)."""

from hpclab.check.hints import Exercise

EXERCISES = (
    Exercise(
        "monitor_loss",
        (("function", "my_monitor_loss(model, loss_fn, x, y) returning a loss tensor"),),
        (
            "Autograd keeps each step's graph, and the activations it saved, alive for as long "
            "as a tensor refers to it.",
            "A running total of losses that still carry a grad_fn keeps every step's graph. "
            ".item() frees it but waits for the device every step; a loss computed with "
            "gradient tracking off has no graph at all.",
            "Compute the loss of model(x) against y inside a context manager that turns "
            "gradient tracking off, and return that tensor.",
        ),
    ),
    Exercise(
        "fast_dataset",
        (("class", "MyFastImages, a subclass of EncodedImages with __getitems__"),),
        (
            "Decoding sample by sample in Python is the bottleneck: decode the whole batch with "
            "one vectorised NumPy operation.",
            "A DataLoader calls __getitems__(indices) for a whole batch when the dataset has it. "
            "The encoded records are bytes in self.raw, the labels in self.labels; normalise as "
            "(b / 255 - MEAN) / STD, as __getitem__ does.",
            "Join the batch's records into one bytes object, view it as uint8, reshape it to "
            "(batch, pixels), normalise in one expression, cast to float32, and return it as a "
            "tensor with a tensor of the labels.",
        ),
    ),
)
