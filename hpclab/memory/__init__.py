"""Chapter 09 part 1: where a training step's memory goes, and what precision buys.

- :mod:`~hpclab.memory.model`: the bytes per part as a formula (16 bytes per parameter, ...);
- :mod:`~hpclab.memory.probe`: the same parts measured by the allocator (torch.profiler's
  memory events on a CPU, the CUDA allocator's counters on a GPU);
- experiments ``memory-anatomy``, ``precision`` and ``checkpointing``.
"""

REFERENCES = (
    "zero_memory",
    "checkpointing_chen",
    "mixed_precision_guide",
    "h100_datasheet_tflops",
    "h200_transformer_step",
)


def published() -> list[dict]:
    """The chapter's reference tier: the records of its bundled published figures, each with its
    ``source`` (:func:`hpclab.results.load_reference`)."""
    from hpclab.results import load_reference

    return [r for name in REFERENCES for r in load_reference(name).records]
