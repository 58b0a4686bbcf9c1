"""An independent float64 reference of kvevict's scorers (docs/SCORERS.md),
written from TriAttention's published formula (not from the library's phase
identity): invert RoPE on each key, take phi = arg(q_mean conj(k)), average
the cosines over the offsets grid, add the magnitude term; z-normalize per
query head over SPEC §3's candidates, max over the group. K-norm: -||k||."""

import numpy as np


def candidates(tab: np.ndarray, prompt: int, window: int) -> np.ndarray:
    """Boolean mask of SPEC §3's candidates of one slot table."""
    gen = np.flatnonzero((tab >= 0) & (tab >= prompt))
    mask = np.zeros(tab.shape, bool)
    if len(gen) <= window:
        return mask
    order = gen[np.argsort(tab[gen], kind="stable")]
    mask[order[:len(gen) - window]] = True
    return mask


def omega_of(head_dim: int, theta: float) -> np.ndarray:
    nf = head_dim // 2
    return theta ** (-2.0 * np.arange(nf, dtype=np.float64) / head_dim)


def unrope(k: np.ndarray, pos: np.ndarray, omega: np.ndarray) -> np.ndarray:
    """Pre-RoPE complex pairs of post-RoPE keys [n, d] at positions [n]."""
    nf = k.shape[1] // 2
    ang = pos[:, None].astype(np.float64) * omega[None, :]
    c, s = np.cos(ang), np.sin(ang)
    x1, x2 = k[:, :nf].astype(np.float64), k[:, nf:].astype(np.float64)
    # RoPE: y1 = x1 c - x2 s, y2 = x2 c + x1 s; its inverse:
    return (x1 * c + x2 * s) + 1j * (x2 * c - x1 * s)


def tri_raw(k: np.ndarray, pos: np.ndarray, t0: int, q_mean: np.ndarray, q_abs: np.ndarray,
            omega: np.ndarray, s2: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Raw scores [n] of keys [n, d] for one query head: the literal formula."""
    kc = unrope(k, pos, omega)
    qc = q_mean[:, 0].astype(np.float64) + 1j * q_mean[:, 1].astype(np.float64)
    amp = np.abs(qc)[None, :] * np.abs(kc)
    phi = np.angle(qc[None, :] * np.conj(kc))
    delta = (t0 - pos.astype(np.float64))[:, None] + offsets[None, :].astype(np.float64)
    phase = delta[:, :, None] * omega[None, None, :] + phi[:, None, :]
    trig = (amp[:, None, :] * s2[None, None, :] * np.cos(phase)).sum(axis=2).mean(axis=1)
    extra = ((q_abs.astype(np.float64) - np.abs(qc))[None, :] * np.abs(kc) * s2[None, :]).sum(1)
    return trig + extra


def tri_terms(k: np.ndarray, q_mean: np.ndarray, q_abs: np.ndarray, s2: np.ndarray) -> np.ndarray:
    """Sum of the magnitudes of a raw score's terms (the scale its float32
    rounding is measured against)."""
    nf = k.shape[1] // 2
    km = np.hypot(k[:, :nf].astype(np.float64), k[:, nf:].astype(np.float64))
    qc = np.hypot(q_mean[:, 0], q_mean[:, 1]).astype(np.float64)
    return (km * (qc + np.abs(q_abs - qc)) * np.abs(s2)).sum(axis=1)


def knorm_raw(k: np.ndarray) -> np.ndarray:
    return -np.sqrt((k.astype(np.float64) ** 2).sum(axis=1))


def znorm(raw: np.ndarray) -> np.ndarray:
    if raw.size == 0:
        return raw
    return (raw - raw.mean()) / max(raw.std(), 1e-6)


def table_scores(keys_of, tab: np.ndarray, prompt: int, window: int, heads, raw_of,
                 zn: bool) -> np.ndarray:
    """Scores of one table: keys_of(h, slots) -> keys [n, d]; raw_of(h, j, k,
    pos) -> raw [n] for query head j of KV head h; heads: [(h, [j...])]."""
    mask = candidates(tab, prompt, window)
    slots = np.flatnonzero(mask)
    out = np.zeros(tab.shape, np.float64)
    if len(slots) == 0:
        return out
    best = None
    for h, js in heads:
        k = keys_of(h, slots)
        for j in js:
            r = raw_of(h, j, k, tab[slots])
            r = znorm(r) if zn else r
            best = r if best is None else np.maximum(best, r)
    out[slots] = best
    return out
