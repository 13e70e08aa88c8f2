"""The term library (`fit/library.py`): term names and their parsing, the terms a layer can form,
and the normal-equation blocks against an explicit design."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from conftest import assert_close

from eagle_probe.fit import library as lib
from eagle_probe.fit.geometry import Geometry


def small_geometry(n=4, d=3, n_prime=2, d_prime=2) -> Geometry:
    T = d + d_prime
    mask = np.zeros((T, T))
    mask[:, :d] = 1.0
    return Geometry(
        regime="centralized",
        d=d,
        n=n,
        d_prime=d_prime,
        n_prime=n_prime,
        heads=1,
        layers=1,
        mask=mask,
    )


def random_factors(g: Geometry, b: int = 7, seed: int = 0) -> tuple[lib.Factors, np.ndarray]:
    Z = np.random.default_rng(seed).standard_normal((b, g.tokens, g.width))
    return lib.Factors.of(g, Z), Z


def test_names_follow_the_scheme_and_parse_back():
    terms = lib.library()
    names = [t.name for t in terms]
    assert len(names) == len(set(names))
    assert {t.name for t in terms if t.free == "none"} == {
        "A+=AAtA",
        "A+=CCtA",
        "B+=BAtA",
        "B+=DCtA",
        "C+=AAtC",
        "C+=CCtC",
        "D+=BAtC",
        "D+=DCtC",
    }
    for term in terms:
        assert lib.parse(term.name) == term
    assert lib.parse("A+=A*W*CtA") == lib.Term("A", "A", "C", "A", "W1")
    assert lib.parse("C+=AAtA*W") == lib.Term("C", "A", "A", "A", "W2")
    assert lib.parse("A+=A*U*CtC*V") == lib.Term("A", "A", "C", "C", "both")


@pytest.mark.parametrize(
    "name", ["A+=BAtA", "A+=ACtA", "A+=AAtB", "A+=A*U*AtA*V", "A+=AAtC", "X+=AAtA", "A=AAtA"]
)
def test_names_a_layer_cannot_form_are_refused(name):
    with pytest.raises(ValueError):
        lib.parse(name)


def test_cross_blocks_have_matrix_coefficients_only():
    for term in lib.library():
        if not (term.w1_square and term.w2_square):
            assert term.free != "none"
        if term.free == "both":
            assert not term.w1_square and not term.w2_square


def test_terms_with_the_weights_reproduce_the_layer():
    """With W_VP = diag(v_a I, v_c I) and any W_QK, one layer's update of every block is the sum
    of the W1-free families P·(v W_QK[P, Q])·Qᵀ·R over P, Q with R the visible block of X's
    kind — checked against the network's own forward from products."""
    g = small_geometry()
    f, Z = random_factors(g)
    rng = np.random.default_rng(1)
    qk = rng.standard_normal((1, g.width, g.width))
    va, vc = 0.7, -1.3
    vp = np.diag([va] * g.n + [vc] * g.n_prime)[None]
    dZ = g.layer(Z, qk, vp) - Z
    cols = {"a": slice(0, g.n), "c": slice(g.n, g.width)}
    for X, block in zip(lib.TARGETS, g.blocks(dZ), strict=True):
        total = np.zeros_like(block)
        for term in lib.library((X,)):
            if term.free != "W1" or term.R != ("A" if lib.KIND[X] == "a" else "C"):
                continue
            v = va if lib.KIND[X] == "a" else vc
            W = v * qk[0][cols[lib.KIND[term.P]], cols[lib.KIND[term.Q]]]
            total += lib.apply(term, W, f)
        assert_close(total, block)


@pytest.mark.parametrize("X", lib.TARGETS)
def test_normal_equation_blocks_match_the_explicit_design(X):
    g = small_geometry()
    f, Z = random_factors(g)
    y = np.random.default_rng(2).standard_normal(
        (f.prompts, g.d if lib.TOP[X] else g.d_prime, g.n if lib.KIND[X] == "a" else g.n_prime)
    )
    terms = lib.library((X,))
    designs = {t: lib.design(t, f, g) for t in terms}
    for t1, t2 in itertools.product(terms, repeat=2):
        assert_close(lib.gram(t1, t2, f, g), designs[t1].T @ designs[t2])
    for t in terms:
        assert_close(lib.rhs(t, f, y), designs[t].T @ y.reshape(-1))
        if t.free in ("W2", "both"):
            kx = t.size(g) // t.shared_features(g)
            H = np.kron(lib.shared_gram(t, f), np.eye(kx))
            assert_close(H, designs[t].T @ designs[t])


def structures_of(g: Geometry, seed: int = 3) -> dict[str, list]:
    """Both kinds of regime-term matrices on g: two machines' column selectors and a rank-2
    sketch projector."""
    half = g.n // 2
    sel = [np.diag(np.r_[np.ones(half), np.zeros(g.n - half)]), None]
    sel[1] = np.eye(g.n) - sel[0]
    S = np.linalg.qr(np.random.default_rng(seed).standard_normal((g.n, 2)))[0]
    return {"local": [(m, m) for m in sel], "sketch": [(S @ S.T, S @ S.T)]}


def test_regime_terms_are_named_parsed_and_exist_only_where_they_differ():
    terms = lib.library(structures=lib.STRUCTURES)
    regime = {t.name for t in terms if t.structure}
    # Σ_μ O_μ = I: the machine-local form differs from the plain term only with both blocks A-kind
    assert {n for n in regime if n.endswith("@local")} == {"A+=AAtA@local", "B+=BAtA@local"}
    sketch = {n for n in regime if n.endswith("@sketch")}
    assert {"A+=AAtA@sketch", "B+=BAtA@sketch", "C+=AAtC@sketch", "D+=BAtC@sketch"} <= sketch
    assert "C+=CCtC@sketch" not in sketch and "D+=DCtC@sketch" not in sketch
    for term in terms:
        assert lib.parse(term.name) == term
    for name in ("C+=AAtC@local", "A+=A*W*AtA@local", "A+=AAtA@mesh", "C+=CCtC@sketch"):
        with pytest.raises(ValueError):
            lib.parse(name)
    assert lib.library() == [t for t in terms if not t.structure]


def test_regime_terms_compute_their_definitions():
    g = small_geometry()
    mats = structures_of(g)
    f = lib.Factors.of(g, random_factors(g)[1], mats)
    A, B, C = f.blocks["A"], f.blocks["B"], f.blocks["C"]
    (O0, _), (O1, _) = mats["local"]
    P = mats["sketch"][0][0]
    want = {
        "A+=AAtA@local": A @ O0 @ A.swapaxes(1, 2) @ A @ O0 + A @ O1 @ A.swapaxes(1, 2) @ A @ O1,
        "B+=BAtA@local": B @ O0 @ A.swapaxes(1, 2) @ A @ O0 + B @ O1 @ A.swapaxes(1, 2) @ A @ O1,
        "A+=AAtA@sketch": A @ P @ A.swapaxes(1, 2) @ A @ P,
        "C+=AAtC@sketch": A @ P @ A.swapaxes(1, 2) @ C,
        "D+=BAtC@sketch": B @ P @ A.swapaxes(1, 2) @ C,
        "A+=CCtA@sketch": C @ C.swapaxes(1, 2) @ A @ P,
    }
    for name, value in want.items():
        assert_close(lib.apply(lib.parse(name), 0.5, f), 0.5 * value)


@pytest.mark.parametrize("X", lib.TARGETS)
def test_regime_terms_normal_equations_match_the_explicit_design(X):
    g = small_geometry()
    f = lib.Factors.of(g, random_factors(g)[1], structures_of(g))
    y = np.random.default_rng(2).standard_normal(
        (f.prompts, g.d if lib.TOP[X] else g.d_prime, g.n if lib.KIND[X] == "a" else g.n_prime)
    )
    terms = lib.library((X,), lib.STRUCTURES)
    assert any(t.structure for t in terms)
    designs = {t: lib.design(t, f, g) for t in terms}
    for t1, t2 in itertools.product(terms, repeat=2):
        if t1.structure or t2.structure:
            assert_close(lib.gram(t1, t2, f, g), designs[t1].T @ designs[t2])
    for t in terms:
        assert_close(lib.rhs(t, f, y), designs[t].T @ y.reshape(-1))
    sub = f.subset(np.array([1, 4]))
    for t in terms:
        if t.structure:
            assert_close(lib.apply(t, 1.0, sub), lib.apply(t, 1.0, f)[[1, 4]])


def test_visible_row_mask_is_required():
    g = small_geometry()
    mask = g.mask.copy()
    mask[0, 1] = 0.0
    bad = Geometry(
        regime="centralized",
        d=g.d,
        n=g.n,
        d_prime=g.d_prime,
        n_prime=g.n_prime,
        heads=1,
        layers=1,
        mask=mask,
    )
    lib.check_mask(g)
    with pytest.raises(ValueError, match="visible-row"):
        lib.check_mask(bad)
