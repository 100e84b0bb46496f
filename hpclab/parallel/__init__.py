"""Chapter 06, part 2, "Model parallelism beside data parallelism".

Modules: :mod:`~hpclab.parallel.data_parallel` (naive and bucketed data parallel by hand),
:mod:`~hpclab.parallel.dp_experiment` (experiment ``dp-by-hand``: both beside DDP),
:mod:`~hpclab.parallel.pipeline` (stages, send/recv, naive / GPipe / 1F1B schedules),
:mod:`~hpclab.parallel.pipeline_experiment` (``pipeline``: step time, bubble, timeline),
:mod:`~hpclab.parallel.tensor_parallel` (column- and row-split linear layers),
:mod:`~hpclab.parallel.tp_experiment` (``tensor-parallel``: equal to one layer, bytes per step),
:mod:`~hpclab.parallel.memory` (``parallel-memory``: bytes per rank, modelled and measured),
:mod:`~hpclab.parallel.strategies` (``strategy-model``: the what-if to 512 GPUs).
"""
