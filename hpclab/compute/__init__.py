"""Chapter 01 (GPU vs CPU): throughput of dense kernels against the machine's limits."""
