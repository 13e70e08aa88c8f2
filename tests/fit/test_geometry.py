"""The regime's shape (`fit/geometry.py`): the prompt scale of every path against singular values
taken here, per machine where each machine scales its own columns; EAGLE run by the geometry
against Algorithm 1 written out (`conftest.numpy_eagle`); the NumPy forward of a planted model's
products against the network's torch forward, in prompt units."""

import numpy as np
import plants
import pytest
import torch
from conftest import RTOL, assert_close, numpy_eagle, prompt_norm
from plants import NORMALIZE_PATHS, PLANTED_STEPS

from eagle_probe import layouts
from eagle_probe.fit.geometry import Geometry, prompt_scale
from eagle_probe.tasks import make_generator, sample

D, N, DP, NP = 6, 8, 2, 2


def prompts(b=5, scale=1.0, seed=3):
    """b paper prompts z0 (b, d + d', n + n') at `scale`, float64, and their blocks."""
    _, task = plants.eagle([0.1], [0.1], n=N, d=D)
    p = sample(task, b, make_generator(seed), dtype=torch.float64)
    return scale * p.z0().numpy(), p


@pytest.mark.parametrize("normalize", NORMALIZE_PATHS)
def test_prompt_scale_is_the_configured_norm_of_a(normalize):
    z0, p = prompts(scale=7.0)
    got = prompt_scale(z0, normalize, D, N)
    assert got.shape == (5, 1, 1)
    np.testing.assert_allclose(got[:, 0, 0], prompt_norm(7.0 * p.A.numpy(), normalize), rtol=RTOL)


def test_each_machine_scales_its_own_columns_by_its_own_norm():
    z0, p = prompts()
    got = prompt_scale(z0, "spectral", D, N, machines=2)  # (b, 1, n + n')
    A = p.A.numpy()
    for cols in (slice(0, 4), slice(4, 8)):
        own = np.linalg.svd(A[:, :, cols], compute_uv=False)[:, 0]
        np.testing.assert_allclose(got[:, 0, cols], np.repeat(own[:, None], 4, 1), rtol=RTOL)
    np.testing.assert_array_equal(got[:, 0, N:], 1.0)  # exact: the C/D columns' scale is 1


def test_a_geometry_whose_machines_scale_their_columns_has_no_single_scale():
    geo = Geometry(
        regime="centralized",
        d=D,
        n=N,
        d_prime=DP,
        n_prime=NP,
        heads=1,
        layers=1,
        mask=np.ones((D + DP, D + DP)),
        normalize="spectral",
        machines=2,
        local_scale=True,
    )
    z0, _ = prompts()
    with pytest.raises(ValueError, match="Geometry.scales"):
        geo.prompt_scale(z0)
    assert geo.scales(z0).shape == (5, 1, N + NP)


@pytest.mark.parametrize("normalize", NORMALIZE_PATHS)
def test_run_eagle_is_algorithm_1_on_the_scaled_prompt(normalize):
    a, c = PLANTED_STEPS[normalize]
    model, _ = plants.eagle(a, c, normalize=normalize, n=N, d=D)
    geo = layouts.geometry_of(model, None)
    z0, p = prompts(scale=30.0)
    Z = geo.run_eagle(geo.internal(z0), a, c)  # (L + 1, b, T, E)
    s = prompt_norm(30.0 * p.A.numpy(), normalize)[:, None, None]
    A, B, C = (30.0 * t.numpy() / s for t in (p.A, p.B, p.C))
    for layer, (A_l, B_l, C_l, D_l) in enumerate(numpy_eagle(A, B, C, a, c)):
        got = geo.blocks(Z[layer])
        for block, want in zip(got, (A_l, B_l, C_l, -D_l), strict=True):  # the slot carries −D
            assert_close(block, want)


@pytest.mark.parametrize("normalize", NORMALIZE_PATHS)
def test_the_numpy_forward_of_the_products_is_the_network(normalize):
    a, c = PLANTED_STEPS[normalize]
    model, _ = plants.eagle(a, c, normalize=normalize, heads=2, n=N, d=D)
    # a departure from EAGLE in every block of layer 1, so that more than EAGLE is run
    rng = np.random.default_rng(0)
    E = model.cfg.width
    term = 0.05 * rng.standard_normal((E, E))
    plants.add_products(model, qk=plants.product_term(model, 1, 0, slice(None), slice(None), term))
    qk, vp = layouts.state_products(model)
    geo = layouts.geometry_of(model, qk)
    for k in (1e-3, 1.0, 1e3):
        z0, _ = prompts(scale=k)
        with torch.no_grad():
            net = model(torch.from_numpy(z0)).numpy()
        pred = geo.predict(z0, qk, vp)
        assert_close(pred, net)
        Z = geo.stream(z0, qk, vp)  # (L + 1, b, T, E), internal units
        np.testing.assert_allclose(geo.readout_of(Z[-1], z0), pred, rtol=RTOL)


def test_c_d_copies_are_read_as_their_mean():
    geo = Geometry(
        regime="centralized",
        d=2,
        n=3,
        d_prime=1,
        n_prime=2,
        heads=1,
        layers=1,
        mask=np.ones((3, 3)),
        copies=3,
    )
    assert geo.width == 3 + 3 * 2 and geo.split == (3, 6)
    slots = np.arange(6.0).reshape(1, 1, 6)  # copies [0, 1], [2, 3], [4, 5]
    np.testing.assert_array_equal(geo.read_d(slots), [[[2.0, 3.0]]])  # exact: small integers
    z0 = np.arange(15.0).reshape(1, 3, 5)
    Z = geo.internal(z0)
    np.testing.assert_array_equal(Z[..., :3], z0[..., :3])  # exact: scale 1, copies
    for copy in range(3):
        np.testing.assert_array_equal(Z[..., 3 + 2 * copy : 5 + 2 * copy], z0[..., 3:])
