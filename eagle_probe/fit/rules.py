"""The verdict's rule table: every threshold it names and every label's condition, in one place.

In each scope the first rule of `RULES` whose condition holds on the facts decides (`decide`);
`Rule.when` states the condition as docs/extraction-schema.md's table prints it (the thresholds'
names and values), the verdict quotes it and tests/fit/test_verdict.py checks that the docs' table
is this one. The verdict (`fit.verdict`) labels feature-layout layers and models with it, the
algorithm view (`fit.algorithm`) names the sample layout's layers with it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

R2_MIN = 0.99  # a fit explains a layer when its uncentred R² reaches this
NO_STEP = 0.01  # sample layout: a layer moving x by less than this share of ‖x_L‖ takes no step
MOVES = 1e-3  # and it transforms the data when I − γ G moves G's top eigenvalue by this much
MATRIX_GAIN = 0.5  # the matrix fit must cut the polynomial fit's relative residual by this factor
SCALAR_TOL = 1e-3  # Γ is a multiple of I when ‖Γ − (tr Γ / d) I‖ / ‖Γ‖ is below this

EAGLE_GAP = 0.01  # relative one-step gap ‖Z_{l+1} − EAGLE(Z_l)‖² / ‖Z_{l+1} − Z_l‖²
LIKE_GAP = 0.5
PROJECTION_COST = 0.05  # relative MSE increase with the layer projected onto the family
# the untrained control's relative one-step gap must be at least this many times the layer's
CONTROL_FACTOR = 2.0
LIKE_PROJECTION_COST = 1.0  # the EAGLE-family model stays within 2× of the network's MSE
USED_BLOCK = (
    2.0  # an off-family block is "used" when zeroing it everywhere multiplies the MSE by this
)
# a model above this fraction of the zero predictor's MSE is no better than predicting zero
ZERO_FRACTION = 0.8

THRESHOLDS = {
    "eagle_gap": EAGLE_GAP,
    "like_gap": LIKE_GAP,
    "projection_cost": PROJECTION_COST,
    "control_factor": CONTROL_FACTOR,
    "like_projection_cost": LIKE_PROJECTION_COST,
    "used_block": USED_BLOCK,
    "zero_fraction": ZERO_FRACTION,
}
# every threshold a rule of RULES names: the verdict's and the algorithm view's
ALL_THRESHOLDS = THRESHOLDS | {
    "r2_min": R2_MIN,
    "matrix_gain": MATRIX_GAIN,
    "scalar_tol": SCALAR_TOL,
    "no_step": NO_STEP,
    "moves": MOVES,
}


# --- the rule table -------------------------------------------------------------------------------
# Every label the verdict gives comes from RULES: in each scope, the first rule whose condition
# holds on the facts decides. `when` states the condition as docs/extraction-schema.md's table
# prints it (the thresholds' names and values); the text quotes it, and tests/fit/test_verdict.py
# checks that the docs' table is this one.

SCOPES = {
    "layer": "a layer of the feature layout, in the family the views read",
    "model": "a feature-layout model",
    "fitted layer": "a layer's update of the implicit iterate, fitted three ways (view algorithm)",
    "no-step layer": "sample layout: a layer, not the last, that moves x by less than no_step "
    "({no_step}) of ‖x_L‖ but moves the data (γ λ_max ≥ moves, {moves}), named from the stream",
    "sample model": "a sample-layout model",
}


@dataclass(frozen=True)
class Rule:
    """One row of the verdict's rule table: in `scope`, `label` by rule `name` when `holds(facts)`
    (the first rule of the scope that holds decides); `when` says so in words ({threshold}
    placeholders filled by `Rule.text`)."""

    scope: str
    label: str
    name: str
    when: str
    holds: Callable[[Mapping[str, Any]], bool]

    def text(self) -> str:
        """`when` with the thresholds' values."""
        return self.when.format(**ALL_THRESHOLDS)


def _always(facts: Mapping[str, Any]) -> bool:
    return True


RULES: tuple[Rule, ...] = (
    Rule(
        "layer",
        "EAGLE",
        "idle",
        "the layer leaves the stream exactly as it was (its update and its one-step gap are both "
        "0): one EAGLE step with a = c = 0",
        lambda f: f["idle"],
    ),
    Rule(
        "layer",
        "EAGLE",
        "step",
        "relative one-step gap ≤ eagle_gap ({eagle_gap}) and the untrained control's ≥ "
        "control_factor ({control_factor}) × it (or no control)",
        lambda f: f["gap"] <= EAGLE_GAP and f["separated"],
    ),
    Rule(
        "layer",
        "EAGLE-like",
        "like",
        "relative one-step gap ≤ like_gap ({like_gap}) and the untrained control's ≥ "
        "control_factor ({control_factor}) × it (or no control)",
        lambda f: f["gap"] <= LIKE_GAP and f["separated"],
    ),
    Rule("layer", "not EAGLE", "other", "otherwise", _always),
    Rule(
        "model",
        "not EAGLE",
        "no_better_than_zero",
        "held-out MSE without its worst 0.1% of prompts not finite or above zero_fraction "
        "({zero_fraction}) × the zero predictor's: no algorithm is claimed",
        lambda f: not f["working"],
    ),
    Rule(
        "model",
        "not EAGLE",
        "control_as_good",
        "no layer fits the family clearly better than the untrained control: in every layer the "
        "control's one-step gap is below control_factor ({control_factor}) × the layer's",
        lambda f: f["control_as_good"],
    ),
    Rule(
        "model",
        "not EAGLE",
        "sends_a",
        "read as eagle-distributed while the network sends A columns between machines (view "
        "communication), which eagle-distributed never does",
        lambda f: f["sends_a"],
    ),
    Rule(
        "model",
        "not EAGLE",
        "coadapted",
        "co-adapted layers: projecting every layer onto the family costs at most "
        "like_projection_cost ({like_projection_cost:.0%}) while a layer projected alone costs "
        "more; the layers' departures cancel one another, which is not running the family",
        lambda f: f["coadapted"],
    ),
    Rule("model", "EAGLE", "every_layer", "every layer EAGLE", lambda f: f["every_eagle"]),
    Rule(
        "model",
        "EAGLE",
        "cheap_projection",
        "every layer at least EAGLE-like and projecting every layer onto the family costs at "
        "most projection_cost ({projection_cost:.0%})",
        lambda f: f["every_like"] and f["cheap"],
    ),
    Rule(
        "model",
        "EAGLE-like",
        "near_projection",
        "every layer at least EAGLE-like and projecting every layer onto the family costs at "
        "most like_projection_cost ({like_projection_cost:.0%}) (or no projection ran)",
        lambda f: f["every_like"] and f["near"],
    ),
    Rule(
        "model",
        "not EAGLE",
        "other",
        "otherwise: a layer is not EAGLE-like, or projecting every layer costs more than "
        "like_projection_cost ({like_projection_cost:.0%})",
        _always,
    ),
    Rule(
        "fitted layer",
        "GD",
        "scalar",
        "the scalar fit Δx ≈ β_0 r has R² ≥ r2_min ({r2_min})",
        lambda f: f["scalar_r2"] >= R2_MIN,
    ),
    Rule(
        "fitted layer",
        "GD++",
        "orders_0_1",
        "the polynomial fit has R² ≥ r2_min ({r2_min}) and holds orders 0 and 1",
        lambda f: f["polynomial_r2"] >= R2_MIN and {0, 1} <= set(f["orders"]),
    ),
    Rule(
        "fitted layer",
        "preconditioned GD",
        "matrix",
        "the matrix fit Δx ≈ Γ r has R² ≥ r2_min ({r2_min}) and a relative residual at most "
        "matrix_gain ({matrix_gain}) × the polynomial fit's, and Γ is not a multiple of I "
        "(departure ≥ scalar_tol, {scalar_tol})",
        lambda f: (
            f["matrix_r2"] >= R2_MIN
            and f["matrix_residual"] <= MATRIX_GAIN * f["polynomial_residual"]
            and f["departure"] >= SCALAR_TOL
        ),
    ),
    Rule(
        "fitted layer",
        "polynomial",
        "other_orders",
        "the polynomial fit has R² ≥ r2_min ({r2_min}) without order 1 (another filter)",
        lambda f: f["polynomial_r2"] >= R2_MIN,
    ),
    Rule("fitted layer", "unrecognised", "other", "otherwise: no fit explains the update", _always),
    Rule(
        "no-step layer",
        "GD++",
        "stream",
        "one GD++ layer explains its whole update (stream R² ≥ r2_min, {r2_min})",
        lambda f: f["stream_r2"] >= R2_MIN,
    ),
    Rule("no-step layer", "unrecognised", "other", "otherwise", _always),
    Rule(
        "sample model",
        "unrecognised",
        "no_better_than_zero",
        "held-out MSE without its worst 0.1% of prompts not finite or above zero_fraction "
        "({zero_fraction}) × the zero predictor's: its fits describe no working algorithm",
        lambda f: not f["working"],
    ),
    Rule(
        "sample model",
        "unrecognised",
        "unexplained_layer",
        "a layer is unrecognised (or there is no layer)",
        lambda f: "unrecognised" in f["labels"] or not f["labels"],
    ),
    Rule(
        "sample model",
        "preconditioned GD",
        "preconditioned",
        "a layer is preconditioned GD (the most general name of a layer)",
        lambda f: "preconditioned GD" in f["labels"],
    ),
    Rule(
        "sample model",
        "GD++",
        "gdpp",
        "a layer is GD++ and none is preconditioned GD",
        lambda f: "GD++" in f["labels"],
    ),
    Rule(
        "sample model",
        "polynomial",
        "polynomial",
        "a layer is polynomial and none is GD++ or preconditioned GD",
        lambda f: "polynomial" in f["labels"],
    ),
    Rule("sample model", "GD", "every_layer", "otherwise: every layer is GD", _always),
)


def decide(scope: str, facts: Mapping[str, Any]) -> Rule:
    """The rule of `scope` that labels `facts`: the first in RULES whose condition holds."""
    if scope not in SCOPES:
        raise ValueError(f"unknown verdict scope {scope!r}; choose from {', '.join(SCOPES)}")
    return next(rule for rule in RULES if rule.scope == scope and rule.holds(facts))
