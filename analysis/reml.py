"""REML variance components of a random-effects design with missing cells (crossed or nested facets).

The model is the G-study's (:mod:`analysis.gtheory`): y = μ + Σ_α u_α + e, one independent random effect per
effect α (a facet set closed under nesting), u_α ~ N(0, σ²_α I), e ~ N(0, σ² I), μ fixed. REML maximises the
restricted likelihood, as lme4's ``lmer(y ~ 1 + (1|a) + (1|a:b) …, REML = TRUE)`` does; on a complete
balanced table whose ANOVA estimates are all positive the two coincide (Searle, Casella & McCulloch 1992,
*Variance Components*, §6.8), which the tests check.

Computation (Henderson's mixed-model equations, Gilmour, Thompson & Cullis 1995 for the average information):

* C = [X'X  X'Z; Z'X  Z'Z + σ² G⁻¹] with G = diag(σ²_α I). Every effect's own block of Z'Z is diagonal, so the
  effect with the most levels is eliminated first (its block inverted element-wise) and the Schur complement
  of the rest, S, is factored densely: log|C| = Σ log d + log|S|. S has as many rows as the other effects have
  levels; 10 models × 36 wrappers × 400 items gives 4,807.
* −2 log L_R = (n − p − q) log σ² + Σ q_α log σ²_α + log|C| + y'Py (constants dropped), y'Py = y'ê/σ².
* Score: ∂L/∂σ²_α = −½ [q_α/σ²_α − tr(C^αα) σ²/σ⁴_α − û_α'û_α/σ⁴_α]; for σ²,
  −½ [(n − p − Σ_α (q_α − tr(C^αα) σ²/σ²_α))/σ² − ê'ê/σ⁴].
* Average information AI_ij = ½ w_i'P w_j with working variates w_α = Z_α û_α/σ²_α, w_e = ê/σ²; P w is got
  from one more solve of the equations. Newton steps on the AI, halved until the likelihood rises;
  a component pushed below zero is held at the boundary (reported as 0, as lme4 reports a zero θ).

The inverse AI at the optimum is the asymptotic covariance of the estimates: the intervals' Satterthwaite
degrees of freedom come from it (:mod:`analysis.intervals`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from mirrorscan.analysis.errors import AnalysisError
from mirrorscan.analysis.gtheory import RESIDUAL
from mirrorscan.analysis.long_design import Effect, LongDesign

MAX_ITERATIONS = 200
TOLERANCE = 1e-9          # relative change of −2 log L_R and of every estimate at convergence
BOUNDARY = 1e-10          # a component below this fraction of the score variance is on the boundary (0)
MAX_DENSE_LEVELS = 12_000  # levels outside the largest effect that the dense Schur complement may hold


@dataclass(frozen=True)
class RemlFit:
    """REML estimates of every component of a design, with what the intervals and imputation need."""

    names: tuple[str, ...]
    """Component names: effects as :class:`analysis.gtheory.Component` names them, ``residual`` last."""
    estimates: np.ndarray
    """σ² per component in squared score units, ≥ 0 (a component on the boundary is exactly 0)."""
    covariance: np.ndarray = field(repr=False)
    """Asymptotic covariance of the estimates (inverse average information); rows of boundary ones are 0."""
    intercept: float
    """μ̂, the generalised-least-squares mean, in score units."""
    blups: Mapping[str, np.ndarray] = field(repr=False)
    """Effect name → predicted random effect per observed level (order of :attr:`Effect.keys`), score units."""
    effects: tuple[Effect, ...] = field(repr=False)
    """The design's effects (without the residual), in the order of ``names``."""
    deviance: float
    """−2 × restricted log-likelihood at the estimates, including the constant (n − p) log 2π."""
    iterations: int
    """Newton (average-information) iterations taken."""

    def estimate(self, name: str) -> float:
        """σ² of one component by name."""
        return float(self.estimates[self.names.index(name)])


class _Equations:
    """The mixed-model equations of one design with the largest effect eliminated first."""

    def __init__(self, design: LongDesign):
        import scipy.sparse as sp

        self.y = design.scores
        n = self.y.size
        self.effects = tuple(design.effects())
        if not self.effects:
            raise AnalysisError(",".join(design.facets), "no random effect besides the residual", "add a facet")
        self.big = max(range(len(self.effects)), key=lambda k: self.effects[k].levels)
        rest = [k for k in range(len(self.effects)) if k != self.big]
        self.rest = rest
        q_rest = sum(self.effects[k].levels for k in rest)
        if q_rest > MAX_DENSE_LEVELS:
            raise AnalysisError(",".join(design.facets), f"{q_rest:,} levels outside the largest effect "
                                f"({self.effects[self.big].name}); REML here holds at most {MAX_DENSE_LEVELS:,}",
                                "analyse fewer levels at a time (e.g. per model) or drop an interaction facet")
        # columns of the rest: intercept, then each other effect's levels
        self.offsets = {}
        cols = [np.zeros(n, dtype=np.int64)]
        start = 1
        for k in rest:
            self.offsets[k] = start
            cols.append(self.effects[k].codes + start)
            start += self.effects[k].levels
        self.r = start
        rows = np.repeat(np.arange(n), len(cols))
        zr = sp.csr_matrix((np.ones(n * len(cols)), (rows, np.stack(cols, axis=1).ravel())), shape=(n, self.r))
        zb = sp.csr_matrix((np.ones(n), (np.arange(n), self.effects[self.big].codes)),
                           shape=(n, self.effects[self.big].levels))
        self.zr, self.zb = zr, zb
        self.crr = (zr.T @ zr).toarray()
        self.crb = (zr.T @ zb).tocsr()
        self.nb = np.asarray(zb.sum(axis=0)).ravel()
        self.ry, self.by = zr.T @ self.y, zb.T @ self.y
        self.n, self.p = n, 1

    def factor(self, lam: np.ndarray):
        """Factor C for residual-to-effect variance ratios ``lam`` (one per effect); returns the pieces."""
        from scipy.linalg import cho_factor

        d = self.nb + lam[self.big]
        s = self.crr.copy()
        idx = np.arange(self.r)
        diag = np.zeros(self.r)
        for k in self.rest:
            o = self.offsets[k]
            diag[o:o + self.effects[k].levels] = lam[k]
        s[idx, idx] += diag
        f = self.crb.multiply(1.0 / d[None, :]).tocsr()
        s -= (f @ self.crb.T).toarray()
        try:
            chol = cho_factor(s, lower=True, check_finite=False)
        except np.linalg.LinAlgError:
            raise AnalysisError("score", "the mixed-model equations are singular at these variances",
                                "check that no facet is a relabelling of another") from None
        logdet = float(np.sum(np.log(d)) + 2 * np.sum(np.log(np.diag(chol[0]))))
        return d, chol, logdet

    def solve(self, d, chol, rr: np.ndarray, rb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Solve C [x_rest; x_big] = [rr; rb] with the factored pieces."""
        from scipy.linalg import cho_solve

        xr = cho_solve(chol, rr - self.crb @ (rb / d), check_finite=False)
        xb = (rb - self.crb.T @ xr) / d
        return xr, xb

    def residual(self, xr: np.ndarray, xb: np.ndarray, v: np.ndarray) -> np.ndarray:
        """v − X b − Z u for a solution (xr, xb)."""
        return v - self.zr @ xr - self.zb @ xb

    def traces(self, d, chol) -> np.ndarray:
        """tr(C^αα) of each effect's diagonal block of C⁻¹."""
        from scipy.linalg.lapack import dpotri

        inv, info = dpotri(chol[0], lower=1)
        if info:
            raise AnalysisError("score", "the mixed-model equations could not be inverted", "check the design")
        inv = np.tril(inv) + np.tril(inv, -1).T
        out = np.zeros(len(self.effects))
        dg = np.diag(inv)
        for k in self.rest:
            o = self.offsets[k]
            out[k] = dg[o:o + self.effects[k].levels].sum()
        m = self.crb.multiply(1.0 / d[None, :]).tocsr()
        m = (m @ m.T).tocoo()
        out[self.big] = float(np.sum(1.0 / d) + np.sum(inv[m.row, m.col] * m.data))
        return out


class _Point:
    """The equations factored at one set of variances: −2 log L_R at once, score and AI when asked."""

    def __init__(self, eq: _Equations, var: np.ndarray):
        self.eq, self.var = eq, var
        self.s2 = var[-1]
        self.lam = self.s2 / var[:-1]
        self.d, self.chol, logdet = eq.factor(self.lam)
        self.xr, self.xb = eq.solve(self.d, self.chol, eq.ry, eq.by)
        self.e = eq.residual(self.xr, self.xb, eq.y)
        self.q = np.array([ef.levels for ef in eq.effects], dtype=np.float64)
        n, p = eq.n, eq.p
        ypy = float(eq.y @ self.e) / self.s2
        self.deviance = float((n - p - self.q.sum()) * math.log(self.s2) + np.sum(self.q * np.log(var[:-1]))
                              + logdet + ypy + (n - p) * math.log(2 * math.pi))

    def blup(self, k: int) -> np.ndarray:
        """Predicted random effects of effect k, one per observed level."""
        if k == self.eq.big:
            return self.xb
        o = self.eq.offsets[k]
        return self.xr[o:o + self.eq.effects[k].levels]

    def score_and_information(self) -> tuple[np.ndarray, np.ndarray]:
        """∂ log L_R / ∂σ² per component and the average information matrix (module docstring)."""
        eq, var, s2, q, e = self.eq, self.var, self.s2, self.q, self.e
        n, p = eq.n, eq.p
        u = [self.blup(k) for k in range(len(eq.effects))]
        tr = eq.traces(self.d, self.chol)
        self._em = (np.array([float(x @ x) for x in u]), tr)
        score = np.empty(var.size)
        for k in range(len(eq.effects)):
            score[k] = -0.5 * (q[k] / var[k] - tr[k] * s2 / var[k] ** 2 - float(u[k] @ u[k]) / var[k] ** 2)
        score[-1] = -0.5 * ((n - p - np.sum(q - tr * self.lam)) / s2 - float(e @ e) / s2 ** 2)
        work = [u[k][ef.codes] / var[k] for k, ef in enumerate(eq.effects)] + [e / s2]
        pw = []
        for w in work:
            wr, wb = eq.solve(self.d, self.chol, eq.zr.T @ w, eq.zb.T @ w)
            pw.append(eq.residual(wr, wb, w) / s2)
        ai = 0.5 * np.array([[float(wi @ pj) for pj in pw] for wi in work])
        return score, (ai + ai.T) / 2

    def em_step(self) -> np.ndarray:
        """The EM-REML update from here (after ``score_and_information``): σ²_α ← (û_α'û_α + tr(C^αα) σ²)/q_α,
        σ² ← y'ê/(n − p). Never leaves the positive orthant and never lowers the likelihood: the fallback when
        the Newton step is not usable."""
        uu, tr = self._em
        new = np.empty_like(self.var)
        new[:-1] = (uu + tr * self.s2) / self.q
        new[-1] = float(self.eq.y @ self.e) / (self.eq.n - self.eq.p)
        return new


def _point_or_none(eq: _Equations, var: np.ndarray) -> _Point | None:
    """The equations at ``var``, or None where they cannot be factored (a trial step too far)."""
    try:
        return _Point(eq, var)
    except AnalysisError:
        return None


def _boundary_jump(eq: _Equations, point: _Point, score: np.ndarray, floor: float) -> _Point | None:
    """Where the Newton step is unusable (a component heading for zero flattens the information), try putting
    each component whose score pulls it down on the boundary; the best such point if it lowers the deviance."""
    best = None
    for k in np.flatnonzero((score < 0) & (point.var > floor * 1.000001)):
        var = point.var.copy()
        var[k] = floor
        candidate = _point_or_none(eq, var)
        if candidate is not None and candidate.deviance < (best or point).deviance:
            best = candidate
    return best


def reml(design: LongDesign, start: np.ndarray | None = None) -> RemlFit:
    """REML estimates of every variance component of ``design`` (all facets random), squared score units.

    Missing cells and replicates are allowed; the object of measurement is one more random facet, as in a
    G-study. Returns the estimates (boundary ones 0), their asymptotic covariance, μ̂ and the BLUPs.
    """
    eq = _Equations(design)
    k = len(eq.effects)
    total = float(np.var(design.scores))
    if not total > 0:
        raise AnalysisError("score", "every score is the same", "nothing varies: there is no component to estimate")
    floor = BOUNDARY * total
    var = np.full(k + 1, total / (k + 1)) if start is None else np.maximum(np.asarray(start, float), floor)
    point = _Point(eq, var)
    score, ai = point.score_and_information()
    it = 0
    for it in range(1, MAX_ITERATIONS + 1):
        var = point.var
        held = (var <= floor * 1.000001) & (score < 0)
        free = ~held
        step = np.zeros_like(var)
        sub = ai[np.ix_(free, free)]
        newton = bool(free.any()) and bool(np.all(np.linalg.eigvalsh(sub) > 0))
        if newton:
            try:
                step[free] = np.linalg.solve(sub, score[free])
            except np.linalg.LinAlgError:
                newton = False
            else:
                newton = bool(np.all(np.abs(step) <= 10 * np.maximum(var, total)))   # an absurd step is no step
        trial = None
        if newton:
            for _ in range(30):
                candidate = _point_or_none(eq, np.maximum(var + step, floor))
                if candidate is not None and candidate.deviance <= point.deviance + 1e-12 * abs(point.deviance):
                    trial = candidate
                    break
                step /= 2
        if trial is None:
            trial = _boundary_jump(eq, point, score, floor)
        if trial is None:                                     # EM: slower, but it always moves uphill
            trial = _point_or_none(eq, np.maximum(point.em_step(), floor))
            if trial is None or trial.deviance > point.deviance + 1e-12 * abs(point.deviance):
                break                                         # nothing lowers the deviance: at the optimum
        change = float(np.max(np.abs(trial.var - var) / np.maximum(var, total * 1e-6)))
        small = abs(point.deviance - trial.deviance) <= TOLERANCE * max(1.0, abs(point.deviance))
        point = trial
        score, ai = point.score_and_information()
        if small and change < 1e-6:
            break
    var = point.var
    boundary = var <= floor * 1.000001
    est = np.where(boundary, 0.0, var)
    cov = np.zeros((k + 1, k + 1))
    free = ~boundary
    if free.any():
        try:
            cov[np.ix_(free, free)] = np.linalg.inv(ai[np.ix_(free, free)])
        except np.linalg.LinAlgError:
            cov[np.ix_(free, free)] = np.nan
    blups = {ef.name: point.blup(j) for j, ef in enumerate(eq.effects)}
    names = tuple(ef.name for ef in eq.effects) + (RESIDUAL,)
    return RemlFit(names, est, cov, float(point.xr[0]), blups, eq.effects, point.deviance, it)


def fitted_full_design(design: LongDesign, fit: RemlFit) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The full design's cells and, for each, the fitted conditional mean μ̂ + Σ_α û_α (a level never observed
    contributes 0, its prior mean). Codes per facet, and values in score units."""
    cells = design.full_design()
    value = np.full(len(next(iter(cells.values()))), fit.intercept)
    for ef in fit.effects:
        key = design.key(ef.facets, cells)
        pos = np.searchsorted(ef.keys, key)
        pos = np.minimum(pos, len(ef.keys) - 1)
        hit = ef.keys[pos] == key
        value[hit] += fit.blups[ef.name][pos[hit]]
    return cells, value


def full_design_means(design: LongDesign, fit: RemlFit) -> np.ndarray:
    """Each object's mean over the full design, observed cells at their observed mean and missing cells at the
    fitted value (score units, one per object label). On a complete table it is the object's plain mean."""
    cells, fitted = fitted_full_design(design, fit)
    all_facets = frozenset(design.facets)
    key_full = design.key(all_facets, cells)
    key_obs = design.key(all_facets, design.codes)
    uk, inv = np.unique(key_obs, return_inverse=True)
    sums = np.bincount(inv.ravel(), weights=design.scores, minlength=len(uk))
    counts = np.bincount(inv.ravel(), minlength=len(uk))
    pos = np.minimum(np.searchsorted(uk, key_full), len(uk) - 1)
    hit = uk[pos] == key_full
    value = fitted.copy()
    value[hit] = sums[pos[hit]] / counts[pos[hit]]
    obj = cells[design.object]
    n_obj = len(design.labels[design.object])
    return np.bincount(obj, weights=value, minlength=n_obj) / np.bincount(obj, minlength=n_obj)
