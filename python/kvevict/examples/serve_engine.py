"""serve_bench's batched decode engine: one arm's paged KV cache, kvevict
cache state, scheduler and attention (see serve_bench.py for the whole).

The cache is vLLM's NHD layout, one K and one V tensor a layer of [pages,
page_size, kv_heads, head_dim], with a block table [rows, blocks] whose row
r is the pages of state row r. Each step appends the batch's tokens to the
state (kve_state_append into persistent step buffers, one call; a scored
arm first scores the rows whose round is due, one kve_state_score a
layer), then in every layer torch.ops.kvevict.cache_write runs the round's
moves and writes the new K/V rows at the slots the state gave, and
attention reads each sequence's slots 0 .. n_valid-1 with a bottom-right
causal mask on slot order, as a stock kernel does (docs/SPEC.md
"Placement"). Attention is flex attention over the block table on CUDA
with PyTorch >= 2.5 for decode rows, else a gather of the rows' pages and
a matmul.

Pages are taken when a row's slots grow into them and given back at
retirement; a request is admitted while its prompt's pages (and a reserve
of one page a running row) are free, and when a running row needs a page
none is free the youngest row is preempted (retired and requeued, to be
recomputed, as vLLM does).
"""
import math
import time
from dataclasses import dataclass, field
from typing import List, Optional

import numpy as np
import torch

import kvevict
import kvevict.ops  # noqa: F401  (registers torch.ops.kvevict)

from .serve_model import dense_attention

ARMS = ("full", "random", "random-p0", "triattention", "knorm")
SCORERS = {"triattention": "triattention", "knorm": "knorm"}


@dataclass
class Request:
    """A prompt to serve and how many tokens to generate."""

    rid: int
    prompt: List[int]
    max_new: int
    eos: Optional[int] = None
    done_tokens: List[int] = field(default_factory=list)  # generated so far
    logits: list = field(default_factory=list)          # recorded logits (record=True)


@dataclass
class Row:
    """A request running in a state row."""

    req: Request
    admitted: int          # admission order (the youngest is preempted first)
    cap: int = 0           # its capacity C (kvevict.capacity of its pinned prompt)
    pos: int = 0           # tokens appended (prompt and generated)
    n_valid: int = 0       # the state's n_valid after the last append
    pages: List[int] = field(default_factory=list)


class Timer:
    """Named regions of a step: CUDA events on a GPU (device time, read once
    per step), perf_counter on the CPU."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"
        self.open = []
        self.spent = {}

    def start(self, name):
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            self.open.append((name, e))
        else:
            self.open.append((name, time.perf_counter()))

    def stop(self):
        name, t0 = self.open.pop()
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            self.spent.setdefault(name, []).append((t0, e))
        else:
            self.spent[name] = self.spent.get(name, 0.0) + time.perf_counter() - t0

    def collect(self):
        """Seconds per region since the last collect (after a synchronize)."""
        out = {}
        for name, v in self.spent.items():
            out[name] = sum(a.elapsed_time(b) for a, b in v) / 1e3 if self.cuda else v
        self.spent = {}
        return out


def flex_available(device, cpu=False):
    """Flex attention with block masks and GQA: CUDA (or, cpu=True, the CPU's
    eager implementation, for checks) and PyTorch >= 2.5."""
    if device.type != "cuda" and not (cpu and device.type == "cpu"):
        return False
    try:
        major, minor = (int(x) for x in torch.__version__.split(".")[:2])
        if (major, minor) < (2, 5):
            return False
        from torch.nn.attention import flex_attention  # noqa: F401
        return True
    except (ImportError, ValueError):
        return False


class FlexDecode:
    """Decode attention by flex attention over the block table: batch =
    state rows (padded to max_seqs, so one compiled kernel serves every
    step), KV = the layer's whole physical cache, each row's KV blocks = its
    pages (BlockMask from the block table, KV block = page), and a mask_mod
    that keeps a page's slots below the row's n_valid."""

    def __init__(self, engine):
        from torch.nn.attention.flex_attention import BlockMask, flex_attention

        e = self.e = engine
        self.BlockMask = BlockMask
        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
        # compiled on a GPU; on the CPU (attn='flex' asked for, the CI's
        # check of this path) flex attention's eager implementation
        self.flex = (torch.compile(flex_attention, dynamic=False) if e.device.type == "cuda"
                     else flex_attention)
        dev, n = e.device, e.max_seqs
        self.q = torch.zeros(n, e.cfg.q_heads, 1, e.cfg.head_dim, device=dev, dtype=e.dtype)
        self.n_valid = torch.zeros(n, dtype=torch.int32, device=dev)
        self.page_logical = e.page_logical_dev
        ps = e.page_size
        nv, pl, po = self.n_valid, self.page_logical, e.page_owner_dev

        # exact by itself (the page is the row's, the slot below its
        # n_valid): the eager implementation (the CPU's) reads no block mask
        def mask_mod(b, h, q_idx, kv_idx):
            page = kv_idx // ps
            return (po[page] == b) & (pl[page] * ps + kv_idx % ps < nv[b])

        self.mask_mod = mask_mod

    def prepare(self, rows, n_valid):
        """The step's block mask for decode rows (state rows) with n_valid each."""
        e = self.e
        nv = torch.zeros(e.max_seqs, dtype=torch.int32)
        nv[rows] = torch.tensor(n_valid, dtype=torch.int32)
        self.n_valid.copy_(nv)
        blocks = (self.n_valid + e.page_size - 1) // e.page_size
        kw = dict(BLOCK_SIZE=(128, e.page_size), mask_mod=self.mask_mod)
        # KV block indices one column per physical page (the unused ones
        # past each row's count): torch 2.5 / 2.6 size the block mask's KV
        # dimension by the columns, and the pages index up to n_pages
        bt = e.block_table
        if bt.shape[1] < e.n_pages:
            bt = torch.nn.functional.pad(bt, (0, e.n_pages - bt.shape[1]))
        args = (blocks[:, None, None].contiguous(), bt[:, None, None, :].contiguous())
        lengths = (1, e.n_pages * e.page_size)  # Q: one token; KV: the whole physical cache
        try:
            self.block_mask = self.BlockMask.from_kv_blocks(*args, seq_lengths=lengths, **kw)
        except TypeError:  # PyTorch 2.5 takes no seq_lengths: set them after
            self.block_mask = self.BlockMask.from_kv_blocks(*args, **kw)
            self.block_mask.seq_lengths = lengths
        self.rows = torch.as_tensor(rows, device=e.device)

    def __call__(self, l, q):
        e = self.e
        c = e.cfg
        self.q.zero_()
        self.q[self.rows] = q[:, :, None, :]
        n = e.n_pages * e.page_size
        k = e.k[l].view(n, c.kv_heads, c.head_dim).permute(1, 0, 2)[None].expand(e.max_seqs, -1, -1, -1)
        v = e.v[l].view(n, c.kv_heads, c.head_dim).permute(1, 0, 2)[None].expand(e.max_seqs, -1, -1, -1)
        o = self.flex(self.q, k, v, block_mask=self.block_mask, enable_gqa=True,
                      scale=1.0 / math.sqrt(c.head_dim))
        return o[self.rows, :, 0, :]  # [rows, HQ, D]


class Engine:
    """One arm: see the module's docstring. Arguments are checked here, with
    ValueError naming the argument and its value."""

    def __init__(self, model, arm, *, kv_bytes, prompt_len, max_new, budget=2048, window=64,
                 interval=64, page_size=16, max_seqs=64, chunk=512, seed=2609, attn="auto",
                 stats=None, ctx=None, record=False, check=False):
        cfg = self.cfg = model.cfg
        if arm not in ARMS:
            raise ValueError("arm = %r: expected one of %s" % (arm, ", ".join(ARMS)))
        for name, v, lo in (("kv_bytes", kv_bytes, 1), ("prompt_len", prompt_len, 1),
                            ("max_new", max_new, 1), ("budget", budget, 1), ("window", window, 0),
                            ("interval", interval, 1), ("page_size", page_size, 1),
                            ("max_seqs", max_seqs, 1), ("chunk", chunk, 1)):
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < lo:
                raise ValueError("%s = %r: expected an integer >= %d" % (name, v, lo))
        if attn not in ("auto", "flex", "gather"):
            raise ValueError("attn = %r: expected 'auto', 'flex' or 'gather'" % (attn,))
        if arm == "triattention" and stats is None:
            raise ValueError("arm 'triattention' needs stats (q_mean, q_abs_mean): calibrate first")
        self.model, self.arm, self.device, self.dtype = model, arm, model.device, model.dtype
        self.page_size, self.max_seqs, self.chunk = int(page_size), int(max_seqs), int(chunk)
        self.record, self.checking = record, check
        self.max_len = prompt_len + max_new  # the longest sequence served
        self.window, self.interval = window, interval
        pinned = 0 if arm == "random-p0" else prompt_len
        self.pinned = arm != "random-p0"
        # full: a budget no sequence reaches, so nothing is evicted (one table: shared heads)
        self.budget = self.max_len if arm == "full" else budget
        self.cap = kvevict.capacity(pinned, budget=self.budget, window=window, interval=interval)
        elt = torch.finfo(self.dtype).bits // 8
        self.token_bytes = cfg.layers * 2 * cfg.kv_heads * cfg.head_dim * elt
        self.page_bytes = self.token_bytes * self.page_size
        self.n_pages = int(kv_bytes) // self.page_bytes
        self.kv_bytes = int(kv_bytes)
        if self.n_pages * self.page_size < min(self.cap, self.max_len):
            raise ValueError("kv_bytes = %d: %d pages of %d tokens (%d bytes a token) hold fewer "
                             "than one sequence's %d slots" % (kv_bytes, self.n_pages, page_size,
                                                               self.token_bytes,
                                                               min(self.cap, self.max_len)))
        self.blocks_per_row = -(-self.cap // self.page_size)
        self.ctx = ctx or kvevict.ops.context_for(self.device)
        self.scorer = SCORERS.get(arm)
        full = arm == "full"
        self.state = kvevict.State(
            self.ctx, max_seqs=self.max_seqs, n_layers=cfg.layers, n_heads=cfg.kv_heads,
            budget=self.budget, window=window, interval=interval, max_slots=self.cap, seed=seed,
            tensors="torch", scored=self.scorer is not None, shared_heads=full,
            shared_layers=full)
        self.step_buf = self.state.step_buffers(max_tokens=self.max_seqs + self.chunk,
                                                max_rows=self.max_seqs, max_new=self.chunk)
        self.scores = self.state.scores_buffer(self.max_seqs) if self.scorer else None
        self.stats = stats
        shape = (self.n_pages, self.page_size, cfg.kv_heads, cfg.head_dim)
        self.k = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in range(cfg.layers)]
        self.v = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in range(cfg.layers)]
        self.block_host = np.zeros((self.max_seqs, self.blocks_per_row), dtype=np.int32)
        self.block_table = torch.zeros_like(torch.from_numpy(self.block_host), device=self.device)
        self.page_logical = np.zeros(self.n_pages, dtype=np.int32)
        self.page_logical_dev = torch.zeros(self.n_pages, dtype=torch.int32, device=self.device)
        self.page_owner = np.full(self.n_pages, -1, dtype=np.int32)  # the row holding a page
        self.page_owner_dev = torch.full((self.n_pages,), -1, dtype=torch.int32, device=self.device)
        self.tables_dirty = False
        self.free_pages = list(range(self.n_pages - 1, -1, -1))
        self.rows = {}        # state row -> Row
        self.free_rows = list(range(self.max_seqs - 1, -1, -1))
        self.queue = []       # requests waiting
        self.finished = []    # requests done
        self.n_admitted = self.preempted = self.steps = 0
        self.peak_pages = 0
        self.timer = Timer(self.device)
        use_flex = attn == "flex" or (attn == "auto" and flex_available(self.device))
        if attn == "flex" and not flex_available(self.device, cpu=True):
            raise ValueError("attn = 'flex': needs CUDA or the CPU, and PyTorch >= 2.5 "
                             "(here %s, torch %s)"
                             % (self.device, torch.__version__))
        self.attn_kind = "flex" if use_flex else "gather"
        self.flex = FlexDecode(self) if use_flex else None

    # ---- pages ----------------------------------------------------------------------------
    @property
    def pages_used(self):
        return self.n_pages - len(self.free_pages)

    def _grow(self, row, r, slots):
        """Give row r pages for slots 0 .. slots-1; False when none are free."""
        need = -(-min(slots, row.cap) // self.page_size)
        while len(row.pages) < need:
            if not self.free_pages:
                return False
            p = self.free_pages.pop()
            self.block_host[r, len(row.pages)] = p
            self.page_logical[p] = len(row.pages)
            self.page_owner[p] = r
            row.pages.append(p)
            self.tables_dirty = True
        self.peak_pages = max(self.peak_pages, self.pages_used)
        return True

    def _release(self, r):
        row = self.rows.pop(r)
        self.state.retire(r)
        self.free_pages.extend(reversed(row.pages))
        self.page_owner[row.pages] = -1
        self.block_host[r, :] = 0
        self.free_rows.append(r)
        self.tables_dirty = True
        return row

    def _sync_tables(self):
        if self.tables_dirty:
            self.block_table.copy_(torch.from_numpy(self.block_host))
            self.page_logical_dev.copy_(torch.from_numpy(self.page_logical))
            self.page_owner_dev.copy_(torch.from_numpy(self.page_owner))
            self.tables_dirty = False

    # ---- scheduling ---------------------------------------------------------------------------
    def submit(self, req):
        if len(req.prompt) < 1 or len(req.prompt) + req.max_new > self.max_len:
            raise ValueError("request %d: prompt of %d tokens + max_new %d, the engine serves "
                             "1..%d tokens" % (req.rid, len(req.prompt), req.max_new, self.max_len))
        self.queue.append(req)

    def _admit(self, req, progress=0):
        """Admit req into a free row (its pages for the first chunk, a page
        of reserve per running row); the row, or None when it does not fit."""
        if not self.free_rows:
            return None
        pinned = len(req.prompt) if self.pinned else 0
        cap = kvevict.capacity(pinned, budget=self.budget, window=self.window,
                               interval=self.interval)
        first = min(len(req.prompt) + progress, cap) if progress else \
            min(len(req.prompt), self.chunk)
        need = -(-first // self.page_size) + len(self.rows)
        if need > len(self.free_pages):
            return None
        r = self.free_rows.pop()
        self.state.admit(r, req.rid, pinned)
        row = self.rows[r] = Row(req, self.n_admitted, cap)
        self.n_admitted += 1
        return r, row

    def _preempt_for(self, r):
        """Free pages for row r by preempting the youngest other row; False if r is alone."""
        others = [x for x in self.rows if x != r]
        if not others:
            return False
        victim = max(others, key=lambda x: self.rows[x].admitted)
        row = self._release(victim)
        row.req.done_tokens, row.req.logits = [], []
        self.queue.insert(0, row.req)
        self.preempted += 1
        return True

    def _plan(self):
        """This step's (row, tokens) pairs: every decoding row one token, then
        prefill chunks up to `chunk` tokens; admissions while pages are free."""
        while self.queue and self.free_rows:
            got = self._admit(self.queue[0])
            if got is None:
                break
            self.queue.pop(0)
        plan, budget = [], self.chunk
        for r in sorted(self.rows):
            row = self.rows[r]
            p = len(row.req.prompt)
            if row.pos >= p:
                plan.append((r, 1))
        for r in sorted(self.rows, key=lambda x: self.rows[x].admitted):
            row = self.rows[r]
            left = len(row.req.prompt) - row.pos
            if left > 0 and budget > 0:
                n = min(left, budget)
                if row.n_valid + n > row.cap:
                    # an append that runs a round holds all its tokens when it has at
                    # most W + 1 (docs/SPEC.md "Placement"): the bottom-right mask is exact
                    n = min(n, self.window + 1)
                plan.append((r, n))
                budget -= n
        # pages for every planned row (preempting when they run out)
        out = []
        for r, n in plan:
            if r not in self.rows:
                continue  # preempted for an earlier row of this plan
            row = self.rows[r]
            while not self._grow(row, r, row.n_valid + n):
                if not self._preempt_for(r):
                    raise RuntimeError("row %d needs a page and the cache has none: kv_bytes "
                                       "too small for one sequence" % r)
            out.append((r, n))
        return [(r, n) for r, n in out if r in self.rows]

    # ---- one step -----------------------------------------------------------------------------
    def _host_n_valid(self, row, n):
        """Row's n_valid after an append of n tokens (docs/SPEC.md "Placement")."""
        nv = row.n_valid + n
        while nv > row.cap:
            nv -= self.interval
        return nv

    def _append(self, rows, n_new):
        st, t = self.state, self.timer
        t.start("evict")
        scores = None
        if self.scorer:
            due = [self.rows[r].n_valid + n > self.rows[r].cap for r, n in zip(rows, n_new)]
            if any(due):
                kw = {}
                if self.scorer == "triattention":
                    kw = dict(group=self.cfg.group, rope_theta=self.cfg.rope_theta)
                for l in range(self.cfg.layers):
                    if self.scorer == "triattention":
                        kw.update(q_mean=self.stats[0][l], q_abs_mean=self.stats[1][l])
                    st.score(rows, n_new, l, self.k[l], self.scores, scorer=self.scorer,
                             layout="nhd", block_table=self.block_table, cache_row=rows, **kw)
                scores = self.scores[:len(rows)]
        st.append(rows, n_new, out=self.step_buf, scores=scores)
        t.stop()
        for r, n in zip(rows, n_new):
            row = self.rows[r]
            row.n_valid = self._host_n_valid(row, n)
            row.pos += n

    def step(self):
        """One engine iteration; returns the number of generated tokens."""
        plan = self._plan()
        if not plan:
            return 0
        self._sync_tables()
        rows = [r for r, _ in plan]
        n_new = [n for _, n in plan]
        self._append(rows, n_new)
        toks, pos, token_row, last, base, qoff = [], [], [], [], [], []
        for r, n in plan:
            row = self.rows[r]
            seq = row.req.prompt + row.req.done_tokens
            start = row.pos - n
            toks += seq[start:row.pos]
            pos += range(start, row.pos)
            token_row += [r] * n
            qoff += range(n)
            base += [row.n_valid - n] * n
            last.append(len(toks) - 1)
        dev = self.device
        self.cur = dict(
            rows=rows, n_new=n_new, n_valid=[self.rows[r].n_valid for r in rows],
            token_row=torch.tensor(token_row, dtype=torch.int32, device=dev),
            move_row=torch.tensor(rows, dtype=torch.int32, device=dev))
        self._attn_prepare(plan)
        with torch.no_grad():
            logits = self.model.forward(torch.tensor(toks), torch.tensor(pos), self._attend,
                                        last=torch.tensor(last, device=dev))
        nxt = logits.argmax(-1).tolist()
        made = 0
        for i, (r, n) in enumerate(plan):
            row = self.rows[r]
            if row.pos < len(row.req.prompt):
                continue  # a prefill chunk short of the prompt's end
            if self.record:
                row.req.logits.append(logits[i].cpu())
            row.req.done_tokens.append(int(nxt[i]))
            made += 1
            if len(row.req.done_tokens) >= row.req.max_new or nxt[i] == row.req.eos:
                self.finished.append(self._release(r).req)
        if self.checking:
            self.check()
        self.steps += 1
        return made

    # ---- attention --------------------------------------------------------------------------
    def _attn_prepare(self, plan):
        """Groups of the step's rows: the decode rows together, each prefill chunk alone."""
        groups, at, dec = [], 0, []
        for i, (r, n) in enumerate(plan):
            if n == 1:
                dec.append((i, r, at))
            else:
                groups.append(([r], n, torch.arange(at, at + n, device=self.device)))
            at += n
        self.groups = []
        if dec:
            idx = torch.tensor([a for _, _, a in dec], device=self.device)
            self.groups.append(([r for _, r, _ in dec], 1, idx))
            if self.flex is not None:
                self.flex.prepare([r for _, r, _ in dec], [self.rows[r].n_valid for _, r, _ in dec])
        self.groups += groups
        # per-group gather indices: flat slot (page * page_size + offset) of slots 0..maxn-1
        self.gathers = []
        for grp, n, _ in self.groups:
            if n == 1 and self.flex is not None:
                self.gathers.append(None)
                continue
            nv = [self.rows[r].n_valid for r in grp]
            maxn = max(nv)
            s = torch.arange(maxn, device=self.device)
            bt = self.block_table[torch.tensor(grp, device=self.device)]       # [R, blocks]
            flat = bt[:, s // self.page_size].long() * self.page_size + s % self.page_size
            self.gathers.append((flat, torch.tensor(nv, device=self.device)))

    def _attend(self, l, q, k, v):
        st, t, cur = self.state, self.timer, self.cur
        t.start("write")
        mv = st.layer_moves(self.step_buf, l)
        torch.ops.kvevict.cache_write(k, v, self.k[l], self.v[l], st.layer_slots(self.step_buf, l),
                                      cur["token_row"], self.block_table, "nhd", "auto", None,
                                      None, moves=mv["moves"], n_moves=mv["n_moves"],
                                      move_row=cur["move_row"])
        t.stop()
        out = torch.empty_like(q)
        c = self.cfg
        for (grp, n, idx), g in zip(self.groups, self.gathers):
            qg = q[idx]
            if g is None:
                out[idx] = self.flex(l, qg)
                continue
            flat, nv = g
            kk = self.k[l].view(-1, c.kv_heads, c.head_dim)[flat]   # [R, maxn, HKV, D]
            vv = self.v[l].view(-1, c.kv_heads, c.head_dim)[flat]
            s = torch.arange(flat.shape[1], device=self.device)
            if n == 1:  # decode rows: slots below n_valid
                mask = s[None, :] < nv[:, None]                      # [R, maxn]
                out[idx] = _batched_attention(qg[:, None], kk, vv, mask[:, None])[:, 0]
            else:       # one prefill chunk: bottom-right causal on slot order
                qpos = nv[0] - n + torch.arange(n, device=self.device)
                mask = s[None, :] <= qpos[:, None]
                out[idx] = dense_attention(qg, kk[0], vv[0], mask)
        return out

    # ---- steady state and checks -------------------------------------------------------------
    def fill(self, requests, progress, fill_kv=True):
        """The steady state: admit requests whose generation is already
        progress[i] tokens in (the prompt and those tokens appended to the
        state as an engine appends them, K/V pages filled with noise) while
        pages are free; returns how many were admitted."""
        placed = []
        for req, g in zip(requests, progress):
            got = self._admit(req, g)
            if got is None:
                break
            r, row = got
            self._grow(row, r, len(req.prompt) + g)
            req.done_tokens = [0] * (g + 1)  # the last one sampled, not yet fed
            placed.append((r, row, g))
        self._sync_tables()
        if fill_kv:
            for l in range(self.cfg.layers):
                self.k[l].normal_()
                self.v[l].normal_()
        if not placed:
            return 0
        rows = [r for r, _, _ in placed]
        self._ff(rows, [len(row.req.prompt) for _, row, _ in placed])
        left = {r: g for r, _, g in placed}
        while any(left.values()):
            live = [r for r in rows if left[r] > 0]
            n = [min(left[r], self.interval) for r in live]
            self._ff(live, n)
            for r, k in zip(live, n):
                left[r] -= k
        return len(placed)

    def _ff(self, rows, n_new):
        """Appends with no outputs (the cache's contents are noise already)."""
        scores = None
        if self.scorer and any(self.rows[r].n_valid + n > self.rows[r].cap
                               for r, n in zip(rows, n_new)):
            kw = dict(group=self.cfg.group, rope_theta=self.cfg.rope_theta) \
                if self.scorer == "triattention" else {}
            for l in range(self.cfg.layers):
                if self.scorer == "triattention":
                    kw.update(q_mean=self.stats[0][l], q_abs_mean=self.stats[1][l])
                self.state.score(rows, n_new, l, self.k[l], self.scores, scorer=self.scorer,
                                 layout="nhd", block_table=self.block_table, cache_row=rows, **kw)
            scores = self.scores[:len(rows)]
        self.state.append(rows, n_new, outputs=False, scores=scores)
        for r, n in zip(rows, n_new):
            row = self.rows[r]
            row.n_valid = self._host_n_valid(row, n)
            row.pos += n

    def check(self):
        """The engine's invariants (tests run them every step): the state's
        n_valid and n_tokens are the engine's, every row's slots lie in its
        own pages, the pages in use are within the budget and each page has
        one owner."""
        owners = {}
        for r, row in self.rows.items():
            info = self.state.seq(r)
            if (info.n_valid, info.n_tokens) != (row.n_valid, row.pos):
                raise AssertionError("row %d: state n_valid %d n_tokens %d, engine %d %d"
                                     % (r, info.n_valid, info.n_tokens, row.n_valid, row.pos))
            if row.n_valid > len(row.pages) * self.page_size:
                raise AssertionError("row %d: %d valid slots in %d pages"
                                     % (r, row.n_valid, len(row.pages)))
            for p in row.pages:
                if p in owners:
                    raise AssertionError("page %d held by rows %d and %d" % (p, owners[p], r))
                owners[p] = r
        if len(owners) + len(self.free_pages) != self.n_pages or \
                len(owners) * self.page_bytes > self.kv_bytes:
            raise AssertionError("pages: %d held + %d free of %d (%d bytes of %d)"
                                 % (len(owners), len(self.free_pages), self.n_pages,
                                    len(owners) * self.page_bytes, self.kv_bytes))


def _batched_attention(q, k, v, mask):
    """q [R, T, HQ, D] over k, v [R, S, HKV, D], mask [R, T, S]: GQA, float32
    softmax, as batched matmuls (torch 1.13's einsum is slow on these shapes)."""
    r, t, hq, d = q.shape
    hkv, sl = k.shape[2], k.shape[1]
    g = hq // hkv
    qg = q.float().view(r, t, hkv, g, d).permute(0, 2, 3, 1, 4).reshape(r, hkv, g * t, d)
    s = torch.matmul(qg, k.float().permute(0, 2, 3, 1)) / math.sqrt(d)   # [R, HKV, G*T, S]
    m = mask[:, None, None].expand(r, 1, g, t, sl).reshape(r, 1, g * t, sl)
    s = s.masked_fill(~m, float("-inf"))
    o = torch.matmul(torch.softmax(s, -1), v.float().permute(0, 2, 1, 3))  # [R, HKV, G*T, D]
    return o.view(r, hkv, g, t, d).permute(0, 3, 1, 2, 4).reshape(r, t, hq, d).to(q.dtype)
