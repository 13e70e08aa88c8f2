"""The resource regimes, one entry each: what a regime is, in one place.

A regime owns the shape of its network and of the algorithm it can run: how the plain prompt
Z = [[A, C], [B, 0]] (d + d', n + n') is laid out on the residual stream, which stream columns each
head's query, key and value read, whether the machines share one set of weights, how the prediction
is read back, which per-prompt scale keeps each head blind to what it must not see, its algorithm
families and views, its plant and the name of its shipped checkpoint. The model, the ensemble, the
views, the plant, the exporter and the command line read these entries; none of them branches on a
regime's name. Importable without torch (the command line's help lists the names).

The paper's three resource regimes (§B.4 of "Linear Transformers Implicitly Discover Unified
Numerical Algorithms"):

  centralized       every head reads the whole stream [[A, C], [B, D]] of width n + n'.
  distributed       the columns of X are split over M machines; machine μ holds
                    X^μ = [[A^μ, C], [B^μ, D]]: "C and D are replicated identically in each X^μ",
                    so the stream is M blocks of n/M + n' columns, width n + M n', block μ at
                    columns μ(n/M + n') … (μ + 1)(n/M + n') − 1. "The query, key, and value
                    matrices are restricted to data local to a single machine" and "a single set
                    of transformations is shared across all attention heads": head μ applies the
                    one W_Q, W_K, W_V to machine μ's block; its projection W_P^μ is free over the
                    whole stream, the only way machines talk. The prediction is the mean of the M
                    D copies.
  constrained       compute-limited (Fig. 1(A)): a single head whose query/key width r < n.

And one that is not the paper's, kept as a contrast:

  distributed-open  one head per machine whose query and key read only its own A^μ columns, but
                    whose value reads every machine's columns, with one shared C/D block (stream
                    width n + n') and a set of weights per head. Values crossing machines let the
                    network send A columns; eagle-probe's distributed models before the paper's
                    architecture was built (checkpoint format 1) are this regime.

Prompt scale. This project divides each prompt by a norm of A before the layers (`normalize`,
spectral by default; the paper's models see raw prompts, `normalize="none"`). Centralized and
constrained models divide the whole prompt by ‖A‖. A global ‖A‖ would be communication the paper's
distributed model does not have, so there each machine divides its own A^μ, B^μ columns by its own
‖A^μ‖ and the C/D copies stay in prompt units: head μ's scores then carry ρ_μ = ‖A^μ‖⁻², the
per-machine step normalisation of Algorithm 1, and every write into a C/D copy is in the units of
every other copy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Regime:
    """One resource regime (module text). `cfg` below is a `model.ModelConfig`."""

    name: str
    summary: str  # one line, for help texts and reports
    paper: bool  # the paper's architecture (False: this project's contrast)
    families: tuple[str, ...]  # algorithm families it admits (`fit.families`), the paper's first
    views: tuple[str, ...]  # views that read this regime's own structure
    checkpoint: str  # the shipped model's file under trained_models/
    machines: bool  # the columns are split over `cfg.machines` machines, one head each
    local_values: bool  # a head's value reads only its machine's block (Q and K always do)
    copies: bool  # C and D are replicated in every machine's block
    sharable: bool  # the machines may share one W_Q, W_K, W_V (`cfg.share_heads`)
    _qk: Callable[[Any], int]  # query/key width of a head
    _vp: Callable[[Any], int]  # value/projection width of a head
    # how its paper family's A/B update reads the Gram (`fit.geometry.Geometry.reading`):
    # "centralized" (A Aᵀ), "distributed" (each machine its own) or "constrained" (sketched)
    reading: str = "centralized"
    multi_head_label: str = ""  # how a report names a model with more heads than the paper's
    ranked: bool = False  # the query/key width is `cfg.rank`, which must not exceed n

    # --- sizes -----------------------------------------------------------------------------------

    def heads(self, cfg: Any) -> int:
        """Heads per layer when the config leaves them unset: one per machine, or one."""
        return cfg.machines if self.machines else 1

    def qk(self, cfg: Any) -> int:
        return self._qk(cfg)

    def vp(self, cfg: Any) -> int:
        return self._vp(cfg)

    def block(self, cfg: Any) -> int:
        """A/B columns per machine, n / M (n outside the machine regimes)."""
        return cfg.n // cfg.machines if self.machines else cfg.n

    def copies_of(self, cfg: Any) -> int:
        """How many copies of the C/D columns the stream holds."""
        return cfg.machines if self.copies else 1

    def width(self, cfg: Any) -> int:
        """Residual width E of the feature layout: n + n', or n + M n' with C/D copies."""
        return cfg.n + self.copies_of(cfg) * cfg.n_prime

    def head_input(self, cfg: Any) -> int:
        """Columns a head's W_Q, W_K, W_V read: its machine's block n/M + n' where values are
        local, the whole stream otherwise."""
        return self.block(cfg) + cfg.n_prime if self.local_values else self.width(cfg)

    def weight_heads(self, cfg: Any) -> int:
        """Head axis of the stored W_Q, W_K, W_V: 1 when the machines share them."""
        return 1 if self.sharable and cfg.share_heads else cfg.heads

    def check(self, cfg: Any) -> None:
        """Raise ValueError for a config this regime cannot build."""
        if self.machines:
            if cfg.n % cfg.machines:
                raise ValueError(
                    f"machines={cfg.machines} must divide n={cfg.n} (equal column blocks)"
                )
            if cfg.n_heads not in (None, cfg.machines):
                raise ValueError(
                    f"the {self.name} regime has one head per machine: n_heads must be "
                    f"{cfg.machines} (or unset), got {cfg.n_heads}"
                )
        if not self.sharable and not cfg.share_heads:
            raise ValueError(
                f"share_heads=False applies to the distributed regime only, not {self.name}"
            )
        if self.local_values and (cfg.qk_width is not None or cfg.vp_width is not None):
            raise ValueError(
                f"the {self.name} regime's heads read their machine's n/M + n' columns; "
                "qk_width and vp_width cannot be overridden"
            )
        if self.ranked and cfg.rank > cfg.n:
            raise ValueError(f"rank r={cfg.rank} must not exceed n={cfg.n}")

    # --- the stream's columns --------------------------------------------------------------------

    def stream_columns(self, cfg: Any) -> np.ndarray:
        """The plain prompt column behind every stream column: (E,) ints. Machine μ's block is
        [A^μ | C] at columns μ(n/M + n') …; without copies, the prompt's own order."""
        n, n_prime = cfg.n, cfg.n_prime
        if not self.copies:
            return np.arange(n + n_prime)
        b = self.block(cfg)
        cols = [
            np.concatenate([np.arange(mu * b, (mu + 1) * b), np.arange(n, n + n_prime)])
            for mu in range(cfg.machines)
        ]
        return np.concatenate(cols)

    def grouped(self, cfg: Any) -> np.ndarray:
        """The stream columns in block orientation: the n A/B columns in the prompt's order, then
        the C/D copies one after another, (E,) ints (the identity without copies). The views read
        the stream in this order: [[A, C^0 … C^{M−1}], [B, D^0 … D^{M−1}]]."""
        E = self.width(cfg)
        if not self.copies:
            return np.arange(E)
        b, w = self.block(cfg), self.block(cfg) + cfg.n_prime
        a = [(i // b) * w + i % b for i in range(cfg.n)]
        cd = [mu * w + b + k for mu in range(cfg.machines) for k in range(cfg.n_prime)]
        return np.asarray(a + cd)

    def machine_columns(self, cfg: Any, machine: int) -> np.ndarray:
        """Stream columns machine `machine` holds: its A/B block and, with copies, its C/D copy."""
        b = self.block(cfg)
        if self.copies:
            w = b + cfg.n_prime
            return np.arange(machine * w, (machine + 1) * w)
        return np.arange(machine * b, (machine + 1) * b)

    def reads(self, cfg: Any, role: str) -> np.ndarray:
        """Which stream columns each head's `role` ("qk" or "v") reads: (h, E) booleans."""
        E, h = self.width(cfg), cfg.heads
        out = np.ones((h, E), dtype=bool)
        if self.machines and (role == "qk" or self.local_values):
            out[:] = False
            for mu in range(h):
                out[mu, self.machine_columns(cfg, mu)] = True
        return out

    def selector(self, cfg: Any) -> np.ndarray | None:
        """(h, E, head_input) 0/1 matrices placing each head's local W_Q, W_K, W_V on its
        machine's stream columns (W_stream = selector @ W_local), or None where heads read the
        whole stream."""
        if not self.local_values:
            return None
        E, w = self.width(cfg), self.head_input(cfg)
        sel = np.zeros((cfg.heads, E, w))
        for mu in range(cfg.heads):
            sel[mu, self.machine_columns(cfg, mu), np.arange(w)] = 1.0
        return sel

    def describe(self, cfg: Any) -> str:
        """The architecture in one line, saying where it departs from the paper's."""
        if self.multi_head_label and cfg.heads > 1:
            return (
                f"{self.name}, multi-head variant: {cfg.heads} heads of query/key width "
                f"r = {cfg.rank} (the paper's compute-limited model has one head)"
            )
        text = self.summary
        if self.sharable and not cfg.share_heads:
            text += "; ablation: a set of W_Q, W_K, W_V per machine (the paper shares one)"
        return text


REGIMES: dict[str, Regime] = {
    r.name: r
    for r in (
        Regime(
            "centralized",
            "centralized: every head reads the whole stream (width n + n')",
            True,
            ("eagle",),
            (),
            "centralized.pt",
            machines=False,
            local_values=False,
            copies=False,
            sharable=False,
            _qk=lambda cfg: cfg.n + cfg.n_prime,
            _vp=lambda cfg: cfg.n + cfg.n_prime,
        ),
        Regime(
            "distributed",
            "distributed (the paper's §B.4): head μ's query, key and value read only machine "
            "μ's block [A^μ | C], C/D copied on every machine (width n + M n'), one W_Q, W_K, "
            "W_V shared by the machines, each projection free",
            True,
            ("eagle-distributed",),
            ("communication",),
            "distributed.pt",
            machines=True,
            local_values=True,
            copies=True,
            sharable=True,
            _qk=lambda cfg: cfg.n // cfg.machines + cfg.n_prime,
            _vp=lambda cfg: cfg.n // cfg.machines + cfg.n_prime,
            reading="distributed",
        ),
        Regime(
            "distributed-open",
            "distributed-open (not the paper's): head μ's query and key read machine μ's A^μ "
            "columns, its value every machine's; one C/D block (width n + n'), weights per head",
            False,
            ("eagle-distributed", "eagle-over-machines"),
            ("communication",),
            "distributed_open.pt",
            machines=True,
            local_values=False,
            copies=False,
            sharable=False,
            _qk=lambda cfg: cfg.n // cfg.machines,
            _vp=lambda cfg: cfg.n // cfg.machines + cfg.n_prime,
            reading="distributed",
        ),
        Regime(
            "constrained",
            "constrained (the paper's compute-limited model): one head of query/key width r",
            True,
            ("eagle-sketched",),
            ("sketch",),
            "constrained.pt",
            machines=False,
            local_values=False,
            copies=False,
            sharable=False,
            _qk=lambda cfg: cfg.rank,
            _vp=lambda cfg: cfg.rank + cfg.n_prime,
            reading="constrained",
            multi_head_label="multi-head constrained",
            ranked=True,
        ),
    )
}
NAMES = tuple(REGIMES)  # the names registered when the package is imported (the command line's)


def get(name: str) -> Regime:
    """The regime registered under `name`."""
    if name not in REGIMES:
        raise ValueError(f"unknown regime {name!r}; choose from {', '.join(REGIMES)}")
    return REGIMES[name]
