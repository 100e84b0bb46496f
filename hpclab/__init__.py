"""hpclab: the library behind the "Deep Learning on HPC clusters" workbook.

Layers (arrows point down only)::

    hpclab.widgets  hpclab.cli  hpclab.check      views, command line, autochecks
    hpclab.<topic>                                one module or package per chapter topic
    hpclab.measure  hpclab.dist  hpclab.results   timing + hardware facts, rank launch, records

Importing ``hpclab`` is cheap and has no side effects; submodules import torch when needed.
"""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("hpclab")
except _metadata.PackageNotFoundError:  # running from a source tree without install
    __version__ = "0+unknown"
