"""Loading libkvevict and declaring its C types (ctypes, no build step).

The library is looked up, in order:

1. ``$KVEVICT_LIBRARY``: a path to ``libkvevict.so``; a bad value is an error,
   never a silent fallback;
2. next to the package: where ``cmake --install`` put the library (recorded
   in ``_install_paths.py`` at install time), or a copy in the package folder;
3. the build tree: ``<source>/build/libkvevict.so`` when the package is used
   from the source tree (``PYTHONPATH=python``);
4. the loader path (``ldconfig``, ``LD_LIBRARY_PATH``).
"""

import ctypes
import os
from pathlib import Path
from typing import List, Optional

from ._errors import ArgumentError, KvevictError  # noqa: F401  (re-exported)

_HERE = Path(__file__).resolve().parent
_SONAME = "libkvevict.so.1"


def _candidates() -> List[Path]:
    found = []
    try:
        from . import _install_paths  # written by cmake --install

        found.append((_HERE / _install_paths.LIBRARY_RELPATH).resolve())
    except ImportError:
        pass
    found += [_HERE / _SONAME, _HERE / "libkvevict.so"]
    found.append(_HERE.parents[1] / "build" / "libkvevict.so")
    return found


def _load() -> ctypes.CDLL:
    env = os.environ.get("KVEVICT_LIBRARY")
    if env is not None:
        try:
            return ctypes.CDLL(env)
        except OSError as e:
            raise OSError("KVEVICT_LIBRARY=%r: cannot load it (%s)" % (env, e)) from None
    for path in _candidates():
        if path.is_file():
            return ctypes.CDLL(str(path))
    try:
        return ctypes.CDLL(_SONAME)
    except OSError:
        raise OSError(
            "libkvevict not found: set KVEVICT_LIBRARY, install kvevict with cmake --install, "
            "or build it in <source>/build (looked in %s and the loader path)"
            % ", ".join(str(p) for p in _candidates())
        ) from None


lib = _load()
LIBRARY_PATH: Optional[str] = getattr(lib, "_name", None)

# ---------------------------------------------------------------------------
# C types, field for field as include/kvevict.h declares them
# ---------------------------------------------------------------------------

MAX_CACHES = 8
# kve_key_flags (and KVE_SCORED), as kvevict re-exports them
PERSISTENT = 1
SHARED_HEADS = 2
SHARED_LAYERS = 4
SCORED = 16  # selection by scores (docs/SPEC.md "Scored selection"); not a key flag
u32, u64, sz, vp = ctypes.c_uint32, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p


class Schedule(ctypes.Structure):
    _fields_ = [("seed", u64), ("flags", u32), ("budget", u32), ("window", u32),
                ("interval", u32)]


class StateDesc(ctypes.Structure):
    _fields_ = [("schedule", Schedule), ("max_seqs", u32), ("n_layers", u32),
                ("n_heads", u32), ("layer_offset", u32), ("head_offset", u32),
                ("max_slots", u32), ("pool_slots", u64), ("max_draft", u32),
                ("score_group", u32)]


class StateLayout(ctypes.Structure):
    _fields_ = [("slot_pos", vp), ("row_elems", sz), ("table_layers", u32),
                ("table_heads", u32), ("max_slots", u32), ("max_seqs", u32), ("pool_slots", u64)]


class SeqInfo(ctypes.Structure):
    _fields_ = [("active", u32), ("prompt_len", u32), ("seq_id", u64), ("capacity", u32),
                ("n_tokens", u32), ("round", u32), ("n_valid", u32), ("n_used", u32),
                ("table_offset", u64), ("draft_first", u32), ("max_draft", u32)]


class CachePart(ctypes.Structure):
    _fields_ = [("src_dtype", ctypes.c_int), ("dst_dtype", ctypes.c_int), ("convert", u32),
                ("dim", u32), ("src_stride_token", sz), ("src_stride_head", sz),
                ("dst_stride_page", sz), ("dst_stride_slot", sz), ("dst_stride_head", sz),
                ("dst_stride_elem", sz), ("scale", vp), ("scale_per_head", u32)]


class PageTable(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("page_size", u32), ("n_pages", u32), ("n_rows", u32),
                ("block_table", vp), ("blocks_per_row", u32), ("indptr", vp), ("indices", vp),
                ("last_page_len", vp)]


class CacheWriteDesc(ctypes.Structure):
    _fields_ = [("n_tokens", u32), ("n_heads", u32), ("entry_bytes", sz), ("n_caches", u32),
                ("src", vp * MAX_CACHES), ("src_stride_token", sz), ("src_stride_head", sz),
                ("dst", vp * MAX_CACHES), ("layout", ctypes.c_int),
                ("dst_stride_page", sz), ("dst_stride_slot", sz), ("dst_stride_head", sz),
                ("pages", PageTable), ("slots", vp),
                ("slots_stride_token", sz), ("slots_stride_head", sz), ("token_row", vp),
                ("moves", vp), ("n_moves", vp), ("n_move_rows", u32),
                ("max_moves", u32), ("moves_stride_row", sz), ("moves_stride_head", sz),
                ("move_row", vp), ("part", CachePart * MAX_CACHES), ("src_slots", vp)]


class StepBuffers(ctypes.Structure):
    _fields_ = [("slot_mapping", vp), ("max_tokens", u32), ("moves", vp), ("n_moves", vp),
                ("max_rows", u32), ("max_moves", u32), ("scores", vp),
                ("scores_stride_row", sz), ("scores_stride_table", sz)]


class Seq(ctypes.Structure):
    _fields_ = [("seq_id", u64), ("prompt_len", u32), ("round", u32)]


class Batch(ctypes.Structure):
    _fields_ = [("seed", u64), ("flags", u32), ("n_seqs", u32), ("seqs", vp),
                ("n_layers", u32), ("n_heads", u32), ("layer_offset", u32),
                ("head_offset", u32), ("n_slots", u32), ("budget", u32), ("window", u32),
                ("slot_pos", vp), ("slot_pos_stride", sz), ("scores", vp),
                ("scores_stride", sz)]


class EvictOut(ctypes.Structure):
    _fields_ = [("evicted", vp), ("evicted_stride", sz), ("n_evicted", vp), ("n_kept", vp),
                ("head_flags", vp), ("kept", vp), ("kept_stride", sz), ("round_digest", vp),
                ("run_digest", vp), ("run_digest_weight", u64)]


class CacheView(ctypes.Structure):
    _fields_ = [("base", vp), ("stride_seq", sz), ("stride_layer", sz), ("stride_head", sz),
                ("stride_slot", sz)]


class CompactDesc(ctypes.Structure):
    _fields_ = [("n_seqs", u32), ("n_layers", u32), ("n_heads", u32), ("n_slots", u32),
                ("slot_pos", vp), ("slot_pos_stride", sz), ("evicted", vp),
                ("evicted_stride", sz), ("n_evicted", vp), ("entry_bytes", sz),
                ("n_caches", u32), ("src", CacheView * MAX_CACHES),
                ("dst", CacheView * MAX_CACHES)]


class KeyCache(ctypes.Structure):
    _fields_ = [("base", vp), ("dtype", ctypes.c_int), ("head_dim", u32), ("n_heads", u32),
                ("layout", ctypes.c_int), ("stride_page", sz), ("stride_slot", sz),
                ("stride_head", sz), ("pages", PageTable)]


class TriParams(ctypes.Structure):
    _fields_ = [("group", u32), ("q_mean", vp), ("q_abs_mean", vp), ("omega", vp),
                ("rope_theta", ctypes.c_double), ("freq_scale_sq", vp), ("offsets", vp),
                ("n_offsets", u32)]


class ScoreRow(ctypes.Structure):
    _fields_ = [("table_offset", u64), ("scores_offset", u64), ("n_slots", u32),
                ("prompt_len", u32), ("window", u32), ("round_start", u32),
                ("cache_row", ctypes.c_int32), ("table_stride", u32)]


class ScoreDesc(ctypes.Structure):
    _fields_ = [("scorer", ctypes.c_int), ("flags", u32), ("weight", ctypes.c_float),
                ("keys", KeyCache), ("tri", TriParams), ("heads_per_table", u32),
                ("n_rows", u32), ("rows", vp), ("slot_pos", vp), ("slot_pos_stride_table", sz),
                ("scores", vp), ("scores_stride_table", sz), ("cache_rows", vp)]


class TriStats(ctypes.Structure):
    _fields_ = [("n_layers", u32), ("n_q_heads", u32), ("head_dim", u32),
                ("rope_theta", ctypes.c_double), ("q_mean", vp), ("q_abs_mean", vp)]


P = ctypes.POINTER
_PROTOS = {
    "kve_status_string": (ctypes.c_char_p, [ctypes.c_int]),
    "kve_last_error": (ctypes.c_char_p, []),
    "kve_version": (ctypes.c_int, [P(u32)]),
    "kve_backend_from_name": (ctypes.c_int, [ctypes.c_char_p, P(ctypes.c_int)]),
    "kve_context_create": (ctypes.c_int, [ctypes.c_int, P(vp)]),
    "kve_context_destroy": (ctypes.c_int, [vp]),
    "kve_context_get_backend": (ctypes.c_int, [vp, P(ctypes.c_int)]),
    "kve_context_set_threads": (ctypes.c_int, [vp, ctypes.c_int]),
    "kve_context_get_threads": (ctypes.c_int, [vp, ctypes.POINTER(ctypes.c_int)]),
    "kve_context_set_stream": (ctypes.c_int, [vp, vp]),
    "kve_context_set_device": (ctypes.c_int, [vp, ctypes.c_int]),
    "kve_context_get_device": (ctypes.c_int, [vp, P(ctypes.c_int)]),
    "kve_context_synchronize": (ctypes.c_int, [vp]),
    "kve_schedule_capacity": (ctypes.c_int, [P(Schedule), u32, P(u32)]),
    "kve_state_create": (ctypes.c_int, [vp, P(StateDesc), vp, sz, P(vp)]),
    "kve_state_destroy": (ctypes.c_int, [vp]),
    "kve_state_admit": (ctypes.c_int, [vp, u32, u64, u32]),
    "kve_state_retire": (ctypes.c_int, [vp, u32]),
    "kve_state_append": (ctypes.c_int, [vp, u32, P(u32), P(u32), P(StepBuffers)]),
    "kve_state_draft": (ctypes.c_int, [vp, u32, vp, vp, u32, P(StepBuffers)]),
    "kve_state_append_device": (ctypes.c_int, [vp, u32, vp, vp, u32, P(StepBuffers)]),
    "kve_state_max_moves": (ctypes.c_int, [vp, u32, P(u32)]),
    "kve_state_rounds_due": (ctypes.c_int, [vp, u32, P(u32), P(u32), P(u32)]),
    "kve_state_rebuild": (ctypes.c_int, [vp, u32, u64, u32, u32, P(u32), u32, vp, sz]),
    "kve_state_get_layout": (ctypes.c_int, [vp, P(StateLayout)]),
    "kve_state_get_seq": (ctypes.c_int, [vp, u32, P(SeqInfo)]),
    "kve_state_read_slots": (ctypes.c_int, [vp, u32, P(ctypes.c_int32), sz]),
    "kve_state_read_digest": (ctypes.c_int, [vp, u32, P(u64)]),
    "kve_cache_write": (ctypes.c_int, [vp, P(CacheWriteDesc)]),
    "kve_evict": (ctypes.c_int, [vp, P(Batch), P(EvictOut), vp, sz]),
    "kve_digest": (ctypes.c_int, [vp, P(Batch), vp, P(u64)]),
    "kve_compact": (ctypes.c_int, [vp, P(CompactDesc)]),
    "kve_score": (ctypes.c_int, [vp, P(ScoreDesc)]),
    "kve_state_score": (ctypes.c_int, [vp, u32, P(u32), P(u32), u32, P(ScoreDesc), vp, sz,
                                       sz]),
    "kve_state_score_device": (ctypes.c_int, [vp, u32, vp, vp, u32, P(ScoreDesc), vp, sz, sz]),
    "kve_triattention_stats_load": (ctypes.c_int, [ctypes.c_char_p, P(TriStats)]),
    "kve_triattention_stats_free": (ctypes.c_int, [P(TriStats)]),
}
for _name, (_res, _args) in _PROTOS.items():
    _fn = getattr(lib, _name)
    _fn.restype, _fn.argtypes = _res, _args


def check(status: int, call: str) -> None:
    """Raise KvevictError for a failed status, with the library's message."""
    if status != 0:
        name = lib.kve_status_string(status).decode()
        raise KvevictError(status, name, lib.kve_last_error().decode(), call)


_v = u32()
check(lib.kve_version(ctypes.byref(_v)), "kve_version")
VERSION = (_v.value // 10000, _v.value // 100 % 100, _v.value % 100)
if VERSION[0] != 2:
    raise OSError("%s is kvevict %d.%d.%d; this package needs 2.x" % ((LIBRARY_PATH,) + VERSION))
