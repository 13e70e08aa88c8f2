"""The algorithm families the views read, behind one contract (a registry, like the views).

A family is one algorithm with 2L free step sizes (a_l, c_l per layer). It knows

- `geometry(geo)`: the `Geometry` whose `eagle_step` runs it (the reading of the A/B update and
  of the C/D update), so every view that steps, runs or fits EAGLE runs *this* family;
- `basis(geo, head, qk_head)`: the span of W_QK and W_VP one head of it may have (the weight
  projection), with the names of the levels, and `steps(geo, levels)` the steps they imply;
- `products(geo, a_steps, c_steps, projectors=None)`: products (L, h, E, E) that run it exactly
  (a plant, loaded into a real model by `layouts.plant`);
- `export`: the regime the exported solver runs it in (`solver_template.REGIME`).

Block orientation, A is d × n, machine μ owns the column block A^μ, G = A Aᵀ, G^μ = A^μ A^μᵀ:

    eagle                A −= a G A, B −= a (B Aᵀ) A, C −= c G C, D += c B Aᵀ C
    eagle-distributed    A^μ −= a G^μ A^μ, B^μ −= a (B^μ A^μᵀ) A^μ (each machine, its own
                         columns), C −= c Σ_μ G^μ C, D += c Σ_μ B^μ A^μᵀ C: only the C/D results
                         cross machines, (d + d') n' floats per machine per round
    eagle-over-machines  eagle's update computed across machines (Σ_μ G^μ A = G A): every
                         machine needs every other's A columns, d n / M floats per machine
    eagle-sketched       with the layer's rank-r projector P = S Sᵀ: A −= a (A P Aᵀ) A P,
                         B −= a (B P Aᵀ) A P, C −= c (A P Aᵀ) C, D += c (B P Aᵀ) C

The D slot of the network carries −D (`eagle_probe.model`), so the products write −c into it. The
distributed steps are in the sum-over-machines convention above: the paper's per-machine
average C = mean_μ (C − γ G^μ C) is c = γ / M.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from eagle_probe import regimes
from eagle_probe.fit.geometry import Geometry

# rank cut of a head's W_QK A-block: its sketch range (relative to its largest singular value)
RANGE_RTOL = 1e-6


def embed(
    geo: Geometry, a_part: np.ndarray | None, c_part: float = 0.0, head: int | None = None
) -> np.ndarray:
    """diag(a_part, c_part I) as an E × E matrix (a_part k × k over the first coordinate kind,
    or None for 0). With a C/D copy per machine and a head given, the C part is machine `head`'s
    copy written into every copy (rows of copy μ, columns of all copies): what machine μ sends
    of its C/D result."""
    k, rest = geo.split
    M = np.zeros((k + rest, k + rest))
    if a_part is not None:
        M[:k, :k] = a_part
    if geo.copies > 1 and head is not None:
        n_prime = geo.n_prime
        rows = slice(k + head * n_prime, k + (head + 1) * n_prime)
        M[rows, k:] = c_part * np.tile(np.eye(n_prime), (1, geo.copies))
    else:
        M[k:, k:] = c_part * np.eye(rest)
    return M


def own_block(geo: Geometry, machine: int) -> np.ndarray:
    """The n × n identity on machine `machine`'s columns (zero elsewhere)."""
    size = geo.n // geo.machines
    own = np.zeros((geo.n, geo.n))
    sl = slice(machine * size, (machine + 1) * size)
    own[sl, sl] = np.eye(size)
    return own


def head_range(qk_head: np.ndarray, n: int) -> np.ndarray:
    """Projector onto the range of a head's W_QK A-block (its learned sketch S Sᵀ): (n, n)."""
    U, s, _ = np.linalg.svd(qk_head[:n, :n])
    r = int(np.sum(s > RANGE_RTOL * max(float(s.max()), 1e-300)))
    return U[:, :r] @ U[:, :r].T


def random_sketches(n: int, r: int, layers: int, rng: np.random.Generator) -> np.ndarray:
    """Per layer an n × r sketch S with orthonormal columns (a random orthogonal draw):
    (L, n, r)."""
    return np.stack([np.linalg.qr(rng.standard_normal((n, r)))[0] for _ in range(layers)])


@dataclass(frozen=True)
class Family:
    """One algorithm family (module text)."""

    name: str
    reading: str  # Geometry.reading that runs its step
    export: str  # solver_template.REGIME of its exported solver
    update: str  # the update, one line
    sends: str  # what crosses machines per round ("" outside the distributed regime)
    # (geo, head, qk_head) -> (W_QK basis, W_VP basis, level names of each)
    _basis: Callable[[Geometry, int, np.ndarray], tuple[list, list, tuple, tuple]]
    structure: str = ""  # its regime terms in the term library ("local", "sketch"; `fit.library`)

    @property
    def regimes(self) -> tuple[str, ...]:
        """The model regimes that admit it: those listing it in `Regime.families`."""
        return tuple(r.name for r in regimes.REGIMES.values() if self.name in r.families)

    def terms(self, structures: tuple[str, ...] | None = None) -> tuple[str, ...]:
        """The term names of its update in the term library (`fit.library`): EAGLE's four, with
        the family's regime structure on the ones that carry it. `structures`: the regime terms
        the layer's library holds (a sketch equal to I is none: the family is then eagle's)."""
        tag = self.structure if structures is None or self.structure in structures else ""
        local = {"A+=AAtA", "B+=BAtA"} if tag == "local" else set()
        return tuple(
            f"{t}@{tag}" if tag and (tag == "sketch" or t in local) else t
            for t in ("A+=AAtA", "B+=BAtA", "C+=AAtC", "D+=BAtC")
        )

    def geometry(self, geo: Geometry, projector: np.ndarray | None = None) -> Geometry:
        """The geometry that runs this family on `geo`'s model (projector: the sketched
        family's per-layer projectors, (L, n, n); default: the geometry's own)."""
        if self.reading == "constrained":
            P = geo.projector if projector is None else projector
            return replace(geo, reading="constrained", projector=P)
        return replace(geo, reading=self.reading, projector=None)

    def basis(self, geo: Geometry, head: int, qk_head: np.ndarray) -> tuple[list, list]:
        """Basis matrices (E × E) of the head's W_QK and W_VP in this family."""
        qk, vp, _, _ = self._basis(geo, head, qk_head)
        return qk, vp

    def level_names(self, geo: Geometry) -> tuple[tuple, tuple]:
        """Names of the W_QK and W_VP levels `basis` returns, in order."""
        E = sum(geo.split)
        _, _, qn, vn = self._basis(geo, 0, np.eye(E))
        return qn, vn

    def steps(self, geo: Geometry, heads) -> tuple[np.ndarray, np.ndarray]:
        """The steps (a_l, c_l) implied by the projected levels, a DataFrame with columns
        layer, q, v, w (one row per head): a = −Σ_h q v, c = −Σ_h q w (internal units; the
        sample layout's scores carry 1/n). Machine-local families move one machine's columns
        per head and add one machine's share of Σ_μ A^μ A^μᵀ C: with equal levels that is one
        step with the per-head level, so their steps are the means over heads."""
        a = (-heads.q * heads.v * geo.key_scale).groupby(heads.layer).sum().to_numpy()
        c = (-heads.q * heads.w * geo.key_scale).groupby(heads.layer).sum().to_numpy()
        c = geo.step_sign * c  # the sample layout's label step in the readout's frame
        if geo.machines > 1:
            a, c = a / geo.heads, c / geo.heads
        return a, c

    def products(
        self, geo: Geometry, a_steps, c_steps, projectors: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Products W_QK, W_VP (L, h, E, E) whose layers run this family exactly with the given
        steps, for a model of `geo`'s shape (`geo.heads` heads; each carries 1/h of the value
        where heads share a step). Sketched: `projectors` (L, n, n), default `geo.projector`."""
        L, h, n = len(a_steps), geo.heads, geo.split[0]
        E = sum(geo.split)
        if len(c_steps) != L:
            raise ValueError(f"need one c-step per a-step, got {L} and {len(c_steps)}")
        qk, vp = np.zeros((L, h, E, E)), np.zeros((L, h, E, E))
        for layer, (a, c) in enumerate(zip(a_steps, c_steps, strict=True)):
            a, c = float(a) / geo.key_scale, geo.step_sign * float(c) / geo.key_scale
            for head in range(h):
                if self.name == "eagle":
                    qk[layer, head] = embed(geo, np.eye(n))
                    vp[layer, head] = embed(geo, -a / h * np.eye(n), -c / h)
                elif self.name == "eagle-distributed":
                    own = own_block(geo, head)
                    qk[layer, head] = embed(geo, own)
                    vp[layer, head] = embed(geo, -a * own, -c, head)
                elif self.name == "eagle-over-machines":
                    qk[layer, head] = embed(geo, own_block(geo, head))
                    vp[layer, head] = embed(geo, -a * np.eye(n), -c)
                elif self.name == "eagle-sketched":
                    P = (geo.projector if projectors is None else projectors)[layer]
                    qk[layer, head] = embed(geo, P)
                    vp[layer, head] = embed(geo, -a / h * P, -c / h)
                else:  # pragma: no cover - every registered family is handled above
                    raise ValueError(f"family {self.name!r} has no plant")
        return qk, vp


def _isotropic(geo: Geometry, head: int, qk_head: np.ndarray):
    eye, c_only = np.eye(geo.split[0]), embed(geo, None, 1.0)
    return [embed(geo, eye), c_only], [embed(geo, eye), c_only], ("q", "q_c"), ("v", "w")


def _local(geo: Geometry, head: int, qk_head: np.ndarray):
    own = embed(geo, own_block(geo, head))
    return [own], [own, embed(geo, None, 1.0, head)], ("q",), ("v", "w")


def _over_machines(geo: Geometry, head: int, qk_head: np.ndarray):
    own, eye = own_block(geo, head), np.eye(geo.n)
    return [embed(geo, own)], [embed(geo, eye), embed(geo, None, 1.0)], ("q",), ("v", "w")


def _sketched(geo: Geometry, head: int, qk_head: np.ndarray):
    P, c_only = embed(geo, head_range(qk_head, geo.split[0])), embed(geo, None, 1.0)
    return [P, c_only], [P, c_only], ("q", "q_c"), ("v", "w")


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family(
            "eagle",
            "centralized",
            "centralized",
            "A −= a A AᵀA, B −= a B AᵀA, C −= c A AᵀC, D_slot −= c B AᵀC",
            "",
            _isotropic,
        ),
        Family(
            "eagle-distributed",
            "distributed",
            "distributed",
            "per machine μ: A^μ −= a A^μ A^μᵀA^μ, B^μ −= a B^μ A^μᵀA^μ; "
            "C −= c Σ_μ A^μ A^μᵀC, D_slot −= c Σ_μ B^μ A^μᵀC",
            "the C/D results only: (d + d') n' floats per machine per round",
            _local,
            "local",
        ),
        Family(
            "eagle-over-machines",
            "centralized",
            "centralized",
            "the centralized update across machines: A −= a Σ_μ A^μ A^μᵀ A (every column), "
            "B −= a Σ_μ B^μ A^μᵀ A, C −= c Σ_μ A^μ A^μᵀC, D_slot −= c Σ_μ B^μ A^μᵀC",
            "A and B columns as well: about (d + d') n / M floats per machine per round",
            _over_machines,
        ),
        Family(
            "eagle-sketched",
            "constrained",
            "constrained",
            "with the layer's sketch projector P: A −= a A P AᵀA P, B −= a B P AᵀA P, "
            "C −= c A P AᵀC, D_slot −= c B P AᵀC",
            "",
            _sketched,
            "sketch",
        ),
    )
}


def term_structures(geo: Geometry, layer: int) -> dict[str, list]:
    """The regime terms' matrices (`fit.library.Factors.structures`) of a layer of this model:
    the machines' column selectors for a distributed model, the layer's sketch projector for a
    constrained one (none where it is the identity: the heads together see every direction)."""
    if geo.samples:
        return {}
    out: dict[str, list] = {}
    if geo.machines > 1:
        selectors = [own_block(geo, mu) for mu in range(geo.machines)]
        out["local"] = [(sel, sel) for sel in selectors]
    if geo.projector is not None and not geo.sketch_is_identity(layer):
        out["sketch"] = [(np.asarray(geo.projector[layer], dtype=np.float64),) * 2]
    return out


def get(name: str) -> Family:
    """The family registered under `name`."""
    if name not in FAMILIES:
        raise ValueError(f"unknown family {name!r}; choose from {', '.join(FAMILIES)}")
    return FAMILIES[name]


def for_geometry(geo: Geometry) -> tuple[Family, ...]:
    """The families a model of this geometry admits, the paper's own for its regime first
    (`Regime.families`)."""
    return tuple(FAMILIES[name] for name in regimes.get(geo.regime).families)


def of_geometry(geo: Geometry) -> Family:
    """The family a geometry's reading runs (the sample layout's row-tied family reads as
    `eagle` here: its products have the same shape)."""
    for fam in for_geometry(geo):
        if fam.reading == geo.reading:
            return fam
    return for_geometry(geo)[0]
