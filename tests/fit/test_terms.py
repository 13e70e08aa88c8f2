"""The term library, the sparse optimizers and the `terms` view."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import torch
from probe_context import TRAINED, make_context, plant_cross_term, planted

from eagle_probe import checkpoint
from eagle_probe.fit import library as lib
from eagle_probe.fit import sparse
from eagle_probe.fit.geometry import Geometry
from eagle_probe.fit.terms import TermsConfig, terms_view

EAGLE = ("A+=AAtA", "B+=BAtA", "C+=AAtC", "D+=BAtC")


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


# --- library ------------------------------------------------------------------------------------


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
        np.testing.assert_allclose(total, block, rtol=1e-12, atol=1e-12)


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
        np.testing.assert_allclose(
            lib.gram(t1, t2, f, g), designs[t1].T @ designs[t2], rtol=1e-10, atol=1e-10
        )
    for t in terms:
        np.testing.assert_allclose(lib.rhs(t, f, y), designs[t].T @ y.reshape(-1), rtol=1e-10)
        if t.free in ("W2", "both"):
            kx = t.size(g) // t.shared_features(g)
            H = np.kron(lib.shared_gram(t, f), np.eye(kx))
            np.testing.assert_allclose(H, designs[t].T @ designs[t], rtol=1e-10, atol=1e-10)


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
        np.testing.assert_allclose(lib.apply(lib.parse(name), 0.5, f), 0.5 * value, rtol=1e-12)


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
            np.testing.assert_allclose(
                lib.gram(t1, t2, f, g), designs[t1].T @ designs[t2], rtol=1e-10, atol=1e-10
            )
    for t in terms:
        np.testing.assert_allclose(lib.rhs(t, f, y), designs[t].T @ y.reshape(-1), rtol=1e-10)
    sub = f.subset(np.array([1, 4]))
    for t in terms:
        if t.structure:
            np.testing.assert_allclose(
                lib.apply(t, 1.0, sub), lib.apply(t, 1.0, f)[[1, 4]], rtol=1e-12
            )


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


# --- sparse ---------------------------------------------------------------------------------------


def grouped_problem(seed=0, m=400, sizes=(1, 1, 3, 5, 4), true=(0, 2)):
    rng = np.random.default_rng(seed)
    Phi = [rng.standard_normal((m, s)) for s in sizes]
    coef = [rng.standard_normal(s) if i in true else np.zeros(s) for i, s in enumerate(sizes)]
    y = sum(P @ c for P, c in zip(Phi, coef, strict=True))
    problem = sparse.NormalProblem(
        sizes=list(sizes),
        gram_block=lambda i, j: Phi[i].T @ Phi[j],
        rhs_block=lambda i: Phi[i].T @ y,
        yy=float(y @ y),
    )
    return problem, Phi, coef, y


def test_solve_normal_is_the_minimum_norm_solution_of_the_scaled_columns():
    rng = np.random.default_rng(3)
    X = rng.standard_normal((50, 6)) @ rng.standard_normal((6, 9))  # rank 6, 9 columns
    y = rng.standard_normal(50)
    theta = sparse.solve_normal(X.T @ X, X.T @ y)
    norms = np.linalg.norm(X, axis=0)
    want = np.linalg.pinv(X / norms) @ y / norms
    np.testing.assert_allclose(theta, want, rtol=1e-7, atol=1e-9)
    full = rng.standard_normal((50, 5))
    coef = rng.standard_normal(5)
    got = sparse.solve_normal(full.T @ full, full.T @ (full @ coef))
    np.testing.assert_allclose(got, coef, rtol=1e-10)


def test_refit_qr_is_exact_and_honours_priority():
    rng = np.random.default_rng(4)
    X = rng.standard_normal((300, 4)) * np.array([1e-3, 1.0, 1e3, 1.0])
    coef = np.array([2.0, -1.0, 3e-3, 0.5])
    np.testing.assert_allclose(sparse.refit_qr(X, X @ coef), coef, rtol=1e-12)
    # a second level that repeats the first column: the first level keeps the shared direction
    Y = np.concatenate([X[:, :1], X[:, :1] + X[:, 1:2]], axis=1)
    y = 2.0 * X[:, 0]
    np.testing.assert_allclose(sparse.refit_qr(Y, y, [1, 1]), [2.0, 0.0], atol=1e-12)


def test_fit_levels_keep_the_shared_direction_first():
    rng = np.random.default_rng(5)
    a = rng.standard_normal(200)
    Phi = [a[:, None], np.stack([a, rng.standard_normal(200)], axis=1)]
    y = 3.0 * a
    problem = sparse.NormalProblem(
        sizes=[1, 2],
        gram_block=lambda i, j: Phi[i].T @ Phi[j],
        rhs_block=lambda i: Phi[i].T @ y,
        yy=float(y @ y),
    )
    coefs, res = problem.fit([0, 1], [1, 1], exact=True)
    np.testing.assert_allclose(coefs[0], [3.0], rtol=1e-10)
    np.testing.assert_allclose(coefs[1], [0.0, 0.0], atol=1e-10)
    assert res < 1e-7


def test_gain_is_the_drop_of_the_residual():
    problem, Phi, _, y = grouped_problem()
    support = [1, 3]
    coefs, _ = problem.fit(support)
    for g in (0, 2, 4):
        A = np.concatenate([Phi[i] for i in support], axis=1)
        B = np.concatenate([A, Phi[g]], axis=1)
        r1 = y - A @ np.linalg.lstsq(A, y, rcond=None)[0]
        r2 = y - B @ np.linalg.lstsq(B, y, rcond=None)[0]
        want = (r1 @ r1 - r2 @ r2) / (y @ y)
        assert problem.gain(support, coefs, g) == pytest.approx(want, rel=1e-8, abs=1e-12)


def test_stlsq_and_forward_path_find_the_planted_groups():
    problem, _, coef, _ = grouped_problem(sizes=(1, 1, 1, 3, 5, 4), true=(0, 4))
    support, coefs = sparse.stlsq(problem, list(range(6)), threshold=1e-3)
    assert support == [0, 4]
    np.testing.assert_allclose(coefs[1], coef[4], rtol=1e-8)
    path, residuals = sparse.forward_groups(
        problem, [0], [1, 2, 3, 4, 5], tol=1e-10, min_gain=0.1, max_groups=3
    )
    assert path == [0, 4]
    assert residuals[-1] < 1e-10
    fitted, _ = problem.fit(path, exact=True)
    np.testing.assert_allclose(fitted[1], coef[4], rtol=1e-8)


def test_bags_and_frequencies():
    rng = np.random.default_rng(6)
    subsets = sparse.bags(100, 5, 0.5, rng)
    assert len(subsets) == 5
    for s in subsets:
        assert len(s) == 50 and len(set(s.tolist())) == 50 and s.max() < 100
    freq = sparse.inclusion_frequency([["a", "b"], ["a"], ["a", "c"], []], ["a", "b", "c", "d"])
    assert freq == {"a": 0.75, "b": 0.25, "c": 0.25, "d": 0.0}
    with pytest.raises(ValueError):
        sparse.bags(10, 2, 0.0, rng)


# --- the view on planted models -------------------------------------------------------------------


def assert_eagle(result, a, c, rtol):
    layers = result.json["layers"]
    assert len(layers) == len(a)
    for layer, al, cl in zip(layers, a, c, strict=True):
        names = [t["name"] for t in layer["terms"]]
        assert names == list(EAGLE), f"layer {layer['layer']}: {names}"
        for term, want in zip(layer["terms"], (-al, -al, -cl, -cl), strict=True):
            assert term["kind"] == "scalar"
            assert term["coefficient"] == pytest.approx(want, rel=rtol)
            assert term["frequency"] == 1.0
            assert term["share"] == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize(
    "dtype, heads, normalize, rtol",
    [
        ("float32", 1, "spectral", 1e-6),
        ("float32", 3, "none", 1e-6),
        ("float32", 8, "spectral", 1e-6),
        ("float64", 1, "none", 1e-10),
        ("float64", 5, "spectral", 1e-10),
    ],
)
def test_planted_eagle_gives_exactly_the_four_terms(dtype, heads, normalize, rtol):
    if normalize == "spectral":
        a, c = [0.31, 0.52, 0.23], [0.71, 1.13, 0.97]
    else:  # raw prompts: steps of the size of 1/‖A‖²
        a, c = [0.011, 0.017, 0.007], [0.021, 0.013, 0.029]
    model, task = planted(a=a, c=c, heads=heads, dtype=dtype, normalize=normalize)
    ctx = make_context(model, task, probes=128, held_out=256)
    result = terms_view(ctx)
    assert_eagle(result, a, c, rtol)
    assert result.warnings == []
    for layer in result.json["layers"]:
        assert layer["one_step_fidelity"] < 1e-12
        assert layer["relative_residual"] < 1e-5
    assert result.json["run_from_input_mse"] == pytest.approx(ctx.network_mse, rel=1e-4)
    table = result.tables["terms"]
    assert list(table["term"]) == list(EAGLE) * len(a)
    json.dumps(result.json, allow_nan=False)  # plain data only


REGIME_CASES = [
    ("distributed", {"machines": 2}, "eagle-distributed"),
    ("distributed", {"machines": 3}, "eagle-distributed"),
    ("distributed", {"machines": 6}, "eagle-distributed"),
    ("constrained", {"rank": 3, "n_heads": 1}, "eagle-sketched"),
    ("constrained", {"rank": 3, "n_heads": 2}, "eagle-sketched"),
    ("constrained", {"rank": 5, "n_heads": 4}, "eagle-sketched"),
]
FAMILY_TERMS = {
    "eagle-distributed": ("A+=AAtA@local", "B+=BAtA@local", "C+=AAtC", "D+=BAtC"),
    "eagle-sketched": ("A+=AAtA@sketch", "B+=BAtA@sketch", "C+=AAtC@sketch", "D+=BAtC@sketch"),
    "eagle-over-machines": EAGLE,
}


@pytest.mark.parametrize(
    ("regime", "kw", "family", "dtype"),
    [(*case, "float64") for case in REGIME_CASES]
    + [("distributed", {"machines": 3}, "eagle-distributed", "float32")]
    + [("constrained", {"rank": 5, "n_heads": 2}, "eagle-sketched", "float32")],
    ids=lambda v: "-".join(f"{k}{x}" for k, x in v.items()) if isinstance(v, dict) else str(v),
)
def test_planted_regime_eagle_gives_exactly_its_familys_terms(regime, kw, family, dtype):
    from eagle_probe.layouts import plant
    from eagle_probe.model import ModelConfig
    from eagle_probe.tasks import TaskConfig

    a, c = [0.31, 0.52, 0.23], [0.71, 1.13, 0.97]
    cfg = ModelConfig(regime=regime, n=6, d=5, n_layers=3, normalize="spectral", dtype=dtype, **kw)
    model = plant(cfg, a, c, sketch_seed=5)
    ctx = make_context(model, TaskConfig(n=6, d=5, rank=4), probes=64, held_out=256)
    result = terms_view(ctx)
    rtol = 1e-10 if dtype == "float64" else 1e-5
    for layer, (a_l, c_l) in enumerate(zip(a, c, strict=True)):
        lay = result.json["layers"][layer]
        stable = {t["name"]: t for t in lay["terms"] if t["frequency"] >= 0.5}
        assert tuple(stable) == FAMILY_TERMS[family], (layer, list(stable))
        coef = [stable[name]["coefficient"] for name in FAMILY_TERMS[family]]
        np.testing.assert_allclose(coef, [-a_l, -a_l, -c_l, -c_l], rtol=rtol)
        assert lay["family"] == family
        assert lay["relative_residual"] < (1e-12 if dtype == "float64" else 1e-5)
    assert result.json["family_terms"][family] == list(FAMILY_TERMS[family])
    assert result.json["run_from_input_mse"] == pytest.approx(ctx.network_mse, rel=1e-4)
    assert result.warnings == []


def test_a_distributed_network_that_sends_a_columns_is_read_as_the_centralized_update():
    """Planted eagle-over-machines (each head reads its machine's A columns and writes every
    machine's): the plain EAGLE terms, which the paper's distributed family does not have."""
    from eagle_probe.layouts import plant
    from eagle_probe.model import ModelConfig
    from eagle_probe.tasks import TaskConfig

    a, c = [0.31, 0.52], [0.71, 1.13]
    cfg = ModelConfig(
        regime="distributed-open",
        machines=2,
        n=6,
        d=5,
        n_layers=2,
        normalize="spectral",
        dtype="float64",
        vp_width=8,
    )
    model = plant(cfg, a, c, family="eagle-over-machines")
    ctx = make_context(model, TaskConfig(n=6, d=5, rank=4), probes=64, held_out=256)
    result = terms_view(ctx)
    for lay in result.json["layers"]:
        assert tuple(t["name"] for t in lay["terms"] if t["frequency"] >= 0.5) == EAGLE
        assert lay["family"] == "eagle-over-machines"


def test_planted_eagle_at_the_shipped_sizes():
    a, c = [1.3, 8.1, 1.8, 0.2], [1.3, 10.3, 65.4, 168.8]
    model, task = planted(a=a, c=c, heads=2, normalize="spectral", sizes=(18, 18, 2, 2))
    model.load_state_dict(model.state_dict())
    ctx = make_context(model, task, probes=128, held_out=256)
    assert_eagle(terms_view(ctx), a, c, 1e-6)


def test_planted_cross_term_is_named_in_its_layer_only():
    a, c = [0.31, 0.52, 0.23], [0.71, 1.13, 0.97]
    model, task = planted(a=a, c=c, heads=2, dtype="float64", normalize="spectral")
    M = plant_cross_term(model, layer=1)
    result = terms_view(make_context(model, task, probes=128, held_out=256))
    cross = {"A+=A*W*CtA", "B+=B*W*CtA", "C+=A*W*CtC", "D+=B*W*CtC"}
    for layer in result.json["layers"]:
        names = {t["name"] for t in layer["terms"]}
        keyed_on_c = {n for n in names if lib.parse(n).Q == "C"}
        if layer["layer"] == 1:
            assert keyed_on_c == cross
            assert set(EAGLE) <= names
            for term in layer["terms"]:
                assert term["frequency"] == 1.0
                if term["name"] in ("A+=A*W*CtA", "B+=B*W*CtA"):
                    np.testing.assert_allclose(term["coefficient"], -a[1] * M, rtol=1e-8)
                if term["name"] in ("C+=A*W*CtC", "D+=B*W*CtC"):
                    np.testing.assert_allclose(term["coefficient"], -c[1] * M, rtol=1e-8)
                    assert term["nearest_scalar"] is None
            assert layer["one_step_fidelity"] < 1e-20
        else:
            assert names == set(EAGLE)


def test_unsupported_token_mask_is_reported_not_guessed():
    model, task = planted(
        a=[0.1, 0.2], c=[0.3, 0.4], normalize="spectral", token_mask="sparse", mask_density=0.6
    )
    result = terms_view(make_context(model, task, probes=32, held_out=32))
    assert result.json["supported"] is False
    assert len(result.warnings) == 1 and "visible-row" in result.warnings[0]


def test_config_is_checked():
    with pytest.raises(ValueError):
        TermsConfig(stable=0.0)
    with pytest.raises(ValueError):
        TermsConfig(bags=-1)
    with pytest.raises(ValueError):
        TermsConfig(threshold=float("nan"))


def test_inputs_are_not_mutated():
    model, task = planted(a=[0.3, 0.2], c=[0.5, 0.7], normalize="spectral")
    ctx = make_context(model, task, probes=64, held_out=64)
    before = (ctx.cap.Z.copy(), ctx.held_out.z0.copy())
    terms_view(ctx)
    np.testing.assert_array_equal(ctx.cap.Z, before[0])
    np.testing.assert_array_equal(ctx.held_out.z0, before[1])


# --- the shipped models ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def centralized_terms():
    torch.set_num_threads(1)
    model, task, _ = checkpoint.load(TRAINED / "centralized.pt")
    ctx = make_context(model, task)
    return ctx, terms_view(ctx), model


def test_centralized_terms_are_faithful_one_step(centralized_terms):
    ctx, result, model = centralized_terms
    for layer in result.json["layers"]:
        assert layer["one_step_fidelity"] <= 1e-4, layer["layer"]
    # Every layer updates each block along EAGLE's direction for it (scalar, or with a matrix
    # coefficient: W_QK of layer 0 is dense); the C step's nearest scalar is −c_l, read here
    # from the raw weights: c_l = (mean diagonal of W_QK's A block) × (−mean diagonal of W_VP's
    # C block).
    n = ctx.geometry.n
    qk, ov = model.QK.AB[:, 0].numpy(), model.OV.AB[:, 0].numpy()
    directions = {"A": "AAtA", "B": "BAtA", "C": "AAtC", "D": "BAtC"}
    for layer in result.json["layers"]:
        terms = {t["name"]: t for t in layer["terms"]}
        for block, direction in directions.items():
            forms = {f"{block}+={direction}", f"{block}+={direction}*W"}
            forms |= {f"{block}+={direction[0]}*W*{direction[1:]}"}
            assert forms & set(terms), (layer["layer"], block, sorted(terms))
        index = layer["layer"]
        c_step = np.mean(np.diag(qk[index][:n, :n])) * -np.mean(np.diag(ov[index][n:, n:]))
        c_term = terms.get("C+=A*W*AtC") or terms.get("C+=AAtC*W") or terms["C+=AAtC"]
        scalar = c_term.get("nearest_scalar", c_term.get("coefficient"))
        assert scalar == pytest.approx(-c_step, rel=0.02), index
    mse, net = result.json["run_from_input_mse"], result.json["network_mse"]
    assert abs(mse / net - 1.0) < 0.1


@pytest.mark.bench  # about a minute on 2 cores: `pytest -m bench tests/fit/test_terms.py`
def test_eight_heads_terms_follow_eagle_and_rerun_close_to_the_network():
    """centralized_8head.pt: the head sums of every layer move each block along EAGLE's direction
    (scalar or matrix coefficient); the discovered terms, run from the input, stay within 25% of
    the network's MSE (measured: 1.2×)."""
    torch.set_num_threads(1)
    model, task, _ = checkpoint.load(TRAINED / "centralized_8head.pt")
    result = terms_view(make_context(model, task, held_out=512))
    directions = {"A": "AAtA", "B": "BAtA", "C": "AAtC", "D": "BAtC"}
    for layer in result.json["layers"]:
        names = {t["name"] for t in layer["terms"]}
        for block, direction in directions.items():
            forms = {f"{block}+={direction}", f"{block}+={direction}*W"}
            forms |= {f"{block}+={direction[0]}*W*{direction[1:]}"}
            assert forms & names, (layer["layer"], block, sorted(names))
    mse, net = result.json["run_from_input_mse"], result.json["network_mse"]
    assert mse < 1.25 * net, (mse, net)
