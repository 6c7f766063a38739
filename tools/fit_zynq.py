#!/usr/bin/env python3
"""Fit the zynq7000 profile's two fitted costs on the first round of seed 002's sync timings.

Developer tool, not part of the product. The model is linear in each cost, so two runs give each
row's line; the tool solves, rounds to 0.1 ns, and prints the values and what every row then
gives. Copy the values into profiles/zynq7000.toml with the `fit:` sources it prints.

1. outer_cache.{clean,inval,clean_inval}_line — one value for the PL310's three by-PA line
   operations (one register write each, the same atomic line operation): least squares of the
   relative errors on zynq-coherent-streaming/for_device.from_device.1 and
   zynq-coherent-streaming/for_cpu.from_device.1 (the invalidates, where nothing is dirty).
2. cache_model.l2_writeback — one dirty PL310 line written to DDR: on
   zynq-coherent-streaming/for_device.to_device.1 (the clean after the program wrote the block).

Round two's rows, for_cpu(TO_DEVICE) and the per-MB overhead are then predictions.

    cargo build --release && tools/fit_zynq.py profiles/zynq7000.toml
"""
import json, os, re, subprocess, sys, tomllib

ROOT = __file__.rsplit('/tools/', 1)[0]
BIN = os.environ.get('DMASIM', f'{ROOT}/target/release/dmasim')
SCENARIO = open(f'{ROOT}/scenarios/zynq-streaming.toml').read()
EXP = 'zynq-coherent-streaming'
LINE_KEYS = ('clean_line', 'inval_line', 'clean_inval_line')


def mean_us(profile, direction, call):
    cpu = 'write_all' if direction == 'to_device' else 'read_all'
    text = re.sub(r'direction = "\w+"', f'direction = "{direction}"', SCENARIO)
    text = re.sub(r'calls = "[^"]+"', 'calls = "sync_single_for_device+for_cpu"', text)
    text = re.sub(r'iterations = \d+', f'iterations = 1\ncpu = "{cpu}"', text)
    text = text.replace('platform = "zynq7000"', 'platform = "/tmp/dmasim-fit-zynq.toml"')
    with open('/tmp/dmasim-fit-zynq.toml', 'w') as f:
        f.write(profile)
    with open('/tmp/dmasim-fit-zynq-scenario.toml', 'w') as f:
        f.write(text)
    out = subprocess.run([BIN, 'run', '/tmp/dmasim-fit-zynq-scenario.toml', '--format', 'json'],
                         capture_output=True, text=True, check=True).stdout
    return {c['call']: c['mean_ns'] for c in json.loads(out)['calls']}[call] / 1000


def set_line(text, ns, source):
    for k in LINE_KEYS:
        text = re.sub(r'^%s = \{ ns = [0-9.]+, source = "[^"]*" \}' % k,
                      '%s = { ns = %.1f, source = "%s" }' % (k, ns, source), text, flags=re.M)
    return text


def set_wb(text, ns, source):
    return re.sub(r'^l2_writeback = \{ ns = [0-9.]+, source = "[^"]*" \}',
                  'l2_writeback = { ns = %.1f, source = "%s" }' % (ns, source), text, flags=re.M)


ROWS = {
    'for_device.to_device': ('to_device', 'dma_sync_single_for_device'),
    'for_device.from_device': ('from_device', 'dma_sync_single_for_device'),
    'for_cpu.from_device': ('from_device', 'dma_sync_single_for_cpu'),
    'for_cpu.to_device': ('to_device', 'dma_sync_single_for_cpu'),
}


def main():
    text = open(sys.argv[1]).read()
    pub = {r['id']: r['value'] for r in tomllib.load(open(f'{ROOT}/data/published/{EXP}.toml', 'rb'))['row']}
    line_src = ('fit: %s/for_device.from_device.1, %s/for_cpu.from_device.1 (least squares of the relative '
                'errors, tools/fit_zynq.py); one value for the PL310\'s three by-PA operations, each one '
                'register write and the same atomic line operation' % (EXP, EXP))
    wb_src = ('fit: %s/for_device.to_device.1 (tools/fit_zynq.py): one dirty 32-byte PL310 line written '
              'to DDR3 on the CPU\'s time (the by-PA clean is atomic), after the program wrote the block' % EXP)
    # 1. The by-PA line cost on the two first-round invalidates.
    fit_rows = ['for_device.from_device', 'for_cpu.from_device']
    a, b = {}, {}
    for r in fit_rows:
        t0 = mean_us(set_line(text, 0.0, line_src), *ROWS[r])
        t1 = mean_us(set_line(text, 100.0, line_src), *ROWS[r])
        a[r], b[r] = t0, (t1 - t0) / 100.0
    num = sum(b[r] * (pub[r + '.1'] - a[r]) / pub[r + '.1'] ** 2 for r in fit_rows)
    den = sum(b[r] ** 2 / pub[r + '.1'] ** 2 for r in fit_rows)
    line = round(num / den, 1)
    text = set_line(text, line, line_src)
    # 2. The PL310's writeback on the first-round clean.
    r = 'for_device.to_device'
    t0 = mean_us(set_wb(text, 0.0, wb_src), *ROWS[r])
    t1 = mean_us(set_wb(text, 100.0, wb_src), *ROWS[r])
    wb = round((pub[r + '.1'] - t0) / ((t1 - t0) / 100.0), 1)
    text = set_wb(text, wb, wb_src)
    print(f'outer_cache.{{{",".join(LINE_KEYS)}}} = {line} ns')
    print(f'cache_model.l2_writeback = {wb} ns')
    for r, (d, call) in ROWS.items():
        m = mean_us(text, d, call)
        print(f'  {r:<24} model {m:9.1f} µs   published {pub[r + ".1"]:7.0f} / {pub[r + ".2"]:7.0f}')
    if len(sys.argv) > 2 and sys.argv[2] == '--write':
        open(sys.argv[1], 'w').write(text)
        print(f'written to {sys.argv[1]}')


if __name__ == '__main__':
    main()
