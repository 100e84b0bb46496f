"""Chapter 03, profiling: a slow training run (the patient), the profilers that find its faults
(cProfile + SnakeViz, line_profiler, memory_profiler, tracemalloc, torch.profiler, py-spy), the
hardware while it runs, what each profiler costs, and the fixes with their measured gains."""
