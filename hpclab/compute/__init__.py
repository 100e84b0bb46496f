"""Chapter 01 (GPU vs CPU): throughput of dense kernels against the machine's limits.

Modules, one concept each: ``gemm`` (timed, checked matmul), ``gemm_sweep`` (experiment
``gemm``), ``bandwidth`` (STREAM), ``flops`` (FLOPs, bytes, intensity, the roofline formula),
``roofline``, ``ops`` (RNG, FFT, conv, pooling), ``crossover`` (launch overhead), ``throughput``
(experiment ``train-throughput``), ``timers`` (naive vs honest timing), ``device`` (devices,
threads, memory guards, peaks) and ``experiments`` (the registry entries).
"""
