#!/usr/bin/env python3
"""Fit the sm8150 profile's free parameters on seed 001 rows (smmu-walk-flush).

Developer tool, not part of the product. It runs `dmasim run scenarios/smmu-walk-flush.toml` with a
candidate profile under walk_flush=by-va (before) and asid (after), reads the published targets
from data/published/smmu-walk-flush.toml, and fits six parameters; every other parameter is held.

  equal to the target:   sw.iommu_map_sg, sw.arm_lpae_map_pages, smmu.mmio_write
                         on map_sg.4K and map_sg.32M (the mean of before and after: the policy does
                         not touch map, so one model value stands for both) and unmap.32M.before
  minimax rel. error:    sw.iommu_unmap, sw.arm_lpae_unmap_pages, sw.arm_lpae_free_table
                         on unmap.4K.*, unmap.1M.* , unmap.2M.after, unmap.32M.after

The model is linear in these costs as long as every TLBSTATUS poll sees completion on its first
read (the held SMMU-side costs are below one read), so the fit linearises it by finite differences,
solves the three equalities and grid-searches the minimax, then re-linearises around the result.
It prints the values (copy them into the profile) and every row's error.

    cargo build --release && tools/fit_smmu.py profiles/sm8150.toml [--write]
"""
import json, re, subprocess, sys, tomllib

ROOT = __file__.rsplit('/tools/', 1)[0]
BIN = f'{ROOT}/target/release/dmasim'
SCENARIO = f'{ROOT}/scenarios/smmu-walk-flush.toml'
TMP = '/tmp/dmasim-fit-sm8150.toml'
SIZES = ['4K', '64K', '1M', '2M', '12M', '16M', '24M', '32M']

EQ_KNOBS = ['iommu_map_sg', 'arm_lpae_map_pages', 'mmio_write']
MM_KNOBS = ['iommu_unmap', 'arm_lpae_unmap_pages', 'arm_lpae_free_table']
EQ_ROWS = ['map_sg.4K', 'map_sg.32M', 'unmap.32M.before']
MM_ROWS = ['unmap.4K.before', 'unmap.4K.after', 'unmap.1M.before', 'unmap.1M.after',
           'unmap.2M.after', 'unmap.32M.after']


def knob_re(k):
    return re.compile(r'(?m)^(%s = \{ ns = )([0-9.]+)' % re.escape(k))


def get(text, k):
    return float(knob_re(k).search(text).group(2))


def put(text, k, ns):
    return knob_re(k).sub(lambda m: m.group(1) + ('%.3f' % max(ns, 0.0)), text, count=1)


def run(text, policy):
    with open(TMP, 'w') as f:
        f.write(text)
    out = subprocess.run([BIN, 'run', SCENARIO, '--platform', TMP, '--policy', policy,
                          '--format', 'json'], capture_output=True, text=True, check=True).stdout
    return {o['label']: o['mean_ns'] / 1000.0 for o in json.loads(out)['ops']}


def model(text):
    b, a = run(text, 'walk_flush=by-va'), run(text, 'walk_flush=asid')
    m = {}
    for s in SIZES:
        m[f'map_sg.{s}'] = b[f'map_sg {s}']
        m[f'map_sg.{s}.before'], m[f'map_sg.{s}.after'] = b[f'map_sg {s}'], a[f'map_sg {s}']
        m[f'unmap.{s}.before'], m[f'unmap.{s}.after'] = b[f'unmap {s}'], a[f'unmap {s}']
    return m


def targets():
    pub = tomllib.load(open(f'{ROOT}/data/published/smmu-walk-flush.toml', 'rb'))
    t = {r['id']: r['value'] for r in pub['row']}
    for s in SIZES:
        a, b = t[f'map_sg.{s}.before'], t[f'map_sg.{s}.after']
        t[f'map_sg.{s}'] = 2 * a * b / (a + b)  # equal relative error to both
    return t


def solve3(a, b):
    """Solve the 3x3 system a x = b (Cramer's rule)."""
    def det(m):
        return (m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1])
                - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
                + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]))
    d = det(a)
    out = []
    for i in range(3):
        m = [row[:] for row in a]
        for r in range(3):
            m[r][i] = b[r]
        out.append(det(m) / d)
    return out


def fit_once(text, t):
    knobs = EQ_KNOBS + MM_KNOBS
    x0 = {k: get(text, k) for k in knobs}
    m0 = model(text)
    rows = EQ_ROWS + MM_ROWS
    jac = {}
    for k in knobs:
        h = 0.05 * 1000 if k == 'arm_lpae_alloc_table' else 50.0
        m1 = model(put(text, k, x0[k] + h))
        jac[k] = {r: (m1[r] - m0[r]) / (h / 1000.0) for r in rows}  # µs per µs

    def lin(r, x):
        return m0[r] + sum(jac[k][r] * (x[k] - x0[k]) / 1000.0 for k in knobs)

    a_eq = [[jac[k][r] for k in EQ_KNOBS] for r in EQ_ROWS]
    best = None
    span = {'iommu_unmap': (0, 3000), 'arm_lpae_unmap_pages': (0, 1000),
            'arm_lpae_free_table': (0, 5000)}
    for _ in range(4):
        grids = {k: [lo + (hi - lo) * i / 30 for i in range(31)] for k, (lo, hi) in span.items()}
        for u in grids['iommu_unmap']:
            for p in grids['arm_lpae_unmap_pages']:
                for f in grids['arm_lpae_free_table']:
                    x = dict(x0, iommu_unmap=u, arm_lpae_unmap_pages=p, arm_lpae_free_table=f)
                    rhs = [t[r] - lin(r, x) for r in EQ_ROWS]
                    d = solve3(a_eq, rhs)
                    for k, dv in zip(EQ_KNOBS, d):
                        x[k] = x0[k] + dv * 1000.0
                    if min(x.values()) < 0:
                        continue
                    err = max(abs(lin(r, x) / t[r] - 1) for r in MM_ROWS)
                    if best is None or err < best[0]:
                        best = (err, x)
        span = {k: (max(0, best[1][k] - (hi - lo) / 10), best[1][k] + (hi - lo) / 10)
                for k, (lo, hi) in span.items()}
    for k in knobs:
        text = put(text, k, best[1][k])
    return text


def main():
    path = sys.argv[1]
    text = open(path).read()
    t = targets()
    for _ in range(2):
        text = fit_once(text, t)
    m = model(text)
    for k in EQ_KNOBS + MM_KNOBS:
        print(f'{k:<24} {get(text, k):10.3f} ns')
    worst = 0
    for r in sorted(t):
        if r in m and (r.endswith('.before') or r.endswith('.after')):
            e = (m[r] / t[r] - 1) * 100
            worst = max(worst, abs(e))
            tag = 'fit' if r in MM_ROWS or r in EQ_ROWS or r.rsplit('.', 1)[0] in EQ_ROWS else ''
            print(f'{r:<22} published {t[r]:10.3f}  model {m[r]:10.3f}  {e:+6.2f} %  {tag}')
    print(f'worst |error| {worst:.2f} %')
    if '--write' in sys.argv:
        open(path, 'w').write(text)
        print(f'wrote {path}')


if __name__ == '__main__':
    main()
