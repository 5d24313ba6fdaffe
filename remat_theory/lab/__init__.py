"""The lab: experiment drivers built on the library (nothing in the library imports them).

``networks`` (the built-in zoo: MLP, ResNet-like, Transformer, unrolled GRU, transformers
families), ``confirm`` (predicted against measured, ``remat confirm``), ``fidelity``,
``frontier`` / ``frontier_networks`` / ``frontier_offload`` (``remat frontier``).
"""
