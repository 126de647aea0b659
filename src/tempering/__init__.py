"""Tempering: post-training for open-weight language models."""

import logging

__version__ = "0.1.0"

# torchao (the `memory` extra, 8-bit optimizer states) is imported by transformers with every model;
# on a host without CUDA it logs a "Failed to load ... .so" line per GPU kernel and torch logs a
# deprecation per enum it registers. Neither says anything about this run: keep errors only.
for _name in ("torchao", "torch.utils._pytree"):
    logging.getLogger(_name).setLevel(logging.ERROR)
