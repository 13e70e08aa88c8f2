"""The term library: every block-product term one linear-attention layer can form.

Write the stream as Z = [[A, C], [B, D]] with feature columns of two kinds, `a` (the n columns of
A and B) and `c` (the n' columns of C and D). Under the visible-row mask every token attends to the
d rows [A C], so one layer (Σ over heads) updates a target block X as

    X += Σ_{P, Q, R}  P · W1 · Qᵀ · R · W2                                        (1)

with P the query-side block in X's row (A or C for the top targets A, C; B or D for the bottom
targets B, D), Q the key-side block and R the value block (A or C: keys and values are visible
rows), W1 = W_QK[kind P, kind Q] and W2 = W_VP[kind R, kind X]. G = Qᵀ R (kind Q × kind R) is the
same for every row, so each term is X += P · W1 · G · W2 with small per-prompt factors P and G.

Names follow one ASCII scheme, `X+=PQtR` with the letters A B C D, and say which coefficient is
free:

    X+=PQtR        scalar: W1 = I, W2 = θ I (both blocks square); EAGLE's terms are
                   A+=AAtA, B+=BAtA, C+=AAtC, D+=BAtC with coefficients −a, −a, −c, −c
    X+=P*W*QtR     W1 = W free (kind P × kind Q), W2 = I (needs kind R = kind X)
    X+=PQtR*W      W1 = I (needs kind P = kind Q), W2 = W free (kind R × kind X)
    X+=P*U*QtR*V   bilinear: both blocks non-square (kind P ≠ kind Q and kind R ≠ kind X)

Regime terms (scalar, suffix `@local` or `@sketch`) carry the structure of the regime's own EAGLE
on their A-kind square blocks (the family's, `fit.families`; `Factors.structures` holds the
matrices): `@local` sums over the machines' column selectors O_μ, X += θ Σ_μ P O_μ QᵀR O_μ (the
local Gram A^μ A^μᵀ: the distributed family's A+=AAtA@local and B+=BAtA@local), and `@sketch`
puts the layer's projector P_l on them, X += θ P·P_l·QᵀR·P_l (W1 = P_l where P, Q are A-kind,
W2 = P_l where R, X are; the sketched family's four terms). A regime term exists only where it
differs from the plain scalar term: Σ_μ O_μ = I, so `@local` needs both blocks A-kind.

A matrix family whose free block is square nests the scalar term of the same (X, P, Q, R): W = θ I
gives it back, and θ = tr W / dim is its nearest scalar. Where W1 and W2 are both non-square no
identity can stand in for either, so the term is fitted in its lifted, linear form: the coefficient
is K = Σ_h vec(W1^h) vec(W2^h)ᵀ, a (kind P · kind Q) × (kind R · kind X) matrix of rank at most the
number of heads (exact for any number of heads); the view reports K and its singular values, and
leaves the term out where its parameters outnumber what the probe batch can identify.

Each family is linear in its coefficient θ, so the library gives, per pair of families, the blocks
of the normal equations Φ_fᵀ Φ_g and Φ_fᵀ y computed from the per-prompt factors (never the
explicit design), plus `apply` (θ ↦ the family's contribution) and `design` (the explicit design,
for the exact QR refit of small supports).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import numpy as np

from eagle_probe.fit.geometry import Geometry

TARGETS = ("A", "B", "C", "D")
KIND = {"A": "a", "B": "a", "C": "c", "D": "c"}  # column kind of each block
TOP = {"A": True, "C": True, "B": False, "D": False}  # row of each block
QUERY = {True: ("A", "C"), False: ("B", "D")}  # query-side blocks in a row
VISIBLE = ("A", "C")  # key and value blocks: the visible rows
FREE = ("none", "W1", "W2", "both")
STRUCTURES = ("local", "sketch")  # regime terms (module text)


@dataclass(frozen=True)
class Term:
    """One family of the library: target X, query P, key Q, value R, which coefficient is free."""

    target: str  # X: the block the term adds to
    P: str  # query-side block (in X's row)
    Q: str  # key-side block (visible)
    R: str  # value block (visible)
    free: str  # "none" (scalar), "W1", "W2" or "both"
    structure: str = ""  # regime term: "local" or "sketch" (scalar only), "" plain

    @property
    def name(self) -> str:
        core = f"{self.P}{self.Q}t{self.R}"
        if self.structure:
            return f"{self.target}+={core}@{self.structure}"
        return {
            "none": f"{self.target}+={core}",
            "W1": f"{self.target}+={self.P}*W*{self.Q}t{self.R}",
            "W2": f"{self.target}+={core}*W",
            "both": f"{self.target}+={self.P}*U*{self.Q}t{self.R}*V",
        }[self.free]

    @property
    def kind(self) -> str:
        return "scalar" if self.free == "none" else "matrix"

    @property
    def w1_square(self) -> bool:
        return KIND[self.P] == KIND[self.Q]

    @property
    def w2_square(self) -> bool:
        return KIND[self.R] == KIND[self.target]

    @property
    def scalar_name(self) -> str | None:
        """The scalar term this family nests, if both blocks of its combination are square."""
        if self.structure:
            return None
        if self.w1_square and self.w2_square:
            return f"{self.target}+={self.P}{self.Q}t{self.R}"
        return None

    def shape(self, geometry: Geometry) -> tuple[int, ...]:
        """Shape of the coefficient: () scalar, (kP, kQ) W1, (kR, kX) W2, (kP·kQ, kR·kX) both."""
        k = {"a": geometry.n, "c": geometry.split[1]}
        kp, kq, kr, kx = k[KIND[self.P]], k[KIND[self.Q]], k[KIND[self.R]], k[KIND[self.target]]
        return {"none": (), "W1": (kp, kq), "W2": (kr, kx), "both": (kp * kq, kr * kx)}[self.free]

    def size(self, geometry: Geometry) -> int:
        return int(np.prod(self.shape(geometry), dtype=int))

    def shared_features(self, geometry: Geometry) -> int:
        """Features per output column of the shared design (W2 and bilinear families), else 0."""
        k = {"a": geometry.n, "c": geometry.split[1]}
        kp, kq, kr = k[KIND[self.P]], k[KIND[self.Q]], k[KIND[self.R]]
        return {"none": 0, "W1": 0, "W2": kr, "both": kp * kq * kr}[self.free]


def parse(name: str) -> Term:
    """The term of a name in the `X+=PQtR` scheme (inverse of `Term.name`)."""
    try:
        name_core, _, structure = name.partition("@")
        target, rest = name_core.split("+=")
        if structure and "*" in rest:
            raise ValueError
        if rest.count("*") == 3:
            P, _, mid, _ = rest.split("*")
            free = "both"
        elif rest.count("*") == 2:
            P, _, mid = rest.split("*")
            free = "W1"
        elif rest.endswith("*W"):
            P, mid, free = rest[0], rest[1:-2], "W2"
        else:
            P, mid, free = rest[0], rest[1:], "none"
        Q, t, R = mid
        if t != "t":
            raise ValueError
        term = Term(target, P, Q, R, free, structure)
    except ValueError:
        raise ValueError(f"cannot read term name {name!r}; expected the form 'X+=PQtR'") from None
    if term.name != name or not valid(term):
        raise ValueError(f"{name!r} is not a term a linear-attention layer can form")
    return term


def valid(term: Term) -> bool:
    """Whether (X, P, Q, R, free) is a family of the library."""
    if term.target not in TARGETS or term.free not in FREE:
        return False
    if term.P not in QUERY[TOP[term.target]] or term.Q not in VISIBLE or term.R not in VISIBLE:
        return False
    square1, square2 = term.w1_square, term.w2_square
    if term.structure:
        if term.structure not in STRUCTURES or term.free != "none" or not (square1 and square2):
            return False
        a1, a2 = KIND[term.P] == "a", KIND[term.R] == "a"
        return (a1 and a2) if term.structure == "local" else (a1 or a2)
    return {
        "none": square1 and square2,
        "W1": square2,
        "W2": square1,
        "both": not square1 and not square2,
    }[term.free]


def library(targets: tuple[str, ...] = TARGETS, structures: tuple[str, ...] = ()) -> list[Term]:
    """Every family for the given targets, scalars first (plain, then the regime terms of
    `structures`), in a fixed order."""
    kinds = [("none", "")] + [("none", s) for s in structures] + [(f, "") for f in FREE[1:]]
    out = []
    for free, structure in kinds:
        for X in targets:
            for P in QUERY[TOP[X]]:
                for Q in VISIBLE:
                    for R in VISIBLE:
                        term = Term(X, P, Q, R, free, structure)
                        if valid(term):
                            out.append(term)
    return out


def check_mask(geometry: Geometry) -> None:
    """The library's form (1) needs every token to attend to exactly the d visible rows."""
    mask, d = np.asarray(geometry.mask), geometry.d
    if mask.shape != (geometry.tokens, geometry.tokens):
        raise ValueError(f"token mask has shape {mask.shape}, expected ({geometry.tokens},) * 2")
    if not (np.all(mask[:, :d] == 1.0) and np.all(mask[:, d:] == 0.0)):
        raise ValueError(
            "the term library needs the visible-row token mask (every token attends to the d "
            "rows [A C]); this model's mask differs (token_mask 'block_diagonal' or 'sparse')"
        )


_PATHS: dict[tuple, list] = {}


def _einsum(spec: str, *ops: np.ndarray) -> np.ndarray:
    """np.einsum with its contraction order found once per (spec, shapes) and reused."""
    key = (spec, *(op.shape for op in ops))
    path = _PATHS.get(key)
    if path is None:
        path = _PATHS.setdefault(key, np.einsum_path(spec, *ops, optimize="greedy")[0])
    return np.einsum(spec, *ops, optimize=path)


# --- per-prompt factors --------------------------------------------------------------------------


@dataclass(frozen=True)
class Factors:
    """The per-prompt factors of one stream Z: the four blocks and every G = Qᵀ R."""

    blocks: dict[str, np.ndarray]  # letter -> (b, rows, k)
    G: dict[tuple[str, str], np.ndarray]  # (Q, R) -> (b, kQ, kR)
    # (P1, P2) -> Σ_rows P1ᵀ P2 (b, kP1, kP2), filled as the normal equations ask for it
    S: dict[tuple[str, str], np.ndarray] = field(default_factory=dict, compare=False)
    # (G1, G2) -> G1 G2ᵀ (b, kQ1, kQ2) for pairs of scalar terms of one target
    GG: dict[tuple, np.ndarray] = field(default_factory=dict, compare=False)
    # (P, id(y)) -> (weak reference to y, Pᵀ y): see `projected`
    T: dict[tuple, tuple] = field(default_factory=dict, compare=False)
    # regime terms: structure -> [(S1, S2)] A-kind (n, n) matrices, summed over (module text)
    structures: dict[str, list] = field(default_factory=dict, compare=False)
    # scalar term name -> its unit contribution (b, rows, kX): the regime terms' normal equations
    U: dict[str, np.ndarray] = field(default_factory=dict, compare=False)
    # (family, family) -> Φ_1ᵀ Φ_2 (`gram`), kept for every normal-equation problem on these factors
    N: dict[tuple, np.ndarray] = field(default_factory=dict, compare=False)
    # a subset's (factors of all the prompts, its prompts): the per-prompt products S and GG are
    # the rows of those of all the prompts, computed there once for every bag
    parent: tuple[Factors, np.ndarray] | None = field(default=None, compare=False)

    def unit(self, term: Term) -> np.ndarray:
        """The contribution of a scalar term (plain or regime) with coefficient 1: (b, rows, kX)."""
        hit = self.U.get(term.name)
        if hit is not None:
            return hit
        P, G = self.blocks[term.P], self.G[(term.Q, term.R)]
        if not term.structure:
            u = P @ G
        else:
            if term.structure not in self.structures:
                raise ValueError(f"{term.name}: these factors carry no {term.structure!r} matrices")
            u = np.zeros(P.shape[:-1] + G.shape[-1:])
            for S1, S2 in self.structures[term.structure]:
                left = P @ S1 if KIND[term.P] == "a" else P
                right = G @ S2 if KIND[term.R] == "a" else G
                u += left @ right
        self.U[term.name] = u
        return u

    def pair(self, g1: tuple[str, str], g2: tuple[str, str]) -> np.ndarray:
        """G1 G2ᵀ per prompt, computed once per pair of key/value products."""
        if (g1, g2) not in self.GG:
            if self.parent is not None:
                whole, index = self.parent
                self.GG[(g1, g2)] = whole.pair(g1, g2)[index]
            else:
                self.GG[(g1, g2)] = np.ascontiguousarray(self.G[g1] @ self.G[g2].swapaxes(-1, -2))
        return self.GG[(g1, g2)]

    def cross(self, P1: str, P2: str) -> np.ndarray:
        """P1ᵀ P2 per prompt (b, kP1, kP2), computed once per pair of query-side blocks."""
        if (P1, P2) not in self.S:
            if self.parent is not None:
                whole, index = self.parent
                self.S[(P1, P2)] = whole.cross(P1, P2)[index]
            else:
                S = _einsum("bik,biK->bkK", self.blocks[P1], self.blocks[P2])
                self.S[(P1, P2)] = np.ascontiguousarray(S)
        return self.S[(P1, P2)]

    def projected(self, P: str, y: np.ndarray) -> np.ndarray:
        """Pᵀ y per prompt (b, kP, kX) for a target update y (b, rows, kX), computed once per
        query-side block and update array (kept while `y` lives; updates are never modified)."""
        key = (P, id(y))
        hit = self.T.get(key)
        if hit is not None and hit[0]() is y:
            return hit[1]
        T = _einsum("bik,bij->bkj", self.blocks[P], y)
        self.T[key] = (weakref.ref(y), T)
        return T

    @classmethod
    def of(
        cls, geometry: Geometry, Z: np.ndarray, structures: dict[str, list] | None = None
    ) -> Factors:
        """Factors of a stream Z (b, T, E) in internal units; `structures` the regime terms'
        matrices (`fit.families.term_structures`)."""
        A, B, C, D = geometry.blocks(Z)
        blocks = {"A": A, "B": B, "C": C, "D": D}
        G = {(Q, R): blocks[Q].swapaxes(-1, -2) @ blocks[R] for Q in VISIBLE for R in VISIBLE}
        return cls(blocks, G, structures=dict(structures or {}))

    def subset(self, index: np.ndarray) -> Factors:
        """The factors of the prompts `index`."""
        return Factors(
            {k: v[index] for k, v in self.blocks.items()},
            {k: v[index] for k, v in self.G.items()},
            structures=self.structures,
            U={k: v[index] for k, v in self.U.items()},
            parent=(self, index),
        )

    @property
    def prompts(self) -> int:
        return self.blocks["A"].shape[0]


def apply(term: Term, coef: np.ndarray | float, f: Factors) -> np.ndarray:
    """The family's contribution P · W1 · G · W2 to its target: (b, rows, kX)."""
    P, G = f.blocks[term.P], f.G[(term.Q, term.R)]
    coef = np.asarray(coef, dtype=np.float64)
    if term.structure:
        return float(coef) * f.unit(term)
    if term.free == "none":
        return float(coef) * (P @ G)
    if term.free == "W1":
        return P @ coef @ G
    if term.free == "W2":
        return (P @ G) @ coef
    kp, kq, kr = P.shape[-1], G.shape[-2], G.shape[-1]
    K = coef.reshape(kp, kq, kr, -1)
    return _einsum("bik,blm,klmj->bij", P, G, K)


def design(term: Term, f: Factors, geometry: Geometry) -> np.ndarray:
    """The explicit design (b · rows · kX, size) of a family: column p is its contribution for the
    p-th unit coefficient (C order). Meant for small families (the exact refit)."""
    shape, size = term.shape(geometry), term.size(geometry)
    cols = []
    for p in range(size):
        unit = np.zeros(size)
        unit[p] = 1.0
        cols.append(apply(term, unit.reshape(shape), f).reshape(-1))
    return np.stack(cols, axis=1)


def rhs(term: Term, f: Factors, y: np.ndarray) -> np.ndarray:
    """Φᵀ y for a target-shaped y (b, rows, kX): (size,)."""
    if term.structure:
        return np.atleast_1d(_einsum("bij,bij->", f.unit(term), y))
    G = f.G[(term.Q, term.R)]
    T = f.projected(term.P, y)  # (b, kP, kX)
    spec = {"none": "bkj,bkj->", "W1": "bkj,blj->kl", "W2": "bkj,bkm->mj", "both": "bkj,blm->klmj"}
    return np.atleast_1d(_einsum(spec[term.free], T, G)).reshape(-1)


_ORDER = {"none": 0, "W1": 1, "W2": 2, "both": 3}

# Φ_fᵀ Φ_g from S = Σ_rows P_fᵀ P_g (b, kP, kP'), G_f and G_g, types in _ORDER order. The shared
# families (W2, both) act on every output column alike, so their blocks carry δ_jJ: `eye` says to
# take the Kronecker product with I_kX after summing.
_GRAM = {
    ("none", "none"): ("bkK,bkj,bKj->", False),
    ("none", "W1"): ("bkK,bkj,bLj->KL", False),
    ("none", "W2"): ("bkK,bkj,bKM->Mj", False),
    ("none", "both"): ("bkK,bkj,bLM->KLMj", False),
    ("W1", "W1"): ("bkK,blj,bLj->klKL", False),
    ("W1", "W2"): ("bkK,blj,bKM->klMj", False),
    ("W1", "both"): ("bkK,blj,bLM->klKLMj", False),
    ("W2", "W2"): ("bkK,bkm,bKM->mM", True),
    ("W2", "both"): ("bkK,bkm,bLM->mKLM", True),
    ("both", "both"): ("bkK,blm,bLM->klmKLM", True),
}


def gram(t1: Term, t2: Term, f: Factors, geometry: Geometry) -> np.ndarray:
    """The block Φ_1ᵀ Φ_2 (size1, size2) of the normal equations of two families of one target,
    computed once per factors (the selection, the bags' and the refit's problems share it).
    Read-only."""
    key = (t1, t2)
    if key not in f.N:
        block = _gram(t1, t2, f, geometry)
        block.flags.writeable = False
        f.N[key] = block
    return f.N[key]


def _gram(t1: Term, t2: Term, f: Factors, geometry: Geometry) -> np.ndarray:
    if t1.target != t2.target:
        raise ValueError("families of different targets do not share normal equations")
    if t1.structure or t2.structure:
        # a regime term's design is one column u: Φ_gᵀ u is the other family's right-hand side
        if t1.structure:
            row = rhs(t2, f, f.unit(t1))
            return np.asarray(row, dtype=np.float64).reshape(1, t2.size(geometry))
        return gram(t2, t1, f, geometry).T
    if _ORDER[t1.free] > _ORDER[t2.free]:
        return gram(t2, t1, f, geometry).T
    spec, eye = _GRAM[(t1.free, t2.free)]
    S = f.cross(t1.P, t2.P)  # (b, kP1, kP2)
    if (t1.free, t2.free) == ("none", "none"):
        # Σ_b Σ_kK S_kK (G1 G2ᵀ)_kK: the n³ products are shared by every scalar pair
        GG = f.pair((t1.Q, t1.R), (t2.Q, t2.R))
        return np.asarray(S.reshape(-1) @ GG.reshape(-1)).reshape(1, 1)
    H = _einsum(spec, S, f.G[(t1.Q, t1.R)], f.G[(t2.Q, t2.R)])
    if eye:
        kx = {"a": geometry.n, "c": geometry.split[1]}[KIND[t1.target]]
        h1, h2 = t1.size(geometry) // kx, t2.size(geometry) // kx
        H = np.einsum("pq,jJ->pjqJ", H.reshape(h1, h2), np.eye(kx)).reshape(h1 * kx, h2 * kx)
    return np.asarray(H, dtype=np.float64).reshape(t1.size(geometry), t2.size(geometry))


def shared_gram(term: Term, f: Factors) -> np.ndarray:
    """For a shared family (W2, both): FᵀF with F the per-column design (features, features), so
    its own normal matrix is FᵀF ⊗ I_kX."""
    if term.free not in ("W2", "both"):
        raise ValueError(f"{term.name} has no shared per-column design")
    spec, _ = _GRAM[(term.free, term.free)]
    G = f.G[(term.Q, term.R)]
    S = f.cross(term.P, term.P)
    H = _einsum(spec, S, G, G)
    m = int(np.sqrt(H.size))
    return H.reshape(m, m)
