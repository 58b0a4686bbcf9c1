#!/usr/bin/python3
"""One decode step captured in a CUDA graph and replayed (issue 38; label
gpu, exit 77 where torch sees no GPU): State.append_device and 64 layers of
torch.ops.kvevict.cache_write (G2's 64 layers x 8 heads, 4 rows, a paged
NHD cache of float16 K and V) recorded once with torch.cuda.CUDAGraph, then
replayed for 200 steps with each step's inputs copied into the same tensors
(the call order of the rows, which of them pad, the packed token_row, the
new K and V), across rounds, admissions and retirements, made eagerly
between replays with their prefills. Three engines run the same program:

  graph  the captured step, replayed (its first step runs eagerly: warm-up)
  eager  the same step function called eagerly (append_device, no graph)
  host   State.append over the active rows, then the writes of their tokens

After every step, graph and eager agree bit for bit on mappings, move
lists, caches, tables, sequence infos and running digests, and host on all
of it but the padding (graph's untaken mapping entries are -1, its padding
rows' move lists empty). Last, two refused replays (n_new > max_new; a row
listed twice) raise at synchronize and change nothing.

--scored (issue 39): the state is KVE_SCORED (TriAttention) and the
captured step scores its due rows first, State.score_device for each of the
64 layers from the step's rows and n_new (the page table in call order, a
static input too), then append_device with those scores; host scores the
active rows with State.score (cache_row) and appends with them. The scores
buffers (zeroed before each step) are compared too: graph == eager bit for
bit, host's rows where graph's call rows are.

--device cpu runs the same program on the CPU backend without a capture
(graph's step is called eagerly too): test_append_device.py runs it, so CI
exercises everything here but the capture itself. KVE_GRAPH_STEPS sets the
number of steps (bench/gpu_tests.py's memcheck runs fewer).
"""

import os
import sys

import numpy as np
import torch

import kvevict
import kvevict.ops  # noqa: F401  (registers torch.ops.kvevict.*)

L, H, D = 64, 8, 16        # G2's 64 layers x 8 heads
ROWS, BS, BPR = 4, 8, 3    # state rows, page size, pages a row
B, W, R = 12, 2, 4         # capacity <= max(B, PROMPT_MAX + W) + R = 16 <= BS * BPR
PROMPT_MAX = 6
MAX_NEW = 1                # the captured shape: one token a row
SEED = 3801


class Engine:
    """A state, its step buffers, its paged caches and its static inputs;
    with @stats (TriAttention's q_mean, q_abs_mean per layer) a scored state
    and its scores buffer."""

    def __init__(self, dev, ctx, block_table, kv0, stats=None):
        self.dev = dev
        self.stats = stats
        self.state = kvevict.State(ctx, max_seqs=ROWS, n_layers=L, n_heads=H, budget=B,
                                   window=W, interval=R, max_slots=BS * BPR, seed=SEED,
                                   tensors="torch", scored=stats is not None)
        self.scores = self.state.scores_buffer(ROWS) if stats is not None else None
        self.bt_call = block_table.clone()  # the page table in call order (score_device's)
        self.step = self.state.step_buffers(max(ROWS * MAX_NEW, PROMPT_MAX), ROWS, PROMPT_MAX)
        self.kv = kv0.clone()              # [L, 2, pages, BS, H, D]
        self.bt = block_table.clone()      # [ROWS, BPR]
        # the captured step's inputs, rewritten before every replay
        self.rows = torch.zeros(ROWS, dtype=torch.int32, device=dev)
        self.n_new = torch.zeros(ROWS, dtype=torch.int32, device=dev)
        self.token_row = torch.zeros(ROWS * MAX_NEW, dtype=torch.int32, device=dev)
        self.src = torch.zeros(L, 2, ROWS * MAX_NEW, H, D, dtype=torch.float16, device=dev)

    def write(self, layer, key, value, token_row, move_row):
        """Layer @layer's cache write of the step in self.step."""
        st = self.state
        torch.ops.kvevict.cache_write(key, value, self.kv[layer, 0], self.kv[layer, 1],
                                      st.layer_slots(self.step, layer), token_row, self.bt,
                                      "nhd", "auto", None, None, move_row=move_row,
                                      **st.layer_moves(self.step, layer))

    def score_kw(self, layer):
        """The scorer's arguments of @layer (TriAttention, this layer's stats)."""
        return dict(scorer="triattention", q_mean=self.stats[0][layer],
                    q_abs_mean=self.stats[1][layer], rope_theta=10000.0)

    def decode_step(self):
        """The step a graph captures: a scored state's scores of every layer,
        the planned append, then every layer's write of the whole padded
        shape."""
        if self.scores is not None:
            for layer in range(L):
                self.state.score_device(self.rows, self.n_new, layer, self.kv[layer, 0],
                                        self.scores, block_table=self.bt_call,
                                        **self.score_kw(layer))
        self.state.append_device(self.rows, self.n_new, MAX_NEW, self.step, scores=self.scores)
        for layer in range(L):
            self.write(layer, self.src[layer, 0], self.src[layer, 1], self.token_row, self.rows)

    def host_step(self, call_rows, src):
        """The eager twin: State.append over the active rows (in call order)."""
        n = len(call_rows)
        if self.scores is not None:
            self.scores.zero_()
        if not n:
            return
        if self.scores is not None:
            for layer in range(L):
                self.state.score(call_rows, [MAX_NEW] * n, layer, self.kv[layer, 0],
                                 self.scores, block_table=self.bt, cache_row=call_rows,
                                 **self.score_kw(layer))
        self.state.append(call_rows, [MAX_NEW] * n, out=self.step, scores=self.scores)
        tr = torch.tensor(call_rows, dtype=torch.int32, device=self.dev)
        for layer in range(L):
            self.write(layer, src[layer, 0, :n], src[layer, 1, :n], tr, tr)

    def admit(self, row, seq_id, prompt, src):
        self.state.admit(row, seq_id, prompt)
        if not prompt:
            return
        self.state.append([row], [prompt], out=self.step)
        tr = torch.full((prompt,), row, dtype=torch.int32, device=self.dev)
        for layer in range(L):
            self.write(layer, src[layer, 0], src[layer, 1], tr, tr[:1])

    def set_inputs(self, rows, n_new, token_row, src):
        for dst, x in ((self.rows, rows), (self.n_new, n_new), (self.token_row, token_row),
                       (self.src, src)):
            dst.copy_(x)
        self.bt_call.copy_(self.bt[self.rows.long()])
        if self.scores is not None:
            self.scores.zero_()

    def snap(self):
        """Host copies of everything the engines must agree on."""
        self.state.ctx.synchronize()  # refusals of the planner are raised here
        kvevict.ops.context_for(torch.device(self.dev)).synchronize()
        st, s = self.state, self.step
        info = [st.seq(r) for r in range(ROWS)]
        return dict(
            map=s.mapping[:, :ROWS * MAX_NEW].cpu().numpy().copy(),
            n_moves=s.n_moves[:, :ROWS].cpu().numpy().copy(),
            moves=s.moves[:, :ROWS].cpu().numpy().copy(),
            kv=self.kv.view(torch.int16).cpu().clone(),
            info=info,
            slots=[st.slots(r) if info[r].active else None for r in range(ROWS)],
            digest=[st.digest(r) if info[r].active else None for r in range(ROWS)],
            scores=None if self.scores is None else self.scores.cpu().clone())


def moves_of(snap, call_rows):
    """(n_moves, the pairs within each list's count) of some call rows."""
    n = snap["n_moves"][:, call_rows]
    pairs = snap["moves"][:, call_rows]
    used = np.arange(pairs.shape[3])[None, None, None, :] < n[..., None]
    return n, pairs[used]


def same_state(a, b, what):
    for r in range(ROWS):
        assert a["info"][r] == b["info"][r], (what, r, a["info"][r], b["info"][r])
        if a["info"][r].active:
            assert np.array_equal(a["slots"][r], b["slots"][r]), (what, "slots", r)
            assert a["digest"][r] == b["digest"][r], (what, "digest", r)
    assert torch.equal(a["kv"], b["kv"]), (what, "caches")


def compare(g, e, h, active_calls, step):
    """graph == eager bit for bit; host == graph but for the padding."""
    what = "step %d" % step
    same_state(g, e, what + " graph/eager")
    same_state(g, h, what + " graph/host")
    assert np.array_equal(g["map"], e["map"]), (what, "mapping graph/eager")
    every = list(range(ROWS))
    gn, gp = moves_of(g, every)
    en, ep = moves_of(e, every)
    assert np.array_equal(gn, en) and np.array_equal(gp, ep), (what, "moves graph/eager")
    n = len(active_calls) * MAX_NEW  # the packed tokens, then -1
    assert np.array_equal(g["map"][:, :n], h["map"][:, :n]), (what, "mapping graph/host")
    assert (g["map"][:, n:] == -1).all(), (what, "padding mapped")
    gn, gp = moves_of(g, active_calls)
    hn, hp = moves_of(h, list(range(len(active_calls))))
    assert np.array_equal(gn, hn) and np.array_equal(gp, hp), (what, "moves graph/host")
    pad = [i for i in every if i not in active_calls]
    assert (g["n_moves"][:, pad] == 0).all(), (what, "padding rows with moves")
    if g["scores"] is not None:  # host's call rows packed; every buffer zeroed first
        want = torch.zeros_like(h["scores"])
        want[active_calls] = h["scores"][:len(active_calls)]
        for other, name in ((e["scores"], "graph/eager"), (want, "graph/host")):
            assert torch.equal(g["scores"].view(torch.int32), other.view(torch.int32)), \
                (what, "scores " + name)


def run(device, steps, scored=False):
    """The program on @device ("cpu": no capture), of a scored state with
    @scored. Returns its counts."""
    capture = device == "cuda"
    dev = "cuda:0" if capture else "cpu"
    ctx = kvevict.Context("auto" if capture else "cpu")
    kvevict.ops.context_for(torch.device(dev))  # made before any capture
    rng = np.random.default_rng(SEED)
    gen = torch.Generator().manual_seed(SEED)
    pages = np.arange(ROWS * BPR)
    rng.shuffle(pages)  # each row's pages scattered
    bt = torch.tensor(pages.reshape(ROWS, BPR), dtype=torch.int32, device=dev)
    kv0 = torch.randn(L, 2, ROWS * BPR, BS, H, D, generator=gen).half().to(dev)
    stats = None
    if scored:  # TriAttention's statistics, per layer: q_mean, q_abs_mean
        stats = (torch.randn(L, H, D // 2, 2, generator=gen).to(dev),
                 (torch.rand(L, H, D // 2, generator=gen) + 0.5).to(dev))
    graph_e, eager_e, host_e = engines = [Engine(dev, ctx, bt, kv0, stats) for _ in range(3)]
    graph = None
    active = [False] * ROWS
    counts = dict(admits=0, retires=0, round_steps=0, quiet_steps=0, padded_steps=0, moves=0,
                  replays=0, scored_rows=0)
    next_seq = 100
    for step in range(steps):
        for r in range(ROWS):  # retirements and admissions, eagerly between replays
            if active[r] and rng.integers(40) == 0:
                for e in engines:
                    e.state.retire(r)
                active[r] = False
                counts["retires"] += 1
            elif not active[r] and rng.integers(3) == 0:
                p = int(rng.integers(PROMPT_MAX + 1))
                src = torch.randn(L, 2, p, H, D, generator=gen).half().to(dev)
                for e in engines:
                    e.admit(r, next_seq, p, src)
                next_seq += 1
                active[r] = True
                counts["admits"] += 1
        # this step's inputs: the rows in a new call order, the free ones padding
        order = rng.permutation(ROWS)
        n_new = np.array([MAX_NEW if active[r] else 0 for r in order], dtype=np.int32)
        active_calls = [i for i in range(ROWS) if n_new[i]]
        call_rows = [int(order[i]) for i in active_calls]
        token_row = np.zeros(ROWS * MAX_NEW, dtype=np.int32)  # packed; the tail is not read
        token_row[:len(call_rows)] = call_rows
        src = torch.randn(L, 2, ROWS * MAX_NEW, H, D, generator=gen).half().to(dev)
        rounds_before = sum(graph_e.state.seq(r).round for r in range(ROWS))
        inputs = (torch.from_numpy(order.astype(np.int32)), torch.from_numpy(n_new),
                  torch.from_numpy(token_row), src)
        for e in (graph_e, eager_e):
            e.set_inputs(*inputs)
        if not capture or step == 0:
            graph_e.decode_step()  # the CPU, and the warm-up step before the capture
        else:
            if graph is None:
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    graph_e.decode_step()
            graph.replay()
            counts["replays"] += 1
        eager_e.decode_step()
        host_e.host_step(call_rows, src)
        snaps = [e.snap() for e in engines]
        compare(*snaps, active_calls, step)
        rounds = sum(i.round for i in snaps[0]["info"]) - rounds_before
        counts["round_steps" if rounds else "quiet_steps"] += 1
        counts["padded_steps"] += len(call_rows) < ROWS
        counts["moves"] += int(snaps[0]["n_moves"].sum())
        if scored:  # the call rows given scores (the rounds' rows)
            counts["scored_rows"] += int((snaps[0]["scores"] != 0).flatten(1).any(1).sum())
    refusals(graph_e, graph, active, capture)
    return counts


def refusals(e, graph, active, capture):
    """A replay the planner refuses (n_new > max_new, a row listed twice):
    KvevictError at synchronize (from the call on the CPU), the state, the
    caches as they were, the call's mapping -1 and its move lists empty."""
    rows = [r for r in range(ROWS) if active[r]]
    if not rows:
        raise AssertionError("no active row left for the refusals")
    cases = (("n_new > max_new", [rows[0]] + [r for r in range(ROWS) if r != rows[0]],
              [MAX_NEW + 1] + [0] * (ROWS - 1)),
             ("a row twice", [rows[0]] * ROWS, [MAX_NEW, MAX_NEW] + [0] * (ROWS - 2)))
    for why, call, n_new in cases:
        before = e.snap()
        e.set_inputs(torch.tensor(call, dtype=torch.int32), torch.tensor(n_new, dtype=torch.int32),
                     torch.zeros(ROWS * MAX_NEW, dtype=torch.int32), e.src.clone())
        try:
            if capture:
                graph.replay()
                e.state.ctx.synchronize()
            else:
                e.decode_step()
        except kvevict.KvevictError as err:
            print("refused (%s): %s" % (why, err))
        else:
            raise AssertionError("%s: not refused" % why)
        after = e.snap()
        same_state(before, after, why)
        if capture:  # the device ran the call as no-ops
            assert (after["map"] == -1).all(), (why, "mapping")
            assert (after["n_moves"] == 0).all(), (why, "move lists")


def main():
    """argv: --device cuda (default; exit 77 where torch sees no GPU) or cpu;
    --scored: the scored state's step."""
    args = sys.argv[1:]
    scored = "--scored" in args
    want = args[args.index("--device") + 1] if "--device" in args else "cuda"
    if want not in ("cpu", "cuda"):
        print("usage: test_graph_step.py [--device cuda|cpu] [--scored]")
        return 2
    if want == "cuda" and not torch.cuda.is_available():
        print("no CUDA device for torch: skipped")
        return 77
    steps = int(os.environ.get("KVE_GRAPH_STEPS", "200"))
    counts = run(want, steps, scored)
    print("%s%s, torch %s, %d steps: %s" % (want, " scored" if scored else "",
                                           torch.__version__, steps, counts))
    if steps >= 100:  # the program covered what it is about
        assert counts["round_steps"] > 10 and counts["quiet_steps"] > 10, counts
        assert counts["admits"] > ROWS and counts["retires"] > 2, counts
        assert counts["padded_steps"] > 10 and counts["moves"] > 0, counts
        assert counts["replays"] == (steps - 1 if want == "cuda" else 0), counts
        assert (counts["scored_rows"] > 10) == scored, counts
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
