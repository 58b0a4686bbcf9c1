#!/usr/bin/python3
"""A speculative step captured in a CUDA graph and replayed (issue 46; labels
gpu and graph, exit 77 where torch sees no GPU): State.draft_device, each
layer's torch.ops.kvevict.cache_write of the drafts' K/V to their draft
slots, State.append_device of the accepted counts (the commit) and each
layer's kvevict.cache_write of the accepted entries from their draft slots
(src_slots) with the append's moves, recorded once with
torch.cuda.CUDAGraph (after kvevict.ops.warm_up) and replayed for 150
steps with each step's inputs copied into the same tensors (the call order,
drafts and accepted counts a row, padding rows), across rounds, admissions
and retirements made eagerly between replays. Three engines:

  graph  the captured step, replayed (its first step runs eagerly: warm-up)
  eager  the same step function called eagerly
  host   State.draft and State.append over the active rows (lists), then
         the writes of their packed tokens

After every step graph and eager agree bit for bit on both mappings, move
lists, caches, tables, sequence infos and running digests; host agrees on
the state, the caches and the packed tokens' mappings. Last, a replay with
n_draft > max_draft raises at synchronize and changes nothing.

--device cpu runs the program on the CPU backend without a capture:
test_draft_device.py runs it, so CI exercises everything but the capture.
KVE_GRAPH_STEPS sets the number of steps.
"""

import os
import sys

import numpy as np
import torch

import kvevict
import kvevict.ops

L, H, HD = 4, 2, 16
ROWS, BS, BPR = 4, 8, 3
B, W, R = 8, 2, 4          # capacity <= max(B, PROMPT_MAX + W) + R = 12
PROMPT_MAX = 6
D = 3                      # max_draft, the captured shape: <= W + 1 (a commit keeps its tokens)
MAX_SLOTS = BS * BPR - D   # capacity + D slots fit a row's pages
SEED = 4604


class Engine:
    """A state with draft slots, its two step buffers (drafts, commit), its
    paged caches and the captured step's static inputs."""

    def __init__(self, dev, ctx, block_table, kv0):
        self.dev, self.ctx = dev, ctx
        self.state = kvevict.State(ctx, max_seqs=ROWS, n_layers=L, n_heads=H, budget=B,
                                   window=W, interval=R, max_slots=MAX_SLOTS, seed=SEED,
                                   tensors="torch", max_draft=D)
        self.dstep = self.state.step_buffers(ROWS * D, ROWS, 1)
        self.step = self.state.step_buffers(max(ROWS * D, PROMPT_MAX), ROWS, PROMPT_MAX)
        self.kv = kv0.clone()              # [L, 2, pages, BS, H, HD]
        self.bt = block_table.clone()      # [ROWS, BPR]
        z = dict(dtype=torch.int32, device=dev)
        self.rows, self.n_draft, self.n_accept = (torch.zeros(ROWS, **z) for _ in range(3))
        self.draft_row = torch.zeros(ROWS * D, **z)   # the drafts' rows, packed
        self.commit_row = torch.zeros(ROWS * D, **z)  # the accepted tokens' rows, packed
        self.src_slots = torch.full((ROWS * D, H), -1, dtype=torch.int64, device=dev)
        self.src = torch.zeros(L, 2, ROWS * D, H, HD, dtype=torch.float16, device=dev)

    def draft_write(self, layer, slots, token_row, n):
        torch.ops.kvevict.cache_write(self.src[layer, 0, :n], self.src[layer, 1, :n],
                                      self.kv[layer, 0], self.kv[layer, 1], slots, token_row,
                                      self.bt, "nhd", "auto", None, None)

    def commit_write(self, layer, step, token_row, src_slots, move_row, n):
        st = self.state
        kvevict.cache_write(self.ctx, [self.src[layer, 0, :n], self.src[layer, 1, :n]],
                            [self.kv[layer, 0], self.kv[layer, 1]], st.layer_slots(step, layer),
                            token_row, block_table=self.bt, move_row=move_row,
                            src_slots=src_slots, **st.layer_moves(step, layer))

    def spec_step(self):
        """The step a graph captures: the drafts, their writes, (the engine's
        verification), the commit and its writes, all of the padded shape."""
        st = self.state
        st.draft_device(self.rows, self.n_draft, D, self.dstep)
        for layer in range(L):
            self.draft_write(layer, st.layer_slots(self.dstep, layer), self.draft_row, ROWS * D)
        st.append_device(self.rows, self.n_accept, D, self.step)
        for layer in range(L):
            self.commit_write(layer, self.step, self.commit_row, self.src_slots, self.rows,
                              ROWS * D)

    def host_step(self, calls, n_draft, n_accept):
        """The eager twin over the active call rows (state rows @calls)."""
        if not calls:
            return
        st, dev = self.state, self.dev
        st.draft(calls, n_draft, out=self.dstep)
        nd = int(sum(n_draft))
        tr = torch.tensor([r for r, n in zip(calls, n_draft) for _ in range(n)],
                          dtype=torch.int32, device=dev)
        for layer in range(L if nd else 0):
            self.draft_write(layer, st.layer_slots(self.dstep, layer), tr, nd)
        caps = [st.seq(r).capacity for r in calls]
        st.append(calls, n_accept, out=self.step)
        na = int(sum(n_accept))
        tr = torch.tensor([r for r, n in zip(calls, n_accept) for _ in range(n)],
                          dtype=torch.int32, device=dev)
        first = torch.tensor([c + k for c, n in zip(caps, n_accept) for k in range(n)],
                             dtype=torch.int64, device=dev)[:, None].expand(-1, H).contiguous()
        rows = torch.tensor(calls, dtype=torch.int32, device=dev)
        for layer in range(L if na else 0):
            self.commit_write(layer, self.step, tr, first, rows, na)

    def admit(self, row, seq_id, prompt, src):
        self.state.admit(row, seq_id, prompt)
        if not prompt:
            return
        self.state.append([row], [prompt], out=self.step)
        tr = torch.full((prompt,), row, dtype=torch.int32, device=self.dev)
        for layer in range(L):
            kvevict.cache_write(self.ctx, [src[layer, 0], src[layer, 1]],
                                [self.kv[layer, 0], self.kv[layer, 1]],
                                self.state.layer_slots(self.step, layer), tr, block_table=self.bt)

    def set_inputs(self, order, n_draft, n_accept, src):
        """The step's inputs, eagerly before a replay: packed token rows and
        each accepted token's draft slot from the host's bookkeeping."""
        st = self.state
        caps = [st.seq(int(r)).capacity for r in order]
        draft_row = [int(r) for r, n in zip(order, n_draft) for _ in range(n)]
        commit_row = [int(r) for r, n in zip(order, n_accept) for _ in range(n)]
        first = [c + k for c, n in zip(caps, n_accept) for k in range(n)]
        pad = lambda a, v: a + [v] * (ROWS * D - len(a))  # noqa: E731
        for dst, x in ((self.rows, order), (self.n_draft, n_draft), (self.n_accept, n_accept),
                       (self.draft_row, pad(draft_row, 0)), (self.commit_row, pad(commit_row, 0))):
            dst.copy_(torch.tensor(np.asarray(x, dtype=np.int32)))
        self.src_slots.copy_(torch.tensor(pad(first, -1), dtype=torch.int64)[:, None].expand(-1, H))
        self.src.copy_(src)
        # stale slots in the draft mapping: the planner must map the padded
        # shape's untaken entries to -1 (issue 46 item 2), or their writes land
        self.dstep.mapping.fill_(7)

    def snap(self):
        """Host copies of everything the engines must agree on."""
        self.ctx.synchronize()
        kvevict.ops.context_for(torch.device(self.dev)).synchronize()
        st = self.state
        info = [st.seq(r) for r in range(ROWS)]
        return dict(
            dmap=self.dstep.mapping[:, :ROWS * D].cpu().numpy().copy(),
            map=self.step.mapping[:, :ROWS * D].cpu().numpy().copy(),
            n_moves=self.step.n_moves[:, :ROWS].cpu().numpy().copy(),
            moves=self.step.moves[:, :ROWS].cpu().numpy().copy(),
            kv=self.kv.view(torch.int16).cpu().clone(), info=info,
            slots=[st.slots(r) if info[r].active else None for r in range(ROWS)],
            digest=[st.digest(r) if info[r].active else None for r in range(ROWS)])


def same_state(a, b, what):
    for r in range(ROWS):
        assert a["info"][r] == b["info"][r], (what, r, a["info"][r], b["info"][r])
        if a["info"][r].active:
            assert np.array_equal(a["slots"][r], b["slots"][r]), (what, "slots", r)
            assert a["digest"][r] == b["digest"][r], (what, "digest", r)
    assert torch.equal(a["kv"], b["kv"]), (what, "caches")


def moves_of(snap, call_rows):
    """(n_moves, the pairs within each list's count) of some call rows."""
    n = snap["n_moves"][:, call_rows]
    pairs = snap["moves"][:, call_rows]
    used = np.arange(pairs.shape[3])[None, None, None, :] < n[..., None]
    return n, pairs[used]


def compare(g, e, h, nd, na, calls, step):
    what = "step %d" % step
    same_state(g, e, what + " graph/eager")
    same_state(g, h, what + " graph/host")
    for k in ("dmap", "map"):
        assert np.array_equal(g[k], e[k]), (what, k, "graph/eager")
    for (gn, gp), (en, ep), who in ((moves_of(g, list(range(ROWS))), moves_of(e, list(range(ROWS))),
                                     "graph/eager"),
                                    (moves_of(g, calls), moves_of(h, list(range(len(calls)))),
                                     "graph/host")):
        assert np.array_equal(gn, en) and np.array_equal(gp, ep), (what, "moves", who)
    pad = [i for i in range(ROWS) if i not in calls]
    assert (g["n_moves"][:, pad] == 0).all(), (what, "padding rows with moves")
    assert np.array_equal(g["dmap"][:, :nd], h["dmap"][:, :nd]), (what, "drafts graph/host")
    assert np.array_equal(g["map"][:, :na], h["map"][:, :na]), (what, "commit graph/host")
    assert (g["map"][:, na:] == -1).all(), (what, "commit padding mapped")
    assert (g["dmap"][:, nd:] == -1).all(), (what, "draft padding mapped")


def run(device, steps):
    """The program on @device ("cpu": no capture). Returns its counts."""
    capture = device == "cuda"
    dev = "cuda:0" if capture else "cpu"
    ctx = kvevict.Context("auto" if capture else "cpu")
    kvevict.ops.warm_up(torch.device(dev))  # the ops' context, made before any capture
    rng = np.random.default_rng(SEED)
    gen = torch.Generator().manual_seed(SEED)
    pages = np.arange(ROWS * BPR)
    rng.shuffle(pages)
    bt = torch.tensor(pages.reshape(ROWS, BPR), dtype=torch.int32, device=dev)
    kv0 = torch.randn(L, 2, ROWS * BPR, BS, H, HD, generator=gen).half().to(dev)
    graph_e, eager_e, host_e = engines = [Engine(dev, ctx, bt, kv0) for _ in range(3)]
    graph = None
    active = [False] * ROWS
    counts = dict(admits=0, retires=0, round_steps=0, padded_steps=0, drafts=0, rejected=0,
                  moves=0, replays=0)
    next_seq = 100
    for step in range(steps):
        for r in range(ROWS):
            if active[r] and rng.integers(30) == 0:
                for e in engines:
                    e.state.retire(r)
                active[r] = False
                counts["retires"] += 1
            elif not active[r] and rng.integers(3) == 0:
                p = int(rng.integers(PROMPT_MAX + 1))
                src = torch.randn(L, 2, p, H, HD, generator=gen).half().to(dev)
                for e in engines:
                    e.admit(r, next_seq, p, src)
                next_seq += 1
                active[r] = True
                counts["admits"] += 1
        order = rng.permutation(ROWS)
        n_draft = [int(rng.integers(D + 1)) if active[r] else 0 for r in order]
        n_accept = [int(rng.integers(n + 1)) for n in n_draft]
        calls = [i for i in range(ROWS) if active[order[i]]]
        src = torch.randn(L, 2, ROWS * D, H, HD, generator=gen).half().to(dev)
        rounds_before = sum(graph_e.state.seq(r).round for r in range(ROWS))
        for e in (graph_e, eager_e):
            e.set_inputs(order, n_draft, n_accept, src)
        if not capture or step == 0:
            graph_e.spec_step()
        else:
            if graph is None:
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    graph_e.spec_step()
            graph.replay()
            counts["replays"] += 1
        eager_e.spec_step()
        host_e.src.copy_(src)
        host_e.host_step([int(order[i]) for i in calls], [n_draft[i] for i in calls],
                         [n_accept[i] for i in calls])
        snaps = [e.snap() for e in engines]
        compare(*snaps, sum(n_draft), sum(n_accept), calls, step)
        counts["round_steps"] += sum(i.round for i in snaps[0]["info"]) > rounds_before
        counts["padded_steps"] += len(calls) < ROWS
        counts["drafts"] += sum(n_draft)
        counts["rejected"] += sum(n_draft) - sum(n_accept)
        counts["moves"] += int(snaps[0]["n_moves"].sum())
    refusal(graph_e, graph, active, capture)
    return counts


def refusal(e, graph, active, capture):
    """A replay whose drafts exceed max_draft: KvevictError at synchronize
    (from the call on the CPU), the state and the caches as they were."""
    rows = [r for r in range(ROWS) if active[r]]
    if not rows:
        raise AssertionError("no active row left for the refusal")
    order = rows[:1] + [r for r in range(ROWS) if r != rows[0]]
    before = e.snap()
    e.set_inputs(order, [D + 1] + [0] * (ROWS - 1), [0] * ROWS,
                 torch.zeros_like(e.src, device="cpu"))
    try:
        if capture:
            graph.replay()
            e.ctx.synchronize()
        else:
            e.spec_step()
    except kvevict.KvevictError as err:
        print("refused: %s" % err)
    else:
        raise AssertionError("n_draft > max_draft: not refused")
    same_state(before, e.snap(), "refused")


def main():
    """argv: --device cuda (default; exit 77 where torch sees no GPU) or cpu."""
    args = sys.argv[1:]
    want = args[args.index("--device") + 1] if "--device" in args else "cuda"
    if want not in ("cpu", "cuda"):
        print("usage: test_graph_draft.py [--device cuda|cpu]")
        return 2
    if want == "cuda" and not torch.cuda.is_available():
        print("no CUDA device for torch: skipped")
        return 77
    steps = int(os.environ.get("KVE_GRAPH_STEPS", "150"))
    counts = run(want, steps)
    print("%s, torch %s, %d steps: %s" % (want, torch.__version__, steps, counts))
    if steps >= 100:
        assert counts["round_steps"] > 10 and counts["padded_steps"] > 10, counts
        assert counts["admits"] > ROWS and counts["retires"] > 2, counts
        assert counts["drafts"] > 100 and counts["rejected"] > 20 and counts["moves"] > 0, counts
        assert counts["replays"] == (steps - 1 if want == "cuda" else 0), counts
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
