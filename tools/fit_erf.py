#!/usr/bin/env python3
"""Fits the approximate f32 erf's polynomials (compiler/codegen/src/approximate_erf.cc) and
prints them as C++ hexadecimal float literals, with the error of their f32 evaluation.

  python3 tools/fit_erf.py [--clamp 3.925] [--numerator 7] [--denominator 5]

erf(x) = x P(x^2) / Q(x^2) on [0, clamp], Q(0) = 1. The fit minimises the largest relative
error of P / Q against erf(x) / x (so that erf keeps its relative accuracy near 0): linear
least squares on P - f Q, reweighted each round by the error so far (Lawson's iteration
towards the minimax fit), the best round kept. The coefficients are then rounded to f32 and
evaluated as the codegen does (f32 fused multiply-adds by Horner's rule, the quotient of f32
values), and the largest relative error over a grid of [0, 5] and of small magnitudes is
printed: what tests/compiler/e2e/e2e_approximate_erf_test.cc then holds the emitted code to on
the emulator. Needs numpy.
"""
import argparse
import math

import numpy as np


def fit(terms_p, terms_q, clamp, rounds=80, points=40001):
    xs = np.linspace(1e-4, clamp, points)
    f = np.array([math.erf(x) / x for x in xs])
    z = xs * xs
    weights = np.ones_like(xs)
    q_values = np.ones_like(xs)
    best = None
    for _ in range(rounds):
        a = np.hstack([np.vstack([z ** i for i in range(terms_p)]).T,
                       -np.vstack([f * z ** j for j in range(1, terms_q)]).T])
        scale = np.sqrt(weights) / (f * q_values)
        coef, *_ = np.linalg.lstsq(a * scale[:, None], f * scale, rcond=None)
        p, q = coef[:terms_p], np.concatenate([[1.0], coef[terms_p:]])
        q_values = np.polyval(q[::-1], z)
        error = np.abs((np.polyval(p[::-1], z) / q_values - f) / f)
        if best is None or error.max() < best[0]:
            best = (error.max(), p.copy(), q.copy())
        weights = weights * (error / error.max() + 1e-3)
        weights /= weights.mean()
    return best


def f32_erf(p, q, clamp, x):
    """The codegen's evaluation of one argument, in f32 (each FMA rounded once)."""
    f32 = np.float32
    x = f32(min(max(f32(x), f32(-clamp)), f32(clamp)))
    z = f32(x * x)

    def horner(c):
        acc = f32(c[-1])
        for k in c[-2::-1]:
            acc = f32(float(acc) * float(z) + float(f32(k)))
        return acc

    return float(f32(f32(x * horner(p)) / horner(q)))


def literal(v):
    mantissa, exponent = abs(float(np.float32(v))).hex().split("p")
    mantissa = mantissa.rstrip("0").rstrip(".")
    return ("-" if v < 0 else "") + mantissa + "p" + exponent + "f"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clamp", type=float, default=3.925)
    ap.add_argument("--numerator", type=int, default=7, help="terms of P")
    ap.add_argument("--denominator", type=int, default=5, help="terms of Q, Q(0) = 1")
    args = ap.parse_args()
    fitted, p, q = fit(args.numerator, args.denominator, args.clamp)
    p = [float(np.float32(c)) for c in p]
    q = [float(np.float32(c)) for c in q]
    xs = np.concatenate([np.linspace(0, 5, 200001), np.geomspace(1e-30, 1, 20001)])
    worst, at = 0.0, 0.0
    for x in xs:
        exact = math.erf(float(np.float32(x)))
        if exact == 0:
            continue
        e = abs(f32_erf(p, q, args.clamp, x) - exact) / abs(exact)
        if e > worst:
            worst, at = e, x
    print("numerator   =", ", ".join(literal(c) for c in p))
    print("denominator =", ", ".join(literal(c) for c in q))
    print(f"largest relative error: {fitted:.3g} fitted in double, "
          f"{worst:.3g} evaluated in f32 (at {at:.7g})")


if __name__ == "__main__":
    main()
