"""Chapter 09 part 1: where a training step's memory goes, and what precision buys.

- :mod:`~hpclab.memory.model`: the bytes per part as a formula (16 bytes per parameter, ...);
- :mod:`~hpclab.memory.probe`: the same parts measured by the allocator (torch.profiler's
  memory events on a CPU, the CUDA allocator's counters on a GPU);
- experiments ``memory-anatomy``, ``precision`` and ``checkpointing``.
"""
