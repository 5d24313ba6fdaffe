"""A second interpreter of the two-stream model (docs/model.md, "Offloading"), written from
the text of the model with named values in dicts, sharing no code with
remat_theory/model/offload.py: the oracle of tests/test_offload_model.py and of the
brute-force search in tests/test_offload_solvers.py."""
from __future__ import annotations

import math

from remat_theory import Chain

INF = math.inf


class TwoStreamReference:
    """The model's text, executed: logical state in issue order, then times."""

    def __init__(self, chain: Chain):
        self.c = chain
        self.dev = {"x0": chain.x_size[0]}  # name -> bytes on the device
        self.host = set()
        self.leaving = []  # (name, bytes) of the offloaded device copies not yet released
        self.bwd_next = chain.length
        self.C = self.S = self.H = self.O = 0.0
        self.ready = {}  # name -> time its device copy is complete
        self.lastread = {}  # name -> end of the last compute op that read the device copy
        self.ops = []  # (stream, start, end, memory before, peak, memory after)

    def copy(self):
        new = TwoStreamReference(self.c)
        new.__dict__.update({k: (v.copy() if isinstance(v, (dict, set, list)) else v)
                             for k, v in self.__dict__.items()})
        return new

    def saved(self, i):
        return i == 0 or self.c.output_saved[i - 1]

    def source(self, i):
        """The device value x_i is read from, or None."""
        if f"x{i}" in self.dev:
            return f"x{i}"
        if i >= 1 and self.saved(i) and f"t{i}" in self.dev:
            return f"t{i}"
        return None

    def size(self, name):
        i = int(name[1:])
        return self.c.x_size[i] if name[0] == "x" else self.c.tape_held[i - 1]

    def mem(self):
        return sum(self.dev.values()) + sum(b for _, b in self.leaving)

    def apply(self, token):
        """Issue one op; False when it is invalid (the state is then unchanged)."""
        c, L = self.c, self.c.length
        if token[:3] in ("Off", "Pre"):
            if c.bandwidth is None:
                return False
            name = token[3:]
            i = int(name[1:])
            if name[0] == "x" and i > L or name[0] == "t" and not 1 <= i <= L:
                return False
            size = self.size(name)
            dur = 0.0 if size == 0 else (INF if c.bandwidth == 0 else size / c.bandwidth)
            if dur == INF:
                return False
            mem = self.mem()
            if token.startswith("Off"):
                if name == "x0" or name not in self.dev:
                    return False
                if any(n == name for n, _ in self.leaving):  # its last copy still leaving
                    return False
                start = max(self.H, self.ready.get(name, 0.0))
                end = start + dur
                done = max(end, self.lastread.get(name, 0.0))
                self.leaving.append((name, self.dev.pop(name)))
                self.host.add(name)
                self.H, self.O = end, max(self.O, done)
                self.ops.append(("channel", start, done, mem, mem, mem))
                return True
            if name not in self.host:
                return False
            start = max(self.H, self.C)  # after the compute op issued before it
            end = start + dur
            self.host.discard(name)
            self.dev[name] = size
            self.ready[name], self.lastread[name] = end, 0.0
            self.H = end
            self.ops.append(("channel", start, end, mem, mem + size, mem + size))
            return True
        kind = token.rstrip("0123456789")
        i = int(token[len(kind):]) if kind != "Loss" else L
        x = c.x_size
        before = set(self.dev)
        saved_leaving = list(self.leaving)
        self.leaving = []  # a compute op waits for the copies and releases them
        mem = self.mem()
        ok = self._compute(kind, i, mem)
        if not ok:
            self.leaving = saved_leaving
            return False
        reads, peak, dur = ok
        start = max([self.C, self.O] + [self.ready.get(v, 0.0) for v in reads])
        end = start + dur
        for v in reads:
            self.lastread[v] = max(self.lastread.get(v, 0.0), end)
        for v in set(self.dev) - before:
            self.ready[v], self.lastread[v] = end, 0.0
            self.host.discard(v)
        # host copies nothing reads any more
        for v in list(self.host):
            j = int(v[1:])
            if v[0] == "x" and j > self.bwd_next or v[0] == "t" and j > self.bwd_next + 1:
                self.host.discard(v)
        self.C, self.O = end, 0.0
        self.ops.append(("compute", start, end, mem, peak, self.mem()))
        return True

    def _compute(self, kind, i, mem):
        """The operation table on named values: (reads, peak, time), or None."""
        c, L = self.c, self.c.length
        x = c.x_size
        if kind in ("Fn", "Fck", "Fall"):
            src = self.source(i) if i < L else None
            if i >= L or self.bwd_next < i or src is None:
                return None
            reads = [src]
            if kind == "Fall":
                if f"t{i + 1}" in self.dev:
                    return None
                peak = mem + c.tape_size[i] + c.fall_overhead[i]
                self.dev[f"t{i + 1}"] = c.tape_held[i]
                if not c.output_saved[i] and self.bwd_next >= i + 1:
                    self.dev.setdefault(f"x{i + 1}", x[i + 1])
                if i >= 1 and not self.saved(i):
                    del self.dev[f"x{i}"]
                dur = c.fall_time[i]
            else:
                if f"x{i + 1}" in self.dev:
                    return None
                peak = mem + x[i + 1] + c.fwd_overhead[i]
                self.dev[f"x{i + 1}"] = x[i + 1]
                if kind == "Fn" and i >= 1:
                    del self.dev[src]
                dur = c.fwd_time[i]
        elif kind == "Loss":
            src = self.source(L)
            if self.bwd_next != L or src is None:
                return None
            reads = [src]
            peak = mem + x[L] + c.bwd_overhead[L]
            self.dev[f"d{L}"] = x[L]
            self.dev.pop(f"x{L}", None)
            self.bwd_next = L - 1
            dur = c.bwd_time[L]
        else:  # B_i
            if i >= L or self.bwd_next != i or f"t{i + 1}" not in self.dev:
                return None
            reads = [f"t{i + 1}"]
            if self.saved(i):
                src = self.source(i)
                if src is None:
                    return None
                reads.append(src)
            peak = mem + x[i] + c.bwd_overhead[i]
            self.dev[f"d{i}"] = x[i]
            del self.dev[f"d{i + 1}"], self.dev[f"t{i + 1}"]
            if i >= 1:
                self.dev.pop(f"x{i}", None)
            self.bwd_next = i - 1
            dur = c.bwd_time[i]
        return reads, peak, dur

    def result(self):
        """(makespan, peak)."""
        makespan = max([0.0, self.H] + [e for _, _, e, _, _, _ in self.ops])
        return makespan, max([self.c.x_size[0]] + [p for _, _, _, _, p, _ in self.ops])


def persistent_offload_schedules(chain: Chain, extended: bool = True):
    """Every token sequence of the grammar of the class ``persistent+offload``
    (proofs/offload.md, O.10 and O.16), written from its text: segment (s, t) is the loss,
    ``Fall_s B_s``, option A ``Fall_s E <s+1, t> P B_s`` or option B ``Fck_s [Off C]
    Fn_{s+1} .. Fn_{k-1} <k, t> [Pre C] <s, k-1>``.  In option A each of the container C
    (a fresh segment's, never x_0) and the tape t_{s+1} of an unsaved output is kept,
    offloaded right after Fall_s (E, in that order) or *late*: right after the child's
    first op (before the child's own offload); each value that moved is prefetched
    (``Pre t_{s+1}`` before ``Pre C``) right before B_s (P), or *early*: right before the
    child's last op, after the child's own prefetches, when that child is the loss, ``Fall
    B`` or option A.  A child that takes late offloads does not move its own container late.
    *Evictions*: a segment that keeps its input, takes no late offload and no prefetch
    ahead, and whose input and output are saved, may run ``Fall_s <child> B_s`` or ``Fck_s <child>
    B_s`` where the child (s+1, t) moves its container (t_{s+1}, or x_{s+1}) right after
    its first op or one op later, moves no tape, and has ``Fall_s`` instead of the
    prefetch right before its ``B_{s+1}``.  O.25 (``extended``): a pending segment that
    moves nothing may pass its parent's late offloads on to its child (option A, or option
    B with its part kept, taking the parent's prefetches), down to the loss (``Loss`` then
    the offloads); an eviction by ``Fck_s`` then ``Fall_s``; the evicting child's tape moved
    as in option A.  Validity
    is left to the interpreter.  ``extended=False``: the grammar of O.10 alone (no late
    offload, no tape move, no early prefetch)."""
    L = chain.length
    bw = chain.bandwidth is not None

    def seg(s, t, fresh, c, late=(), pre=(), passed=False):
        late, pre = list(late), list(pre)
        if s == t:
            if t < L:
                yield [f"Fall{s}"] + late + pre + [f"B{s}"]
            elif not late:
                yield pre + ["Loss"]
            elif passed and not pre:  # O.25: the loss takes deferred offloads
                yield ["Loss"] + late
            return
        pending = bool(late)
        if pending and extended:
            # O.25: a pending segment that moves nothing passes its parent's late offloads
            # on to its child (option A, or option B with its part kept, taking ``pre``)
            for child in seg(s + 1, t, True, "t" if chain.output_saved[s] else "x", late,
                             (), True):
                yield [f"Fall{s}"] + child + pre + [f"B{s}"]
            for k in range(s + 1, t + 1):
                for child in seg(k, t, True, "x", late, (), True):
                    for rest in seg(s, k - 1, False, c, (), pre):
                        yield [f"Fck{s}"] + [f"Fn{j}" for j in range(s + 1, k)] + child + rest
        cmodes = ["keep"]
        if fresh and s >= 1 and bw:
            cmodes += ["early"] if pending or not extended else ["early", "late"]
        unsaved = not chain.output_saved[s]
        tmodes = ["keep", "early", "late"] if unsaved and bw and extended else ["keep"]
        child_c = "t" if chain.output_saved[s] else "x"
        for cm in cmodes:
            o, p = ([f"Off{c}{s}"], [f"Pre{c}{s}"]) if cm != "keep" else ([], [])
            for tm in tmodes:
                ot = [f"Offt{s + 1}"]
                early = (o if cm == "early" else []) + (ot if tm == "early" else [])
                child_late = (o if cm == "late" else []) + (ot if tm == "late" else [])
                mine = ([f"Pret{s + 1}"] if tm != "keep" else []) + p
                # each prefetch right before B_s, or early: right before the child's last op
                splits = [[]]
                for v in mine:
                    splits = [sp + [w] for sp in splits for w in ((False, True) if extended
                                                                   else (False,))]
                for sp in splits:
                    ahead = [v for v, e in zip(mine, sp) if e]
                    after = [v for v, e in zip(mine, sp) if not e]
                    for child in seg(s + 1, t, True, child_c, child_late, ahead):
                        yield [f"Fall{s}"] + late + early + child + after + pre + [f"B{s}"]
            if cm == "late" or pre:
                continue
            if (cm == "keep" and not pending and extended and bw and chain.output_saved[s]
                    and (s == 0 or chain.output_saved[s - 1])):
                # evictions: the child's container sent away for good, recreated by Fall_s
                for first, cc in (("Fall", "t"), ("Fck", "x")):
                    for child in evicting(s + 1, t, cc, s):
                        yield [f"{first}{s}"] + child + [f"B{s}"]
                # O.25: recreated as a plain x_{s+1} by Fck_s, then t_{s+1} by Fall_s
                for child in evicting(s + 1, t, "t", s, "Fck"):
                    yield [f"Fall{s}"] + child + [f"Fall{s}", f"B{s}"]
            for k in range(s + 1, t + 1):
                for child in seg(k, t, True, "x"):
                    for rest in seg(s, k - 1, cm == "early", c):
                        yield ([f"Fck{s}"] + late + o + [f"Fn{j}" for j in range(s + 1, k)]
                               + child + p + rest)
                if not (extended and cm == "early" and not pending):
                    continue
                # O.26: C offloaded right after the child's first op and/or prefetched
                # right before the child's last op
                for when, ahead in (("early", True), ("late", False), ("late", True)):
                    if when == "late" and k == L:
                        continue
                    for child in seg(k, t, True, "x", o if when == "late" else (),
                                     p if ahead else ()):
                        for rest in seg(s, k - 1, True, c):
                            yield ([f"Fck{s}"] + (o if when == "early" else [])
                                   + [f"Fn{j}" for j in range(s + 1, k)] + child
                                   + ([] if ahead else p) + rest)

    def evicting(s, t, c, parent, redo_kind="Fall"):
        """Child (s, t) whose container (``c``) is offloaded right after its first op or
        one op later and never fetched back: ``Fall_parent`` (or ``Fck_parent``, O.25)
        right before B_s instead.  The tape t_{s+1} of an unsaved output may move as in
        option A (O.25), its prefetch right before that forward."""
        o, redo = [f"Off{c}{s}"], [f"{redo_kind}{parent}"]
        if s == t:
            if t < L:
                yield [f"Fall{s}"] + o + redo + [f"B{s}"]
            return
        child_c = "t" if chain.output_saved[s] else "x"
        unsaved = not chain.output_saved[s]
        tmodes = ["keep", "early", "late"] if unsaved and extended else ["keep"]
        ot, pt = [f"Offt{s + 1}"], [f"Pret{s + 1}"]
        for when in ("early", "late"):
            for tm in tmodes:
                if "late" in (when, tm) and s + 1 >= L:
                    continue
                early = (o if when == "early" else []) + (ot if tm == "early" else [])
                late = (o if when == "late" else []) + (ot if tm == "late" else [])
                for te in (False,):  # fetched right before the recomputing forward
                    back = pt if tm != "keep" and not te else []
                    for child in seg(s + 1, t, True, child_c, late, pt if te else ()):
                        yield [f"Fall{s}"] + early + child + back + redo + [f"B{s}"]

    yield from seg(0, L, False, "t")


def best_persistent_offload(chain: Chain, budget: int, recompute: bool = True,
                            extended: bool = True):
    """``(best, least)``: (makespan, tokens) of the fastest schedule of the grammar that the
    interpreter accepts within ``budget`` (or None), and the least peak of any schedule of
    the grammar it accepts: an oracle for ``dp-offload`` by enumeration."""
    best, least = None, None
    for tokens in persistent_offload_schedules(chain, extended):
        if not recompute and (any(t.startswith(("Fn", "Fck")) for t in tokens)
                              or sum(t.startswith("Fall") for t in tokens) > chain.length):
            continue
        ref = TwoStreamReference(chain)
        if not all(ref.apply(t) for t in tokens) or ref.bwd_next != -1:
            continue
        makespan, peak = ref.result()
        least = peak if least is None else min(least, peak)
        if peak <= budget and (best is None or makespan < best[0] - 1e-12):
            best = (makespan, tokens)
    return best, least
