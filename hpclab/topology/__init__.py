"""Chapter 02: PCIe topology & data movement.

- :mod:`~hpclab.topology.hwloc`: a machine's tree from hwloc's XML (this node or a saved one);
- :mod:`~hpclab.topology.sysfs`: PCIe link generation/width and NUMA node from Linux's sysfs;
- :mod:`~hpclab.topology.gpu_pairs`: the NV/PIX/PXB/PHB/NODE/SYS matrix;
- :mod:`~hpclab.topology.nic_affinity`: each GPU's nearest NIC (used by chapter 06);
- :mod:`~hpclab.topology.drawing`: the tree and the matrix as plotly figures;
- :mod:`~hpclab.topology.lanes`: the lanes arithmetic (model);
- :mod:`~hpclab.topology.copies`: timed host/device/peer copies;
- experiments ``topology``, ``lanes``, ``host-copy``, ``p2p``, ``overlap``
  (:mod:`~hpclab.topology.experiments`).
"""
