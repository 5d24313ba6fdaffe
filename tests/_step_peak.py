"""One training step's peak as the allocator measures it (torch needed): the tests that
compare the in-place API's budgets with what a step really holds share it."""


def step_peak(model, batch) -> int:
    """The allocator's peak over ``model(**batch).loss.backward()``, after one warm-up step
    (lazily built state exists before the measure); gradients cleared before and after."""
    from remat_theory.torch.tracker import AllocatorMeter
    model(**batch).loss.backward()
    model.zero_grad(set_to_none=True)
    meter = AllocatorMeter("cpu")
    with meter:
        with meter.op("step"):
            model(**batch).loss.backward()
    model.zero_grad(set_to_none=True)
    return meter.peak
