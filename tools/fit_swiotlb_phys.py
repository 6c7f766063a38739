#!/usr/bin/env python3
"""Fit the x86-2012-ixgbe profile on seed 004's *before* rows (Linux 3.6, swiotlb by virtual address).

Developer tool, not part of the product. Every fitted cost enters the model linearly, so no search
is needed: one probe run of scenarios/ixgbe-forwarding.toml under 3.6, with every fitted cost set
to the same probe value, gives how many units of each cost a packet charges to each symbol (calls,
or instructions for the `insn.*` costs). The CPU time per packet is cpus / before throughput (both
from the profile and data/published/swiotlb-phys.toml); each symbol's cost is its published share
of that time divided by its units (for `__phys_addr`: every call a packet makes, from swiotlb and
from the packet path alike); `ip_forward_path` is what remains. Nothing from the after rows is read. With --write the values are put into the profile (sources are left as they are).

    cargo build --release && tools/fit_swiotlb_phys.py profiles/x86-2012-ixgbe.toml [--write]
"""
import json, os, re, subprocess, sys, tomllib

ROOT = __file__.rsplit('/tools/', 1)[0]
BIN = os.path.join(os.environ.get('CARGO_TARGET_DIR', f'{ROOT}/target'), 'release', 'dmasim')
SCENARIO = f'{ROOT}/scenarios/ixgbe-forwarding.toml'
SYMBOLS = {  # profile [sw] key -> the symbol whose self time it is, as perf names it
    'swiotlb_map_page': 'swiotlb_map_page',
    'swiotlb_unmap_page': 'swiotlb_unmap_page',
    'swiotlb_sync_single_for_cpu': 'swiotlb_sync_single_for_cpu',
    'swiotlb_sync_single_for_device': 'swiotlb_sync_single_for_device',
    '__phys_addr': '__phys_addr',
    'is_swiotlb_buffer': 'is_swiotlb_buffer',
    '"insn.swiotlb_sync_single"': 'swiotlb_sync_single',
    '"insn.unmap_single"': 'unmap_single',
    '"insn.swiotlb_dma_mapping_error"': 'swiotlb_dma_mapping_error',
}
ROUTE = 'ip_forward_path'


def set_cost(text, key, cycles):
    pat = r'(?m)^(%s = \{ cycles = )[0-9.eE+-]+' % re.escape(key)
    new, n = re.subn(pat, lambda m: m.group(1) + ('%.4f' % cycles).rstrip('0').rstrip('.'), text)
    assert n == 1, key
    return new


def run(text, kernel):
    with open('/tmp/dmasim-fit-ixgbe.toml', 'w') as f:
        f.write(text)
    out = subprocess.run([BIN, 'run', SCENARIO, '--platform', '/tmp/dmasim-fit-ixgbe.toml',
                          '--kernel', kernel, '--format', 'json'],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def main():
    path = sys.argv[1]
    text = open(path).read()
    prof = tomllib.loads(text)
    freq_mhz = prof['platform']['cpu_freq_mhz']['value']
    cpus = prof['platform']['cpus']['value']
    published = tomllib.load(open(f'{ROOT}/data/published/swiotlb-phys.toml', 'rb'))
    target = {r['id']: r['value'] for r in published['row']}

    probe = 27.0  # cycles: a whole number of ns at 2.7 GHz keeps the probe free of rounding
    probe_ns = probe * 1000.0 / freq_mhz
    t = text
    for key in list(SYMBOLS) + [ROUTE]:
        t = set_cost(t, key, probe)
    doc = run(t, '3.6')
    self_ns = {s['symbol']: s['self_ns_per_packet'] for s in doc['symbols']}

    per_packet_cycles = cpus * freq_mhz * 1e6 / (target['throughput.before'] * 1e6)
    fitted = {}
    swiotlb_cycles = 0.0
    for key, sym in SYMBOLS.items():
        units = self_ns[sym] / probe_ns
        want = target[f'profile.before.{sym}'] / 100.0 * per_packet_cycles
        fitted[key] = want / units
        swiotlb_cycles += want
        print(f'{key:<36} {units:6.2f} units/packet  -> {fitted[key]:8.4f} cycles  '
              f'(fit: swiotlb-phys/profile.before.{sym})')
    fitted[ROUTE] = per_packet_cycles - swiotlb_cycles
    print(f'{ROUTE:<36} {1:6.2f} units/packet  -> {fitted[ROUTE]:8.1f} cycles  '
          f'(fit: swiotlb-phys/throughput.before; {per_packet_cycles:.1f} cycles per packet)')

    for key, v in fitted.items():
        text = set_cost(text, key, v)
    for kernel in ('3.6', '3.7'):
        d = run(text, kernel)
        shares = {s['symbol']: s['share_pct'] for s in d['symbols']}
        print(f'{kernel}: {d["mpps"]:.3f} Mpps; ' +
              ', '.join(f'{s} {shares.get(s, 0):.2f}%' for s in SYMBOLS.values()))
    if '--write' in sys.argv:
        open(path, 'w').write(text)
        print(f'wrote {path}')


if __name__ == '__main__':
    main()
