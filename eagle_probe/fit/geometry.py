"""The regime's shape, in one place: sizes, the token mask, how prompts are scaled and read out,
and how each regime's EAGLE step looks (S = I, a learned sketch, or column blocks).

Both token layouts are handled here in block orientation Z = [[A, C], [B, D]] (the capture's):
the sample layout's layer H ← H + Σ_h ((H W_QK^h Hᵀ) ⊙ M_s) H W_VP^h / n on H = Zᵀ is applied by
transposing in and out (`layer`). Its natural step family uses the same four directions as EAGLE
(A AᵀA, B AᵀA, A AᵀC, B AᵀC) but ties them by row rather than by column: one layer of the
isotropic sample-layout family W_QK = diag(q I_d, 0), W_VP = diag(v I_d, w I_d') moves the feature
rows A, C by −a A Aᵀ(·) with a = −q v / n and the label rows B, D by −c B Aᵀ(·) with c = −q w / n.
That is one GD++ layer (von Oswald et al. 2023): c is the gradient step on the implicit iterate, a
the preconditioning I − a G of the data; a = 0 is plain GD. In that layout `a_step` and `c_step`
(everywhere in the views) are these two steps. Both families share the card-notation filter
f_l = c_l m_l(λ)², m_{l+1} = m_l (1 − a_l λ m_l²) (`fit.polynomial.eagle_expansion`).

Everything here is plain NumPy: the extraction reads the model once (`eagle_probe.extract`) and
hands the views a `Geometry` and the products W_QK, W_VP as arrays.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from eagle_probe import regimes

# prompts per block of `Geometry.layer` (4,096 held-out prompts of an 8-head model: 0.23 s at once,
# 0.08 s in blocks of 64 to 256, one core)
LAYER_CHUNK = 128
# z0's memory, normalize, d, n, machines -> (weak reference to z0, its scales); Geometry.scales
_SCALES: dict[tuple, tuple[weakref.ref, np.ndarray]] = {}


def prompt_scale(
    z0: np.ndarray, normalize: str, d: int, n: int, machines: int | None = None
) -> np.ndarray:
    """`eagle_probe.model.prompt_scale` in NumPy: the scale prompts z0 (b, d + d', n + n') are
    divided by, the chosen norm of A, (b, 1, 1); where each of `machines` machines scales its own
    columns, per column (b, 1, n + n'): ‖A^μ‖ on machine μ's A/B columns, 1 on the C/D columns."""
    b = z0.shape[0]
    if normalize == "none":
        return np.ones((b, 1, 1))
    A = z0[:, :d, :n]
    if machines is not None:  # each machine's own block: (b, M, d, n / M)
        A = A.reshape(b, d, machines, n // machines).swapaxes(1, 2)
    ord_ = "fro" if normalize == "frobenius" else 2
    norm = np.maximum(np.linalg.norm(A, ord=ord_, axis=(-2, -1)), np.finfo(float).tiny)
    if machines is None:
        return norm[:, None, None]
    ones = np.ones((b, z0.shape[-1] - n))
    return np.concatenate([np.repeat(norm, n // machines, axis=1), ones], axis=1)[:, None, :]


@dataclass(frozen=True, kw_only=True)
class Geometry:
    """How one model's architecture shapes the algorithm it can run."""

    regime: str  # a name of `eagle_probe.regimes` (the model's)
    d: int  # rows of A (features)
    n: int  # columns of A (samples)
    d_prime: int  # rows of B, D (outputs)
    n_prime: int  # columns of C, D (queries)
    heads: int  # heads per layer
    layers: int  # attention layers
    mask: np.ndarray  # (T, T) token mask M: M[i, j] = 1 where token i attends to token j
    readout: float = -1.0  # prediction = readout · D slot (the slot carries −D_EAGLE)
    normalize: str = "none"  # "none", "frobenius" or "spectral": prompt divided by this norm of A
    machines: int = 1  # distributed regimes: column blocks
    projector: np.ndarray | None = None  # constrained: (L, n, n) projector onto the sketch range
    # the A/B update's Gram: "distributed" (each machine's own), "centralized" or "constrained"
    # (through the sketch); "" is the regime's own
    reading: str = ""
    layout: str = "features"  # token layout: "features" (tokens = rows of Z) or "samples" (H = Zᵀ)
    # C/D copies on the stream, one per machine in the paper's distributed regime: the stream is
    # read grouped, [[A, C^0 … C^{c−1}], [B, D^0 … D^{c−1}]] (`Regime.grouped`), and the
    # prediction is the mean of the D copies
    copies: int = 1
    # each machine divides its own A^μ, B^μ columns by its own ‖A^μ‖ and the C/D columns are not
    # scaled (`regimes` module text); False: one scale for the whole prompt
    local_scale: bool = False

    def __post_init__(self) -> None:
        if not self.reading:
            object.__setattr__(self, "reading", regimes.get(self.regime).reading)

    @property
    def tokens(self) -> int:
        return self.d + self.d_prime

    @property
    def width(self) -> int:
        """Residual width of the feature layout: n + c n' (c C/D copies)."""
        return self.n + self.copies * self.n_prime

    @property
    def samples(self) -> bool:
        """True in the sample layout (tokens are the n + n' samples, the stream is H = Zᵀ)."""
        return self.layout == "samples"

    @property
    def split(self) -> tuple[int, int]:
        """How the residual coordinates of the products W_QK, W_VP split into two kinds: (n, n')
        sample/query columns in the feature layout, (d, d') features/labels in the sample one."""
        return (self.d, self.d_prime) if self.samples else (self.n, self.copies * self.n_prime)

    @property
    def coords(self) -> tuple[str, str]:
        """Names of the two coordinate kinds of the products: A/C columns, or X/Y (x and y of
        the sample rows [x, y])."""
        return ("X", "Y") if self.samples else ("A", "C")

    @property
    def key_scale(self) -> float:
        """Factor on the attention scores: 1/n in the sample layout (mean over the n keys)."""
        return 1.0 / self.n if self.samples else 1.0

    @property
    def step_sign(self) -> float:
        """The sign from a label step as the prediction sees it to the step on the stream's label
        rows B, D (`eagle_step`): the sample layout states its steps in the readout's frame, so a
        downhill step is positive whichever sign the model reads its prediction with (−1 for a
        model that reads +D_slot); 1 in the feature layout, whose steps are stated for the
        negated D slot (`eagle_probe.model`)."""
        return -1.0 if self.samples and self.readout > 0 else 1.0

    @property
    def pairs(self) -> tuple[str, str]:
        """Which blocks share the step a and which the step c: EAGLE ties by column (A, B | C, D),
        the sample-layout family by row (A, C | B, D)."""
        return ("AC", "BD") if self.samples else ("AB", "CD")

    def prompt_scale(self, z0: np.ndarray) -> np.ndarray:
        """Per-prompt norm of A the whole prompt is divided by before the first layer: (b,),
        read-only where a norm is taken. A model whose machines scale their own columns has none
        (`scales`)."""
        if self.local_scale:
            raise ValueError("each machine scales its own columns: read Geometry.scales")
        return self.scales(z0)[:, 0, 0]

    def scales(self, z0: np.ndarray) -> np.ndarray:
        """The scale each prompt column is divided by (`prompt_scale`, the module function): (b,
        1, 1) where one scale divides the prompt, (b, 1, n + n') where each machine divides its
        own A^μ, B^μ columns by ‖A^μ‖ (the C/D columns by 1).

        The spectral norm costs an SVD per prompt and every view asks for it on the same
        held-out arrays or their first rows (`HeldOut.first`), so it is kept for as long as the
        array `z0` lives, keyed by its memory: a later array on the same memory with as many rows
        or fewer gets the first rows of the kept scales (prompt arrays are never modified in
        place)."""
        machines = self.machines if self.local_scale else None
        if self.normalize == "none":
            return prompt_scale(z0, self.normalize, self.d, self.n, machines)
        b = z0.shape[0]
        key = (z0.__array_interface__["data"][0], z0.strides, z0.shape[1:], z0.dtype.str)
        key += (self.normalize, self.d, self.n, machines)
        hit = _SCALES.get(key)
        if hit is not None and hit[0]() is not None and hit[1].shape[0] >= b:
            return hit[1][:b]
        scale = prompt_scale(z0, self.normalize, self.d, self.n, machines)
        scale.flags.writeable = False
        try:
            # dropped with its array, unless a later, longer array on the same memory replaced it
            ref = weakref.ref(
                z0,
                lambda r, key=key: _SCALES.pop(key) if _SCALES.get(key, (None,))[0] is r else None,
            )
        except TypeError:  # not weak-referenceable: no cache
            return scale
        _SCALES[key] = (ref, scale)
        return scale

    def internal(self, z0: np.ndarray) -> np.ndarray:
        """Prompts z0 (b, d + d', n + n') as the first layer sees them, in block orientation:
        divided by their scales, the C/D columns copied `copies` times (b, T, E)."""
        Z = z0 / self.scales(z0)
        if self.copies == 1:
            return Z
        return np.concatenate([Z[..., : self.n]] + [Z[..., self.n :]] * self.copies, axis=-1)

    def d_scale(self, scales: np.ndarray) -> np.ndarray:
        """The part of `scales` (b, 1, 1) or (b, 1, n + n') on the D columns: (b, 1, 1 or n')."""
        return scales if scales.shape[-1] == 1 else scales[..., self.n :]

    def read_d(self, D: np.ndarray) -> np.ndarray:
        """The D estimate (…, d', n') of D slots (…, d', c n'): the mean of the c copies."""
        if self.copies == 1:
            return D
        return D.reshape(*D.shape[:-1], self.copies, self.n_prime).mean(-2)

    def blocks(self, Z: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(A, B, C, D) views of a stream (…, T, E)."""
        d, n = self.d, self.n
        return Z[..., :d, :n], Z[..., d:, :n], Z[..., :d, n:], Z[..., d:, n:]

    # --- the network's own forward, from products ------------------------------------------------

    def layer(self, Z: np.ndarray, qk: np.ndarray, vp: np.ndarray) -> np.ndarray:
        """One layer Z + Σ_h ((Z W_QK^h Zᵀ) ⊙ M) Z W_VP^h for Z (b, T, E), qk/vp (h, E, E);
        in the sample layout the same on H = Zᵀ with the scores times 1/n, Z returned as blocks.

        Token layout: LAYER_CHUNK prompts at a time, the same numbers (every product is per
        prompt) about three times faster on thousands of prompts, whose (b, h, T, T) scores
        would not stay in cache. The mask, the merged heads and the route are worked out once
        for all the blocks."""
        plan = self._layer_plan(Z.shape[-2:], qk, vp)
        if not self.samples and Z.shape[0] > LAYER_CHUNK:
            parts = [
                self._layer(Z[i : i + LAYER_CHUNK], *plan) for i in range(0, len(Z), LAYER_CHUNK)
            ]
            return np.concatenate(parts)
        return self._layer(Z, *plan)

    def _layer_plan(
        self, shape: tuple[int, ...], qk: np.ndarray, vp: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """What `layer` reads of the products and the mask, for streams of shape (…, T, E) in
        block orientation: (mask with the key scale, merged qk, merged vp, the key weights m
        where the layer goes through the key Gram, else None)."""
        T, E = shape[::-1] if self.samples else shape  # the stream as the layers see it
        mask = self.mask * self.key_scale
        qk, vp = merge_heads(qk, vp)
        h = qk.shape[0]
        keys = mask[0] if mask.shape[0] and (mask == mask[0]).all() else None
        if keys is not None and not _gram_flops(keys, T, E, h) < h * 2.0 * T * E * (T + E):
            keys = None
        return mask, qk, vp, keys

    def _layer(
        self, Z: np.ndarray, mask: np.ndarray, qk: np.ndarray, vp: np.ndarray, keys
    ) -> np.ndarray:
        """`layer` on one block of prompts, from its `_layer_plan`."""
        if Z.size and np.isnan(Z).all():
            # a stream that has overflowed to NaN everywhere (an untrained control at large
            # sizes) stays NaN everywhere (Z plus its update): the layer is not computed
            return np.full(Z.shape, np.nan)
        H = Z.swapaxes(-1, -2) if self.samples else Z  # the stream as the layers see it
        # batched matmuls, not a three-operand einsum: the same sums, an order of magnitude faster
        b, T, E = H.shape
        h = qk.shape[0]
        if keys is not None:
            # every token attends to the same keys with the same weights m (the visible mask):
            # ((H W_QK Hᵀ) ⊙ 1 mᵀ) H = H W_QK G with G = Hᵀ diag(m) H (E × E), so the layer is
            # H (I + Σ_h W_QK^h G W_VP^h): no (T, T) scores, and one G for every head
            on = np.flatnonzero(keys)
            Hk = H[:, on]  # (b, K, E)
            G = (Hk * keys[on][:, None]).swapaxes(-1, -2) @ Hk  # (b, E, E)
            M = (qk[0] @ G) @ vp[0]
            for head in range(1, h):
                M += (qk[head] @ G) @ vp[head]
            H = H + H @ M
            return H.swapaxes(-1, -2) if self.samples else H
        scores = (H[:, None] @ qk @ H[:, None].swapaxes(-1, -2)) * mask  # (b, h, T, T)
        heads = (scores @ H[:, None]).swapaxes(1, 2).reshape(b, T, h * E)  # (b, T, h E)
        H = H + heads @ vp.reshape(h * E, vp.shape[-1])  # Σ_h (scores_h H) W_VP^h
        return H.swapaxes(-1, -2) if self.samples else H

    def stream(self, z0: np.ndarray, qk: np.ndarray, vp: np.ndarray) -> np.ndarray:
        """Residual stream of the products qk, vp (L, h, E, E) from prompts z0 (b, T, E) in prompt
        units: (L + 1, b, T, E) in internal units (the prompt divided by its scale)."""
        Z = [self.internal(z0)]
        with np.errstate(over="ignore", invalid="ignore"):
            for layer in range(qk.shape[0]):
                Z.append(self.layer(Z[-1], qk[layer], vp[layer]))
        return np.stack(Z)

    def predict(self, z0: np.ndarray, qk: np.ndarray, vp: np.ndarray) -> np.ndarray:
        """The prediction of D (b, d', n') of the products qk, vp in prompt units (`stream`'s last
        layer, without keeping and stacking the others)."""
        Z = self.internal(z0)
        with np.errstate(over="ignore", invalid="ignore"):
            for layer in range(qk.shape[0]):
                Z = self.layer(Z, qk[layer], vp[layer])
        return self.readout_of(Z, z0)

    def readout_of(self, Z: np.ndarray, z0: np.ndarray) -> np.ndarray:
        """Prediction (b, d', n') in prompt units from a final stream Z (b, T, E) in internal
        units."""
        s = self.d_scale(self.scales(z0))
        with np.errstate(over="ignore", invalid="ignore"):
            return self.readout * self.read_d(Z[:, self.d :, self.n :]) * s

    # --- EAGLE's shape in this regime ------------------------------------------------------------

    def gram(self, A: np.ndarray, layer: int) -> np.ndarray:
        """AᵀA as the regime's A/B update sees it: (b, n, n)."""
        return self.gram_map(A.swapaxes(-1, -2) @ A, layer)

    def gram_map(self, K: np.ndarray, layer: int) -> np.ndarray:
        """The linear map from AᵀA to the regime's Gram (…, n, n): P K P with the sketch
        projector P, K restricted to the machines' diagonal blocks, or K itself."""
        if self.reading == "constrained" and self.projector is not None:
            P = self.projector[layer]
            return P @ K @ P
        if self.reading == "distributed":
            ids = np.arange(self.n) // (self.n // self.machines)
            return K * (ids[:, None] == ids[None, :])
        return K

    def sketch_is_identity(self, layer: int) -> bool:
        """The layer's sketch projector is I (relative Frobenius within IDENTITY_TOL): the heads
        together see every direction, and the sketched step is EAGLE's own."""
        if self.projector is None:
            return True
        P = np.asarray(self.projector[layer], dtype=np.float64)
        return bool(np.linalg.norm(P - np.eye(P.shape[0])) <= IDENTITY_TOL * np.sqrt(P.shape[0]))

    @property
    def sketched(self) -> bool:
        """A constrained reading whose projector is not I in some layer."""
        return (
            self.reading == "constrained"
            and self.projector is not None
            and not all(self.sketch_is_identity(layer) for layer in range(len(self.projector)))
        )

    def query_operator(self, layer: int) -> np.ndarray:
        """The (n, n) operator between Aᵀ and A in the C/D update: the sketch projector or I."""
        if self.reading == "constrained" and self.projector is not None:
            return self.projector[layer]
        return np.eye(self.n)

    def eagle_features(self, Z: np.ndarray, layer: int) -> tuple[np.ndarray, ...]:
        """The four EAGLE directions of a stream Z (b, T, E): A K, B K, A P Aᵀ C, B P Aᵀ C."""
        A, B, C, _ = self.blocks(Z)
        K = self.gram(A, layer)
        if self.copies > 1:
            FC, FD = self._copied_query_features(A, B, C)
            return A @ K, B @ K, FC, FD
        AtC = self.query_operator(layer) @ (A.swapaxes(-1, -2) @ C)  # (b, n, n')
        return A @ K, B @ K, A @ AtC, B @ AtC

    def _copied_query_features(
        self, A: np.ndarray, B: np.ndarray, C: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """With a C copy per machine, machine μ sees only its own copy C^μ: the C/D directions
        Σ_μ A^μ A^μᵀ C^μ and Σ_μ B^μ A^μᵀ C^μ (b, ·, n'), written into every copy (b, ·, c n').
        Equal copies give A Aᵀ C and B Aᵀ C, the centralized directions."""
        b, d = A.shape[:2]
        M, size, n_prime = self.copies, self.n // self.copies, self.n_prime
        Ab = A.reshape(b, d, M, size).swapaxes(1, 2)  # (b, M, d, n/M)
        Bb = B.reshape(b, B.shape[1], M, size).swapaxes(1, 2)  # (b, M, d', n/M)
        Cm = C.reshape(b, d, M, n_prime).swapaxes(1, 2)  # (b, M, d, n')  machine μ's copy
        AtC = Ab.swapaxes(-1, -2) @ Cm  # (b, M, n/M, n')
        FC, FD = (Ab @ AtC).sum(1), (Bb @ AtC).sum(1)
        return np.tile(FC, (1, 1, M)), np.tile(FD, (1, 1, M))

    def eagle_step(self, Z: np.ndarray, layer: int, a: float, c: float) -> np.ndarray:
        """One EAGLE layer on Z (b, T, E) with A-step a and C-step c, the D slot negated:
        A −= a A K, B −= a B K, C −= c A P Aᵀ C, D_slot −= c B P Aᵀ C. Sample layout: the row-tied
        family, A −= a A AᵀA, C −= a A AᵀC, B −= σ c B AᵀA, D_slot −= σ c B AᵀC, σ = `step_sign`
        (module text)."""
        FA, FB, FC, FD = self.eagle_features(Z, layer)
        d, n = self.d, self.n
        sc = self.step_sign * c
        step = dict(zip("ABCD", (a, sc, a, sc) if self.samples else (a, a, c, c), strict=True))
        out = Z.copy()
        with np.errstate(over="ignore", invalid="ignore"):
            out[:, :d, :n] -= step["A"] * FA
            out[:, d:, :n] -= step["B"] * FB
            out[:, :d, n:] -= step["C"] * FC
            out[:, d:, n:] -= step["D"] * FD
        return out

    def run_eagle(self, Z0: np.ndarray, a_steps, c_steps) -> np.ndarray:
        """EAGLE from Z0 (b, T, E, internal units): (L + 1, b, T, E)."""
        Z = [Z0]
        for layer, (a, c) in enumerate(zip(a_steps, c_steps, strict=True)):
            Z.append(self.eagle_step(Z[-1], layer, a, c))
        return np.stack(Z)

    def to_json(self) -> dict:
        # the C/D copies and per-machine scales are named where a model has them
        own = {"copies": self.copies, "local_scale": self.local_scale} if self.copies > 1 else {}
        return own | {
            "regime": self.regime,
            "reading": self.reading,
            "sizes": {"d": self.d, "n": self.n, "d_prime": self.d_prime, "n_prime": self.n_prime},
            "heads": self.heads,
            "layers": self.layers,
            "normalize": self.normalize,
            "machines": self.machines,
            "layout": self.layout,
        }


# a sketch projector this close to I (relative Frobenius) is the identity: no sketch terms, and
# the sketched family's step is the centralized one
IDENTITY_TOL = 1e-8


def merge_heads(qk: np.ndarray, vp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Products (h, E, E) with heads of equal W_QK merged into one head whose W_VP is the sum of
    theirs: Σ_h S H W_VP^h = S H Σ_h W_VP^h for one score matrix S. The same layer (to round-off)
    with fewer heads; a planted EAGLE layer's heads all share one W_QK."""
    h = qk.shape[0]
    if h < 2:
        return qk, vp
    keep: list[int] = []
    summed: dict[int, np.ndarray] = {}
    for head in range(h):
        same = next((k for k in keep if np.array_equal(qk[k], qk[head])), None)
        if same is None:
            keep.append(head)
        else:
            summed[same] = summed.get(same, vp[same]) + vp[head]
    if len(keep) == h:
        return qk, vp
    return qk[keep], np.stack([summed.get(k, vp[k]) for k in keep])


def _gram_flops(keys: np.ndarray, T: int, E: int, heads: int) -> float:
    """Multiply-adds of one prompt's layer through the key Gram G (`Geometry.layer`): G, the
    heads' W_QK G W_VP and the stream times their sum (through the scores: 2 h T E (T + E))."""
    return float(np.count_nonzero(keys) * E * E + 2 * heads * E**3 + T * E * E)


def sketch_projectors(qk: np.ndarray, n: int, rtol: float = 1e-6) -> np.ndarray:
    """Constrained regime: per layer the projector onto the range of Σ_h W_QK^h's A-block,
    the learned sketch S Sᵀ of EAGLE's compute-limited step: (L, n, n)."""
    out = []
    for W in qk.sum(1)[:, :n, :n]:
        U, s, _ = np.linalg.svd(W)
        k = int(np.sum(s > rtol * max(s.max(), 1e-300)))
        out.append(U[:, :k] @ U[:, :k].T)
    return np.stack(out)
