"""Chapter 06 part 2's experiment registry (read by :func:`hpclab.experiments.registry`)."""

from __future__ import annotations

from hpclab.experiments import Experiment
from hpclab.parallel.dp_experiment import DPByHandConfig, plot_dp_by_hand, run_dp_by_hand
from hpclab.parallel.memory import MemoryConfig, plot_memory, run_memory
from hpclab.parallel.pipeline_experiment import PipelineConfig, plot_pipeline, run_pipeline
from hpclab.parallel.strategies import (
    StrategyModelConfig,
    plot_strategy_model,
    run_strategy_model,
)
from hpclab.parallel.tp_experiment import (
    TensorParallelConfig,
    plot_tensor_parallel,
    run_tensor_parallel,
)

EXPERIMENTS = [
    Experiment(
        "dp-by-hand",
        "06",
        "naive and bucketed data parallel by hand vs DDP: equal weights, step time",
        DPByHandConfig,
        run_dp_by_hand,
        plot_dp_by_hand,
    ),
    Experiment(
        "pipeline",
        "06",
        "pipeline stages on p ranks: naive vs GPipe vs 1F1B, bubble measured vs (p-1)/(m+p-1)",
        PipelineConfig,
        run_pipeline,
        plot_pipeline,
    ),
    Experiment(
        "tensor-parallel",
        "06",
        "one linear layer split by columns / rows vs data parallel: equal results, bytes, time",
        TensorParallelConfig,
        run_tensor_parallel,
        plot_tensor_parallel,
    ),
    Experiment(
        "parallel-memory",
        "06",
        "bytes per rank (params, grads, Adam state, activations): data vs pipeline vs tensor",
        MemoryConfig,
        run_memory,
        plot_memory,
    ),
    Experiment(
        "strategy-model",
        "06",
        "what-if to 512 GPUs: data, pipeline, tensor, tensor+data parallel (time and memory)",
        StrategyModelConfig,
        run_strategy_model,
        plot_strategy_model,
    ),
]
