#!/usr/bin/env python3
"""Fit a profile's cache-maintenance completion latency on one batched-sync row.

Developer tool, not part of the product: it bisects one latency, shared by every `cache.<op>`
section, until `dmasim run` reproduces the published map_sg reduction (read from
data/published/batched-sync.toml), all other parameters held, and prints the value and what the
unmap_sg row then predicts. Copy the value into the profile with a `fit:` source naming the row.

    cargo build --release && tools/fit_latency.py profiles/dimensity9500.toml
"""
import json, re, subprocess, sys, tomllib

ROOT = __file__.rsplit('/tools/', 1)[0]
BIN = f'{ROOT}/target/release/dmasim'
SCENARIO = f'{ROOT}/scenarios/batched-sync.toml'
FIT = ('dma_map_sg', 'map_sg.reduction')
PREDICT = ('dma_unmap_sg', 'unmap_sg.reduction')
OPS = ('clean', 'inval', 'clean_inval')


def mean(text, kernel, call):
    with open('/tmp/dmasim-fit.toml', 'w') as f:
        f.write(text)
    out = subprocess.run([BIN, 'run', SCENARIO, '--platform', '/tmp/dmasim-fit.toml', '--kernel', kernel,
                          '--format', 'json'], capture_output=True, text=True, check=True).stdout
    return {c['call']: c['mean_ns'] for c in json.loads(out)['calls']}[call]


def set_latency(text, ns):
    for op in OPS:
        pat = r'(\[cache\.%s\][^\[]*?latency = \{ ns = )[0-9.]+' % op
        text = re.sub(pat, lambda m: m.group(1) + ('%.3f' % ns), text, flags=re.S)
    return text


def reduction(text, call):
    return 100 * (1 - mean(text, '7.1', call) / mean(text, '7.0', call))


def main():
    text = open(sys.argv[1]).read()
    published = tomllib.load(open(f'{ROOT}/data/published/batched-sync.toml', 'rb'))
    target = {r['id']: r['value'] for r in published['row']}
    call, row = FIT
    lo, hi = 0.0, 1000.0
    for _ in range(40):
        mid = (lo + hi) / 2
        if reduction(set_latency(text, mid), call) < target[row]:
            lo = mid
        else:
            hi = mid
    ns = round((lo + hi) / 2, 1)
    text = set_latency(text, ns)
    print(f'cache.*.latency = {ns} ns  (fit: batched-sync/{row}; model {reduction(text, call):.3f} %, '
          f'published {target[row]} %)')
    pcall, prow = PREDICT
    print(f'prediction batched-sync/{prow}: model {reduction(text, pcall):.3f} %, published {target[prow]} %')


if __name__ == '__main__':
    main()
