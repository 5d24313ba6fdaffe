"""Transformers models at their real size, without the hardware (docs/plan.md).

* :mod:`.presets`: configurations by name (Llama-2 7B/13B/70B, Mistral-7B, Qwen2-7B, GPT-2
  XL, BERT-large, T5-large, BART-large, ViT-L/16, ConvNeXt-L, ResNet-50) or from a
  ``config.json``;
* :mod:`.chain`: :func:`~.chain.real_size_profile`, the in-place API's layer chain of a model
  at its real configuration, profiled on fake tensors (:mod:`.fake_profile`, :mod:`.meter`,
  :mod:`.layers`), identical layers profiled once; :mod:`.workspace`, this CPU's kernels'
  own allocations, measured call by call (for the CPU as the device);
* :mod:`.devices`: named GPUs and this CPU, the roofline cost model of a stage's time;
* :mod:`.planner`: :func:`~.planner.plan_model`, ``remat plan``'s answer.
"""
