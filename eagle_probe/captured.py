"""What a capture holds (`Capture`): a probe batch through a model as float64 NumPy arrays in
internal units, read by the views. NumPy only: `eagle_probe.fit` reads it without torch;
`eagle_probe.capture` fills it."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np


@dataclass(frozen=True)
class Capture:
    """One probe batch through one model. Arrays are float64 NumPy, internal units."""

    d: int
    n: int
    # block orientation (d + d', n + n') in both layouts; (T, E) below are those sizes
    Z: np.ndarray  # (L + 1, b, T, E)  residual stream: Z[0] input, Z[l + 1] after layer l
    scale: np.ndarray  # (b,)  prompt scale s (1 without normalisation)
    x: np.ndarray  # (L + 1, b, d, d')  implicit iterate before layer 0 … after layer L - 1
    dx_heads: np.ndarray  # (L, b, h, d, d')  each head's part of x_{l+1} - x_l
    linearity_deviation: np.ndarray  # (L + 1,)  relative nonlinearity of D_l in the query
    target: np.ndarray  # (b, d', n')  the true D, original units
    layout: str = "features"  # the model's token layout ("features" or "samples")
    # where each machine divides its own columns by its own ‖A^μ‖ (the paper's distributed
    # regime), the scale of every stream column (b, 1, E), block orientation; `scale` is then
    # that of the C/D columns (1). None: one scale per prompt
    units: np.ndarray | None = None
    copies: int = 1  # C/D copies on the stream (one per machine in the paper's distributed regime)

    @property
    def layers(self) -> int:
        return self.Z.shape[0] - 1

    @property
    def heads(self) -> int:
        return self.dx_heads.shape[2]

    def blocks(self, layer: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(A, B, C, D_slot) of the residual stream entering layer `layer` (L: the output); with
        C/D copies, C and D hold every copy (c n' columns)."""
        Z, d, n = self.Z[layer], self.d, self.n
        return Z[:, :d, :n], Z[:, d:, :n], Z[:, :d, n:], Z[:, d:, n:]

    def first(self, k: int) -> Capture:
        """The capture of the first k probe prompts (itself when there are no more)."""
        if k >= self.Z.shape[1]:
            return self
        return replace(
            self,
            Z=self.Z[:, :k],
            scale=self.scale[:k],
            units=None if self.units is None else self.units[:k],
            x=self.x[:, :k],
            dx_heads=self.dx_heads[:, :k],
            target=self.target[:k],
        )

    def a_norm2(self, layer: int) -> float:
        """The batch-max ‖A‖₂² of the A block entering `layer` (internal units), inf where the
        stream is not finite (an untrained control's may overflow at large sizes)."""
        return float(self.a_norms2(layer).max())

    def a_norms2(self, layer: int) -> np.ndarray:
        """Each probe prompt's ‖A‖₂² entering `layer` (b,), all inf where the stream is not
        finite; computed once per layer (an SVD per prompt), for every family and resample the
        views score on this capture. Read-only."""
        norms = self.__dict__.setdefault("_a_norms2", {})  # a cache on a frozen instance
        if layer not in norms:
            A = self.blocks(layer)[0]
            if np.isfinite(A).all():
                each = np.linalg.norm(A, ord=2, axis=(-2, -1)) ** 2
            else:
                each = np.full(A.shape[0], np.inf)
            each.flags.writeable = False
            norms[layer] = each
        return norms[layer]

    def normal_matrix(self) -> np.ndarray:
        """G = A_card ᵀ A_card = A Aᵀ of the input prompt: (b, d, d), computed once, read-only."""
        if "_normal_matrix" not in self.__dict__:
            A = self.blocks(0)[0]
            G = A @ A.swapaxes(-1, -2)
            G.flags.writeable = False
            self.__dict__["_normal_matrix"] = G  # a cache on a frozen instance
        return self.__dict__["_normal_matrix"]

    def normal_eigenvalues(self) -> np.ndarray:
        """The eigenvalues of `normal_matrix` per prompt (b, d), ascending, computed once (the
        spectral views each read λ_max over the batch), read-only."""
        if "_normal_eigenvalues" not in self.__dict__:
            eig = np.linalg.eigvalsh(self.normal_matrix())
            eig.flags.writeable = False
            self.__dict__["_normal_eigenvalues"] = eig
        return self.__dict__["_normal_eigenvalues"]

    def normal_rhs(self) -> np.ndarray:
        """A_card ᵀ b = A Bᵀ of the input prompt: (b, d, d'), computed once, read-only."""
        if "_normal_rhs" not in self.__dict__:
            A, B = self.blocks(0)[:2]
            rhs = A @ B.swapaxes(-1, -2)
            rhs.flags.writeable = False
            self.__dict__["_normal_rhs"] = rhs
        return self.__dict__["_normal_rhs"]
